"""vpmm.jax on a GPU: jax.Arrays in the default pool, zero-copy (the array's
buffer pointer is the pool allocation), used by jit, paused and resumed at
the same address with their bytes (host backup), and given back to the pool
after JAX releases them. Exit 77 (SKIP) without JAX or a JAX GPU device."""
import gc
import os
import sys
import time

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # leave the GPU to the pool
import pyharness  # noqa: E402  (also puts bindings/python on sys.path)

gpus = pyharness.jax_gpus_or_skip()
import numpy as np  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

import vpmm  # noqa: E402
import vpmm.jax as vj  # noqa: E402

tally = pyharness.Tally()
check = tally.check


dev = gpus[0]
ordinal = dev.local_hardware_id if getattr(dev, "local_hardware_id", None) is not None else dev.id
print(f"jax {jax.__version__} on {dev}, libvpmm {vpmm.version()}", flush=True)

w_host = np.random.default_rng(0).standard_normal((1024, 1024), dtype=np.float32)
w = vj.asarray(w_host, tag="weights", host_backup=True, device=dev)
ptr = vj.pointer(w)
check(vj.pool_address(w, device=dev), "the array's buffer is default-pool memory (zero-copy)")
check(w.devices() == {dev} and w.shape == (1024, 1024) and w.dtype == jnp.float32, "device, shape, dtype")
np.testing.assert_array_equal(np.asarray(w), w_host)
tally.ok()

f = jax.jit(lambda a: a * 2.0 + 1.0)
np.testing.assert_allclose(np.asarray(f(w)), w_host * 2.0 + 1.0, rtol=1e-6)
tally.ok()

kv = vj.zeros((64, 1024), np.float16, tag="kv", device=dev)
check(vj.pool_address(kv, device=dev) and float(jnp.abs(kv).sum()) == 0.0, "zeros in pool memory")

# Pause: physical memory released, bytes in host memory; resume: same address, same bytes.
before = vpmm.default_pool_stats(ordinal)
check(vj.pause("weights", device=dev) == 1, "pause('weights') paused one region")
mid = vpmm.default_pool_stats(ordinal)
check(mid["paused_bytes"] >= w_host.nbytes, "paused bytes counted")
check(mid["mapped_bytes"] + w_host.nbytes <= before["mapped_bytes"], "physical memory released")
check(vj.resume("weights", device=dev) == 1, "resume('weights') resumed one region")
check(vj.pointer(w) == ptr, "same address after resume")
np.testing.assert_array_equal(np.asarray(w), w_host)
tally.ok()
np.testing.assert_allclose(np.asarray(f(w)), w_host * 2.0 + 1.0, rtol=1e-6)
tally.ok()

# Without a backup the contents are undefined after resume, but the array is usable.
check(vj.pause("kv", device=dev) == 1 and vj.resume("kv", device=dev) == 1, "kv pause/resume")
kv.block_until_ready()
float(kv.astype(jnp.float32).sum())  # reads the resumed memory: must not fault

# Ownership: JAX releases the buffer, collect() gives it back to the pool.
n_free = vpmm.default_pool_stats(ordinal)["n_free"]
del w
gc.collect()
freed = 0
for _ in range(100):  # the deleter may run on an XLA thread a little later
    freed += vj.collect()
    if freed:
        break
    time.sleep(0.05)
check(freed >= 1, "the pool allocation is freed after JAX releases the array")
check(vpmm.default_pool_stats(ordinal)["n_free"] >= n_free + 1, "the pool counted the free")
del kv  # released here rather than at interpreter exit
gc.collect()
for _ in range(100):
    if vj.collect():
        break
    time.sleep(0.05)

tally.finish()
