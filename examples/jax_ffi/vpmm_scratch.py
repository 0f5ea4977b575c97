"""Register and call the XLA FFI example (vpmm_scratch_ffi.cu).

    python3 examples/jax_ffi/vpmm_scratch.py [path/to/libvpmm_scratch_ffi.so]

libvpmm is found by the plugin itself ($VPMM_LIBRARY, else libvpmm.so.1 on
the loader's path): nothing here links or loads it.
"""
import ctypes
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np

TARGET = "vpmm_scratch_affine"


def register(so_path):
    """Load the plugin and register its handler for CUDA."""
    lib = ctypes.cdll.LoadLibrary(so_path)
    jax.ffi.register_ffi_target(TARGET, jax.ffi.pycapsule(lib.VpmmScratchAffine), platform="CUDA")
    return lib


def scratch_affine(x):
    """2 * x + 1 through libvpmm scratch memory (float32, any shape)."""
    x = jnp.asarray(x, dtype=jnp.float32)
    return jax.ffi.ffi_call(TARGET, jax.ShapeDtypeStruct(x.shape, x.dtype),
                            vmap_method="broadcast_all")(x)


if __name__ == "__main__":
    here = os.path.dirname(os.path.abspath(__file__))
    register(sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "build", "libvpmm_scratch_ffi.so"))
    x = jnp.arange(1 << 20, dtype=jnp.float32)
    y = jax.jit(scratch_affine)(x)
    np.testing.assert_allclose(np.asarray(y), 2 * np.asarray(x) + 1)
    print("ok: y = 2x + 1 through libvpmm scratch memory")
