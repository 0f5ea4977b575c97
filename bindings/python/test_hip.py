"""The ctypes binding on the HIP backend, over the emulated HIP runtime
(tests/hip_emu; meson's 'hip' suite sets VPMM_HIP_LIBRARY to it)."""
import ctypes
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import vpmm  # noqa: E402

PAGE = 64 << 10


class HipBindingTest(unittest.TestCase):
    def test_hip_is_a_backend(self):
        self.assertIn("hip", vpmm.BACKENDS)
        info = vpmm.backend_info("hip")
        self.assertIn("HIP runtime 6.2", info)
        self.assertIn("chunked hipMemCreate, 256 MiB chunks", info)

    def test_pool_on_hip(self):
        with vpmm.Pool("hip", page_size=PAGE, va_size=1024 * PAGE, hip_chunk_size=4 * PAGE) as pool:
            self.assertEqual(pool.backend, "hip")
            with vpmm.region("w", host_backup=True):
                p = pool.malloc(16 * PAGE)
            ctypes.memset(p, 0x3C, 16 * PAGE)
            self.assertEqual(pool.stats()["handles"], 4)  # 4-page chunks
            self.assertTrue(pool.pause("w"))
            self.assertTrue(pool.resume("w"))
            self.assertEqual(ctypes.string_at(p + 7 * PAGE, 4), b"\x3c" * 4)
            pool.free(p)
            pool.check()


if __name__ == "__main__":
    unittest.main()
