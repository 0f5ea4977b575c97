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

    def test_backends_listed(self):
        # backend_info("hip") is tested over the emulated runtime in the 'hip'
        # suite (test_hip.py): here no HIP runtime is loaded (this test also
        # runs under the sanitizers).
        self.assertEqual(sorted(vpmm.BACKENDS), ["auto", "cuda", "hip", "host"])
        with self.assertRaises(vpmm.Error) as e:
            vpmm.backend_info("host")  # nothing to describe
        self.assertEqual(e.exception.name, "VPMM_ERR_UNSUPPORTED")

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
        self.assertFalse(self.pool.pause("weights"))  # VPMM_OK, nothing changed
        self.assertEqual(self.pool.stats()["paused_bytes"], 2 * PAGE)
        self.assertTrue(self.pool.resume("weights"))
        self.assertFalse(self.pool.resume("weights"))
        self.assertEqual(ctypes.string_at(w, 700), b"libvpmm" * 100)
        self.pool.free(w)
        self.pool.trim(0)
        self.assertEqual(self.pool.stats()["free_bytes"], 0)

    def test_regions_follow_the_header_layout(self):
        # vpmm_region_info of ABI 1: 72 bytes, struct_size first; the library
        # writes with the stride the binding sets.
        self.assertEqual(ctypes.sizeof(vpmm._RegionInfo), 72)
        with vpmm.region("w"):
            w = self.pool.malloc(2 * PAGE)
        p = self.pool.malloc(3 * PAGE)
        rs = self.pool.regions()
        self.assertEqual([r["va"] for r in rs], sorted(r["va"] for r in rs))
        live = {r["va"]: r for r in rs if r["kind"] == "live"}
        self.assertEqual(live[w]["size"], 2 * PAGE)
        self.assertEqual(live[p]["requested"], 3 * PAGE)
        self.assertEqual(sum(r["size"] for r in rs), self.pool.stats()["reserved_va_bytes"])
        self.assertTrue(self.pool.pause("w"))
        kinds = {r["va"]: r["kind"] for r in self.pool.regions()}
        self.assertEqual(kinds[w], "paused")
        self.assertEqual(kinds[p], "live")
        self.assertTrue(self.pool.resume("w"))
        self.pool.free(w)
        self.pool.free(p)

    def test_statuses_and_defaults_only_config(self):
        self.assertEqual(vpmm._STATUS[8], "VPMM_ERR_TIMEOUT")
        self.assertNotIn(100, vpmm._STATUS)  # no non-zero success any more
        old = os.environ.get("VPMM_PAGE_SIZE")
        os.environ["VPMM_PAGE_SIZE"] = "not-a-size"
        try:
            with self.assertRaises(vpmm.Error) as e:
                vpmm.Pool("host", host_capacity=64 << 20)
            self.assertIn("VPMM_PAGE_SIZE", str(e.exception))
            with vpmm.Pool("host", use_env=False, host_capacity=64 << 20) as pool:
                self.assertEqual(pool.stats()["page_size"], 2 << 20)
        finally:
            if old is None:
                del os.environ["VPMM_PAGE_SIZE"]
            else:
                os.environ["VPMM_PAGE_SIZE"] = old

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
