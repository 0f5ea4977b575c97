"""The ctypes binding against the host backend (no GPU, no third-party packages)."""
import ctypes
import os
import sys
import threading
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
        self.assertTrue(self.pool.layout().startswith("[-"), self.pool.layout())  # freed: free pages
        # The text dump prints the same notation (one formatter in the library).
        self.assertIn("chunk 0: " + self.pool.layout().split(" | ")[0], self.pool.dump())

    def test_mark_step_reports_each_steps_driver_time(self):
        self.pool.mark_step()  # opens the first step
        self.assertEqual(self.pool.stats()["n_steps"], 0)
        p = self.pool.malloc(3 * PAGE)  # grows: driver calls inside the step
        self.pool.free(p)
        self.pool.mark_step()
        s = self.pool.stats()
        self.assertEqual(s["n_steps"], 1)
        self.assertGreater(s["last_step_driver_ns"], 0)
        self.assertGreaterEqual(s["last_step_ns"], s["last_step_driver_ns"])
        p = self.pool.malloc(3 * PAGE)  # cached: no driver call
        self.pool.free(p)
        self.pool.mark_step()
        s = self.pool.stats()
        self.assertEqual((s["n_steps"], s["last_step_driver_ns"]), (2, 0))
        self.assertEqual(s["steps_driver_ns"], s["driver_ns"])

    def test_driver_profile_counts_the_calls_by_kind(self):
        before = self.pool.driver_profile()
        p = self.pool.malloc(3 * PAGE)  # grows: handles made, mapped, access set
        after = self.pool.driver_profile()
        for kind in ("create", "map", "set_access"):
            self.assertGreater(after[kind + "_calls"], before[kind + "_calls"], kind)
            self.assertGreater(after[kind + "_ns"], before[kind + "_ns"], kind)
        self.pool.free(p)
        self.pool.trim(0)  # unmaps and releases what was freed
        end = self.pool.driver_profile()
        self.assertGreater(end["unmap_calls"], after["unmap_calls"])
        self.assertGreater(end["release_calls"], after["release_calls"])
        self.assertTrue(all(end[k] >= after[k] for k in end), "counters only grow")

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

    def test_prepare_backups_pins_before_the_first_pause(self):
        w = self.pool.malloc(3 * PAGE, tag="ahead", host_backup=True)
        self.assertEqual(self.pool.prepare_backups("ahead"), 3 * PAGE)
        self.assertEqual(self.pool.stats()["backup_cache_bytes"], 3 * PAGE)
        self.assertTrue(self.pool.pause("ahead"))
        st = self.pool.stats()
        self.assertEqual(st["backup_cache_bytes"], 0)          # taken from the cache
        self.assertEqual(st["backup_pinned_bytes"], 3 * PAGE)  # nothing pinned anew
        self.assertTrue(self.pool.resume("ahead"))
        with self.assertRaises(vpmm.InvalidArgument):
            self.pool.prepare_backups("never-used")
        self.pool.free(w)

    def test_prepare_backups_in_background_returns_a_future(self):
        w = self.pool.malloc(2 * PAGE, tag="bg", host_backup=True)
        fut = self.pool.prepare_backups_in_background("bg")
        self.assertEqual(fut.result(timeout=30), 2 * PAGE)
        self.assertTrue(self.pool.pause("bg"))
        self.assertEqual(self.pool.stats()["backup_pinned_bytes"], 2 * PAGE)  # the prepared buffer
        self.assertTrue(self.pool.resume("bg"))
        # close() waits for a pinning still running rather than destroy the pool under it
        other = vpmm.Pool(backend="host", page_size=PAGE, host_capacity=64 * PAGE)
        x = other.malloc(8 * PAGE, tag="bg", host_backup=True)
        pending = other.prepare_backups_in_background("bg")
        other.close()
        self.assertTrue(pending.done())
        self.assertEqual(pending.result(), 8 * PAGE)
        del x
        bad = self.pool.prepare_backups_in_background("never-used")
        self.assertIsInstance(bad.exception(timeout=30), vpmm.InvalidArgument)
        self.pool.free(w)

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
        self.assertEqual(vpmm.errors.STATUS_NAMES[8], "VPMM_ERR_TIMEOUT")
        self.assertNotIn(100, vpmm.errors.STATUS_NAMES)  # no non-zero success any more
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

    def test_exceptions_are_classes_of_their_status(self):
        with self.assertRaises(vpmm.InvalidArgument) as e:
            self.pool.malloc(0)
        self.assertIsInstance(e.exception, ValueError)
        self.assertEqual((e.exception.status, e.exception.name), (1, "VPMM_ERR_INVALID_ARGUMENT"))
        self.assertIn("vpmm_pool_malloc", e.exception.message)
        with self.assertRaises(vpmm.OutOfMemory) as e:
            self.pool.malloc(1 << 30)  # more than host_capacity
        self.assertIsInstance(e.exception, MemoryError)
        self.assertIsInstance(e.exception, vpmm.VpmmError)
        self.assertEqual(e.exception.name, "VPMM_ERR_OUT_OF_MEMORY")
        with self.assertRaises(vpmm.UnknownPointer):
            self.pool.lookup(12345)
        with self.assertRaises(vpmm.InvalidArgument):
            self.pool.pause("never-used")
        with self.assertRaises(vpmm.InvalidArgument):
            vpmm.Pool("no-such-backend")
        self.assertIs(vpmm.Error, vpmm.VpmmError)

    def test_tag_stats_lookup_and_backup_view(self):
        w = self.pool.malloc(2 * PAGE, tag="kv", host_backup=True)
        n = self.pool.malloc(PAGE, tag="nb")
        self.assertEqual(self.pool.lookup(w + 10), (w, 2 * PAGE))
        ctypes.memmove(w, b"backup!" * 10, 70)
        self.assertIsNone(self.pool.backup(w))  # active: no backup to show
        self.assertTrue(self.pool.pause("kv"))
        ts = self.pool.tag_stats("kv")
        self.assertEqual((ts["paused_bytes"], ts["n_paused"], ts["n_live"]), (2 * PAGE, 1, 0))
        self.assertEqual(ts["backup_bytes"], 2 * PAGE)
        host, nbytes = self.pool.backup(w + 7)
        self.assertEqual(nbytes, 2 * PAGE - 7)
        self.assertEqual(ctypes.string_at(host, 63), (b"backup!" * 10)[7:])
        ctypes.memmove(host, b"EDITED", 6)  # resume copies back what the backup holds
        self.assertTrue(self.pool.pause("nb"))
        self.assertIsNone(self.pool.backup(n))  # paused without a backup
        L = vpmm._library  # the C call's own argument checks
        self.assertEqual(L.pool_backup_lookup(None, w, None, None), 1)  # INVALID_ARGUMENT: pool
        self.assertEqual(L.pool_backup_lookup(self.pool.handle, None, None, None), 1)  # ptr
        self.assertEqual(L.pool_backup_lookup(self.pool.handle, 4096, None, None), 3)  # UNKNOWN_POINTER
        self.assertEqual(L.pool_backup_lookup(self.pool.handle, w, None, None), 0)  # outs optional
        with self.assertRaises(vpmm.UnknownPointer):
            self.pool.backup(4096)
        self.assertTrue(self.pool.resume(None))
        self.assertEqual(ctypes.string_at(w, 13), b"backup!EDITED")
        self.assertEqual(self.pool.tag_stats()["n_live"], 2)
        self.pool.free(w)
        self.pool.free(n)

    def test_limits_reservations_and_callbacks(self):
        self.pool.set_limit(8 * PAGE)
        self.assertEqual(self.pool.limit, 8 * PAGE)
        calls = []

        def on_oom(pool, nbytes):
            calls.append(nbytes)
            if len(calls) == 1:
                pool.set_limit(16 * PAGE)  # make room, then ask for a retry
                return True
            return False
        self.pool.set_oom_callback(on_oom)
        big = self.pool.malloc(12 * PAGE)  # over the 8-page limit: the callback raises it
        self.assertEqual(calls, [12 * PAGE])
        self.assertEqual(self.pool.stats()["n_oom_recovered"], 1)
        self.pool.free(big)
        self.pool.set_oom_callback(None)
        with self.pool.reserve(4 * PAGE) as r:
            self.assertEqual(r.info(), (4 * PAGE, 0))
            p = self.pool.malloc(2 * PAGE, reservation=r)
            self.assertEqual(r.used, 2 * PAGE)
            self.assertEqual(self.pool.stats()["reserved_bytes"], 4 * PAGE)
            with self.assertRaises(vpmm.OutOfMemory):
                self.pool.reserve(1 << 40)
            with self.assertRaises(vpmm.Timeout):
                self.pool.reserve(15 * PAGE, mode="block", timeout=0.01)
        self.assertEqual(self.pool.stats()["reserved_bytes"], 0)
        r.release()  # idempotent
        self.pool.free(p)
        self.pool.trim(0)
        with self.assertRaises(vpmm.WrongState):
            q = self.pool.malloc(4 * PAGE)
            try:
                self.pool.set_limit(2 * PAGE)
            finally:
                self.pool.free(q)

    def test_size_argument_errors(self):
        # ctypes alone wraps -1 to 2**64-1, 2**64 to 0 and rejects "1M" with
        # an ArgumentError naming no parameter.
        with self.assertRaisesRegex(ValueError, r"malloc: size must be >= 0, got -1"):
            self.pool.malloc(-1)
        with self.assertRaisesRegex(vpmm.InvalidArgument, r"does not fit in 64 bits"):
            self.pool.malloc(1 << 64)
        with self.assertRaisesRegex(TypeError, r"malloc: size must be an int .*str '1M'.*1 << 20"):
            self.pool.malloc("1M")
        for bad in (1.5, True, None):
            with self.assertRaises(TypeError):
                self.pool.malloc(bad)
        with self.assertRaises(ValueError):
            self.pool.malloc(0)
        with self.assertRaisesRegex(TypeError, r"trim: keep_bytes"):
            self.pool.trim("0")
        with self.assertRaisesRegex(ValueError, r"set_limit: limit_bytes must be >= 0"):
            self.pool.set_limit(-5)
        cap = self.pool.stats()["capacity_bytes"]
        # The library's message, as it is: the request, the capacity and its source.
        with self.assertRaisesRegex(vpmm.OutOfMemory, rf"vpmm_pool_malloc\w*: {10 << 40} bytes \(10 TiB\) exceed "
                                    rf"the capacity of {cap} bytes \(.*: host_capacity\)"):
            self.pool.malloc(10 << 40)
        a = self.pool.malloc(PAGE)  # still usable after all of that
        self.pool.free(a)

    def test_config_and_pool_lifetime(self):
        c = self.pool.config()
        self.assertEqual((c["page_size"], c["backend"], c["backend_id"]), (PAGE, "host", vpmm.BACKENDS["host"]))
        with vpmm.Pool("host", use_env=False, host_capacity=64 << 20) as p:
            self.assertTrue(p.owned)
            self.assertIn("host owned", repr(p))
        with self.assertRaises(vpmm.InvalidArgument):
            p.stats()  # closed
        self.assertRegex(vpmm.version(), r"^\d+\.\d+\.\d+$")
        self.assertEqual(vpmm.abi_version(), 1)


CLOSED = "the pool is closed"


class CloseRaceTest(unittest.TestCase):
    """close() racing calls of other threads (each started and seen to call
    before the close): no crash, and every call either succeeds or raises
    the documented "the pool is closed" error, for a bounded number of rounds."""

    ROUNDS = 120
    THREADS = 4

    def setUp(self):
        # Switch threads often: more interleavings per round, and a close
        # waiting for the GIL behind spinning workers gets it sooner.
        self.interval = sys.getswitchinterval()
        sys.setswitchinterval(1e-4)

    def tearDown(self):
        sys.setswitchinterval(self.interval)

    def race(self, make, ops, close):
        for _ in range(self.ROUNDS):
            obj = make()
            first_call = [threading.Event() for _ in range(self.THREADS)]
            results = [None] * self.THREADS

            def worker(i):
                calls = 0
                try:
                    while True:
                        ops[i % len(ops)](obj)
                        calls += 1
                        first_call[i].set()
                except vpmm.VpmmError as e:
                    results[i] = (calls, e)
                except BaseException as e:  # noqa: BLE001 - reported below
                    results[i] = (calls, e)
                finally:
                    first_call[i].set()

            threads = [threading.Thread(target=worker, args=(i,)) for i in range(self.THREADS)]
            for t in threads:
                t.start()
            for e in first_call:
                e.wait()
            close(obj)
            for t in threads:
                t.join()
            for calls, err in results:
                self.assertIsInstance(err, vpmm.InvalidArgument, repr(err))
                self.assertIn("is closed", str(err))

    def test_pool_close_races_calls(self):
        def alloc_free(pool):
            pool.free(pool.malloc(3 * PAGE))

        def tagged(pool):
            p = pool.malloc(PAGE, tag="t", host_backup=True)
            pool.pause("t")
            pool.resume("t")
            pool.free(p)

        def observe(pool):
            pool.stats()
            pool.regions()
            pool.layout()
            pool.tag_stats()

        def reserve(pool):
            with pool.reserve(PAGE) as r:
                r.info()
            pool.trim(0)

        self.race(lambda: vpmm.Pool("host", use_env=False, page_size=PAGE, va_size=256 * PAGE,
                                    host_capacity=16 << 20),
                  [alloc_free, tagged, observe, reserve], lambda pool: pool.close())

    def test_close_ends_a_blocking_reserve_and_runs_inside_a_callback(self):
        # A reserve(mode="block") waiting for capacity: close() refuses the
        # frees it waits for, so it ends the wait ("the pool is closed").
        pool = vpmm.Pool("host", use_env=False, page_size=PAGE, va_size=256 * PAGE, memory_limit=8 * PAGE)
        held = pool.reserve(8 * PAGE)
        waiting, got = threading.Event(), []

        def reserve():
            waiting.set()
            try:
                pool.reserve(4 * PAGE, mode="block")
            except vpmm.VpmmError as e:
                got.append(e)
        t = threading.Thread(target=reserve)
        t.start()
        waiting.wait()
        pool.close()
        t.join()
        self.assertIsInstance(got[0], vpmm.InvalidArgument)
        self.assertIn(CLOSED, str(got[0]))
        del held
        # close() from inside a call of the pool on the same thread (an OOM
        # callback here) cannot wait for that call: the pool is destroyed
        # when it returns, and nothing is called on it after.
        pool = vpmm.Pool("host", use_env=False, page_size=PAGE, va_size=256 * PAGE, memory_limit=4 * PAGE)
        pool.set_oom_callback(lambda p, n: p.close() or False)
        with self.assertRaises(vpmm.OutOfMemory):
            pool.malloc(8 * PAGE)
        with self.assertRaises(vpmm.InvalidArgument) as e:
            pool.stats()
        self.assertIn(CLOSED, str(e.exception))
        self.assertEqual(repr(pool), "<vpmm.Pool closed>")

    def test_an_interrupt_inside_a_call_leaves_no_call_behind(self):
        # A KeyboardInterrupt (or any exception of a signal handler) raised
        # right after a call registered itself, before its native call: the
        # profile hook raises at exactly that instruction. A call left
        # counted would keep every later close() waiting.
        pool = vpmm.Pool("host", use_env=False, page_size=PAGE, va_size=256 * PAGE)
        p = pool.malloc(PAGE)

        def interrupt_after_register(frame, event, arg):
            if event == "c_return" and getattr(arg, "__self__", None) is pool._guard._threads:
                sys.setprofile(None)
                raise KeyboardInterrupt
        for call in (lambda: pool.free(p), lambda: pool.malloc(PAGE), pool.stats, pool.layout):
            sys.setprofile(interrupt_after_register)
            try:
                with self.assertRaises(KeyboardInterrupt):
                    call()
            finally:
                sys.setprofile(None)
            self.assertEqual(pool._guard._threads, [])
        closer = threading.Thread(target=pool.close)  # another thread: it would wait for a phantom call
        closer.start()
        closer.join()
        self.assertTrue(pool._guard.released)

    def test_close_waits_for_the_background_futures_it_started(self):
        # prepare_export_in_background is what vpmm.torch.resume starts by
        # itself. The future's call is held (an event) until close() has had
        # its chance to run: close() must wait for it, never destroy under it.
        for start in ("prepare_export_in_background", "prepare_backups_in_background"):
            pool = vpmm.Pool("host", use_env=False, exportable=1, page_size=PAGE, va_size=256 * PAGE)
            pool.malloc(4 * PAGE, tag="w", host_backup=True)
            entered, go, order = threading.Event(), threading.Event(), []
            name = start.replace("_in_background", "")
            real = getattr(pool, name)

            def held(tag=None, real=real):
                entered.set()
                go.wait()
                try:
                    return real(tag)
                finally:
                    order.append("call")
            setattr(pool, name, held)
            fut = getattr(pool, start)("w")
            entered.wait()
            closer = threading.Thread(target=lambda: (pool.close(), order.append("close")))
            closer.start()
            closer.join(0.2)  # not an ordering: a close that does not wait is done by now
            go.set()
            closer.join()
            self.assertEqual(order, ["call", "close"], start)
            self.assertTrue(fut.done())
            self.assertGreaterEqual(fut.result(), 1 if "export" in start else 0)


class DefaultPoolTest(unittest.TestCase):
    """The process-wide pool of the hooks, as Python sees it. The test runs
    with VPMM_BACKEND=host (set below before the pool exists)."""

    @classmethod
    def setUpClass(cls):
        os.environ["VPMM_BACKEND"] = "host"
        os.environ.setdefault("VPMM_HOST_CAPACITY", "256M")
        cls.lib = ctypes.CDLL(vpmm.library_path())
        cls.lib.vpmm_torch_malloc.restype = ctypes.c_void_p
        cls.lib.vpmm_torch_malloc.argtypes = [ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p]
        cls.lib.vpmm_torch_free.argtypes = [ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p]
        cls.lib.vpmm_cupy_malloc.restype = ctypes.c_void_p
        cls.lib.vpmm_cupy_malloc.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        cls.lib.vpmm_cupy_free.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int]

    def test_default_pool_is_the_hooks_pool(self):
        d = vpmm.default_pool(0)
        self.assertIs(d, vpmm.default_pool(0))
        self.assertFalse(d.owned)
        self.assertEqual(d.backend, "host")
        with vpmm.region("hook-weights", host_backup=True):
            p = self.lib.vpmm_torch_malloc(3 << 20, 0, None)
        self.assertTrue(p)
        ctypes.memmove(p, b"from the torch hook", 19)
        self.assertEqual(d.tag_stats("hook-weights")["n_live"], 1)
        self.assertTrue(d.pause("hook-weights"))
        self.assertEqual(vpmm.default_pool_stats(0)["paused_bytes"], d.tag_stats("hook-weights")["paused_bytes"])
        self.assertTrue(d.resume("hook-weights"))
        self.assertEqual(ctypes.string_at(p, 19), b"from the torch hook")
        self.lib.vpmm_torch_free(p, 3 << 20, 0, None)
        d.close()  # no-op: the library owns it
        self.assertEqual(d.tag_stats("hook-weights")["n_live"], 0)
        d.check()

    def test_hooks_pool_shares_pages_between_untagged_tensors(self):
        # The default pool rounds large untagged requests to 512 bytes (as
        # PyTorch does), so two 1.5-page tensors sit back to back.
        d = vpmm.default_pool(0)
        page = d.config()["page_size"]
        self.assertEqual(d.config()["large_rounding"], 512)
        a = self.lib.vpmm_torch_malloc(page + page // 2, 0, None)
        b = self.lib.vpmm_torch_malloc(page + page // 2, 0, None)
        self.assertTrue(a and b)
        self.assertEqual(b - a, page + page // 2)
        self.lib.vpmm_torch_free(a, 0, 0, None)
        self.lib.vpmm_torch_free(b, 0, 0, None)
        d.check()

    def test_cupy_hooks_take_region_or_fixed_attrs(self):
        d = vpmm.default_pool(0)
        with vpmm.region("cupy-scope"):
            a = self.lib.vpmm_cupy_malloc(None, 4 << 20, 0)  # above small_size: its own pages
        attrs = vpmm._library.sized(vpmm._AllocAttrs)
        tag = ctypes.create_string_buffer(b"cupy-fixed")
        attrs.tag = ctypes.addressof(tag)
        attrs.flags = vpmm.ALLOC_HOST_BACKUP
        b = self.lib.vpmm_cupy_malloc(ctypes.addressof(attrs), 4 << 20, 0)
        self.assertTrue(a and b)
        self.assertEqual(d.tag_stats("cupy-scope")["n_live"], 1)
        self.assertEqual(d.tag_stats("cupy-fixed")["n_live"], 1)
        ctypes.memmove(b, b"kept", 4)
        self.assertTrue(d.pause("cupy-fixed"))
        self.assertEqual(d.tag_stats("cupy-fixed")["backup_bytes"], 4 << 20)
        self.assertTrue(d.resume("cupy-fixed"))
        self.assertEqual(ctypes.string_at(b, 4), b"kept")
        self.assertIsNone(self.lib.vpmm_cupy_malloc(None, 0, 0))
        self.assertIn("vpmm_cupy_malloc", vpmm._library.last_error().decode())
        self.lib.vpmm_cupy_free(None, a, 0)
        self.lib.vpmm_cupy_free(None, b, 0)
        self.assertEqual(d.tag_stats("cupy-scope")["n_live"] + d.tag_stats("cupy-fixed")["n_live"], 0)


if __name__ == "__main__":
    unittest.main(verbosity=2)
