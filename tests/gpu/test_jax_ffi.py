"""The XLA FFI example (examples/jax_ffi): built with build.sh against
jax.ffi.include_dir(), no link-time dependency on libvpmm (readelf), run
under jit on a GPU: y = 2x + 1 through scratch memory from the default pool,
which counts the plugin's malloc. Exit 77 (SKIP) without JAX, a JAX GPU
device or nvcc."""
import os
import shutil
import subprocess
import sys
import tempfile

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
here = os.path.dirname(os.path.abspath(__file__))
repo = os.path.normpath(os.path.join(here, "..", ".."))
sys.path.insert(0, os.path.join(repo, "examples", "jax_ffi"))
import pyharness  # noqa: E402  (also puts bindings/python on sys.path)

gpus = pyharness.jax_gpus_or_skip()
import numpy as np  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
if not os.environ.get("VPMM_LIBRARY"):
    sys.exit("FAIL: VPMM_LIBRARY must name the libvpmm.so.1 under test (meson sets it)")

out = tempfile.mkdtemp(prefix="vpmm_jax_ffi_")
build = subprocess.run(["sh", os.path.join(repo, "examples", "jax_ffi", "build.sh"), out],
                       env=dict(os.environ, PYTHON=sys.executable), capture_output=True, text=True)
print(build.stdout + build.stderr, flush=True)
if build.returncode == 77:
    pyharness.skip("build.sh: " + build.stdout.strip())
if build.returncode != 0:
    sys.exit(f"FAIL: build.sh exited {build.returncode}")
so = os.path.join(out, "libvpmm_scratch_ffi.so")

tally = pyharness.Tally()
check = tally.check


if shutil.which("readelf"):
    needed = subprocess.run(["readelf", "-d", so], capture_output=True, text=True).stdout
    check("libvpmm" not in needed, "the plugin has no NEEDED libvpmm")

import vpmm  # noqa: E402  (the same libvpmm file as the plugin's loader opens)
import vpmm_scratch  # noqa: E402

vpmm_scratch.register(so)
dev = gpus[0]
ordinal = dev.local_hardware_id if getattr(dev, "local_hardware_id", None) is not None else dev.id
n_malloc = vpmm.default_pool_stats(ordinal)["n_malloc"]
x = jax.device_put(jnp.arange(1 << 20, dtype=jnp.float32), dev)
y = jax.jit(vpmm_scratch.scratch_affine)(x)
np.testing.assert_allclose(np.asarray(y), 2.0 * np.arange(1 << 20, dtype=np.float32) + 1.0)
tally.ok()
y2 = jax.jit(vpmm_scratch.scratch_affine)(y)  # twice: the scratch is reused in stream order
np.testing.assert_allclose(np.asarray(y2), 4.0 * np.arange(1 << 20, dtype=np.float32) + 3.0)
tally.ok()
stats = vpmm.default_pool_stats(ordinal)
check(stats["n_malloc"] >= n_malloc + 2, "the plugin's scratch came from the default pool")
check(stats["n_free"] >= 2, "and went back to it")
shutil.rmtree(out, ignore_errors=True)
tally.finish()
