"""The ctypes binding against the host backend (no GPU, no third-party packages)."""
import ctypes
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import vpmm  # noqa: E402

PAGE = 64 << 10


class BindingTest(unittest.TestCase):
    def setUp(self):
        self.pool = vpmm.Pool("host", page_size=PAGE, va_size=1024 * PAGE, host_capacity=64 << 20)

    def tearDown(self):
        self.pool.close()

    def test_malloc_free_stats_layout(self):
        self.assertEqual(self.pool.backend, "host")
        p = self.pool.malloc(3 * PAGE)
        ctypes.memset(p, 0x5A, 3 * PAGE)
        s = self.pool.stats()
        self.assertEqual(s["live_bytes"], 3 * PAGE)
        self.assertEqual(s["requested_bytes"], 3 * PAGE)
        self.assertEqual(s["n_live"], 1)
        self.assertEqual(s["page_size"], PAGE)
        self.assertEqual(s["mapped_bytes"], s["live_bytes"] + s["free_bytes"])
        self.pool.free(p)
        self.assertEqual(self.pool.stats()["n_free"], 1)
        self.pool.check()
        self.assertIn("regions (pages)", self.pool.dump())

    def test_errors_carry_status_and_message(self):
        with self.assertRaises(vpmm.Error) as e:
            self.pool.malloc(0)
        self.assertEqual(e.exception.name, "VPMM_ERR_INVALID_ARGUMENT")
        self.assertIn("size 0", str(e.exception))
        p = self.pool.malloc(PAGE)
        self.pool.free(p)
        with self.assertRaises(vpmm.Error) as e:
            self.pool.free(p)
        self.assertEqual(e.exception.name, "VPMM_ERR_UNKNOWN_POINTER")
        with self.assertRaises(TypeError):
            vpmm.Pool("host", no_such_field=1)

    def test_region_pause_resume_keeps_bytes(self):
        with vpmm.region("weights", host_backup=True):
            w = self.pool.malloc(2 * PAGE)
        ctypes.memmove(w, b"libvpmm" * 100, 700)
        self.assertTrue(self.pool.pause("weights"))
        self.assertFalse(self.pool.pause("weights"))  # VPMM_NO_OP
        self.assertEqual(self.pool.stats()["paused_bytes"], 2 * PAGE)
        self.assertTrue(self.pool.resume("weights"))
        self.assertEqual(ctypes.string_at(w, 700), b"libvpmm" * 100)
        self.pool.free(w)
        self.pool.trim(0)
        self.assertEqual(self.pool.stats()["free_bytes"], 0)

    def test_pinned_limit_sends_backups_to_pageable_memory(self):
        # The struct layout must match the header for the new fields to land.
        pool = vpmm.Pool("host", page_size=PAGE, va_size=1024 * PAGE, host_capacity=64 << 20,
                         backup_pinned_limit=PAGE)
        try:
            with vpmm.region("w", host_backup=True):
                w = pool.malloc(2 * PAGE)
            ctypes.memmove(w, b"pageable" * 50, 400)
            self.assertTrue(pool.pause("w"))
            s = pool.stats()
            self.assertEqual(s["backup_pinned_bytes"], 0)
            self.assertEqual(s["backup_pageable_bytes"], 2 * PAGE)
            self.assertTrue(pool.resume("w"))
            self.assertEqual(ctypes.string_at(w, 400), b"pageable" * 50)
            self.assertEqual(pool.stats()["backup_pageable_bytes"], 0)
            pool.free(w)
        finally:
            pool.close()


if __name__ == "__main__":
    unittest.main(verbosity=2)
