"""The torch_memory_saver drop-in's logic that needs no PyTorch, on a CPU:
how it reads TMS's variables (_env), maps TMS's backup options onto vpmm's
keywords and refuses stores the loaded vpmm lacks (_stores), and how it finds
and drives libvpmm_preload.so (_preload): detection, the libvpmm the
interposer loaded, VPMM_LIBRARY agreeing with it, the environment
configure_subprocess() gives a child, and tag scopes pushed from Python
reaching the interposer's allocations (host backend, cudaMalloc called
through ctypes).

meson sets VPMM_LIBRARY (the built libvpmm), VPMM_PRELOAD_SO (the built
interposer) and PYTHONPATH (bindings/python and its compat directory). The
cases that need the interposer run in child processes started under it; this
process is not."""
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import unittest

# The package's __init__ imports PyTorch; its torch-free modules are reached
# through a bare package object over the same directory.
BARE_PACKAGE = ("import sys, types\n"
                "pkg = types.ModuleType('torch_memory_saver')\n"
                "pkg.__path__ = [%r]\n"
                "sys.modules['torch_memory_saver'] = pkg\n")


def _tms_dir():
    for entry in os.environ.get("PYTHONPATH", "").split(os.pathsep):
        d = os.path.join(entry, "torch_memory_saver")
        if os.path.exists(os.path.join(d, "_preload.py")):
            return d
    sys.exit("FAIL: the torch_memory_saver drop-in is not on PYTHONPATH")


TMS_DIR = _tms_dir()
exec(BARE_PACKAGE % TMS_DIR)
from torch_memory_saver import _env, _preload, _stores  # noqa: E402

LIB = os.environ["VPMM_LIBRARY"]
PRELOAD = os.environ["VPMM_PRELOAD_SO"]


FAKE_TORCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fake_torch")


def child(code, preload=True, fake_torch=False, **env):
    """Run `code` in a Python child on the host backend, under
    LD_PRELOAD=libvpmm_preload.so unless preload is False; with the
    torch-free modules only, or with fake_torch the whole drop-in over
    tests/preload/fake_torch. Returns (exit status, output)."""
    child_env = dict(os.environ, VPMM_BACKEND="host", VPMM_HOST_CAPACITY="256M")
    if preload:
        child_env["LD_PRELOAD"] = PRELOAD
        child_env.pop("VPMM_LIBRARY")  # the drop-in's binding sets it
    if fake_torch:
        child_env["PYTHONPATH"] = FAKE_TORCH + os.pathsep + child_env["PYTHONPATH"]
    child_env.update(env)
    prelude = "" if fake_torch else BARE_PACKAGE % TMS_DIR
    p = subprocess.run([sys.executable, "-c", prelude + textwrap.dedent(code)], env=child_env,
                       capture_output=True, text=True, timeout=120)
    return p.returncode, p.stdout + p.stderr


def under_interposer(code, **env):
    """child() under the interposer with the torch-free modules."""
    return child(code, **env)


class Env(unittest.TestCase):
    def test_flags(self):
        for v in ("1", "true", "TRUE", "yes", "on", " 1 "):
            self.assertTrue(_env.flag("X", {"X": v}), v)
        for v in ("0", "false", "no", "off", ""):
            self.assertFalse(_env.flag("X", {"X": v}), v)
        self.assertFalse(_env.flag("X", {}))
        with self.assertRaisesRegex(ValueError, "X='maybe'"):
            _env.flag("X", {"X": "maybe"})

    def test_text(self):
        self.assertIsNone(_env.text("X", {"X": ""}))
        self.assertIsNone(_env.text("X", {}))
        self.assertEqual(_env.text("X", {"X": "mmap"}), "mmap")


class Stores(unittest.TestCase):
    def test_mapping(self):
        k = _stores.region_kwargs
        self.assertEqual(k(environ={}), {"host_backup": False})
        self.assertEqual(k(True, environ={}), {"host_backup": True})
        self.assertEqual(k(True, "pinned", environ={}), {"host_backup": True})
        self.assertEqual(k(True, "mmap", environ={}), {"host_backup": True, "backup_store": "mmap"})
        # TMS_INIT_CPU_BACKUP_BACKEND is the backend of regions that name none
        self.assertEqual(k(True, environ={"TMS_INIT_CPU_BACKUP_BACKEND": "mmap"}),
                         {"host_backup": True, "backup_store": "mmap"})
        self.assertEqual(k(True, "pinned", environ={"TMS_INIT_CPU_BACKUP_BACKEND": "mmap"}),
                         {"host_backup": True})
        self.assertEqual(k(enable_disk_backup=True, disk_backup_dir="/d", environ={}),
                         {"host_backup": True, "backup_store": "disk", "backup_dir": "/d"})
        self.assertEqual(k(enable_disk_backup=True, environ={"TMS_DISK_BACKUP_DIR": "/e"})["backup_dir"], "/e")
        self.assertEqual(_stores.resume_kwargs(False), {})
        self.assertEqual(_stores.resume_kwargs(True), {"retain_backup": True})

    def test_tms_rules(self):
        k = _stores.region_kwargs
        with self.assertRaisesRegex(ValueError, "mutually exclusive"):
            k(True, enable_disk_backup=True, disk_backup_dir="/d", environ={})
        with self.assertRaisesRegex(ValueError, "requires enable_cpu_backup"):
            k(False, "mmap", environ={})
        with self.assertRaisesRegex(ValueError, "one of"):
            k(True, "tmpfs", environ={})
        with self.assertRaisesRegex(ValueError, "needs a directory"):
            k(enable_disk_backup=True, environ={})

    def test_require(self):
        def plain(tag, host_backup=False):
            pass

        def stores(tag, host_backup=False, backup_store=None, backup_dir=None):
            pass

        def anything(tag, **kw):
            pass

        _stores.require(plain, {"host_backup": True}, "region()")
        with self.assertRaisesRegex(NotImplementedError, r"region\(\) needs libvpmm's backup stores "
                                                         r"\(backup_store='mmap'\)"):
            _stores.require(plain, {"host_backup": True, "backup_store": "mmap"}, "region()")
        _stores.require(stores, {"host_backup": True, "backup_store": "disk", "backup_dir": "/d"}, "region()")
        _stores.require(anything, {"backup_store": "mmap"}, "region()")
        with self.assertRaisesRegex(NotImplementedError, "retain_backup=True.*set retain"):
            _stores.require(plain, _stores.resume_kwargs(True), "resume()", instead="set retain off")


class Preload(unittest.TestCase):
    def test_not_interposed_here(self):
        self.assertFalse(_preload.interposed())
        self.assertIsNone(_preload.global_library())
        env = {}
        self.assertIsNone(_preload.bind_library(env, {}))
        self.assertEqual(env, {})
        _preload.open_thread_scope()  # a no-op without the interposer

    def test_child_environment(self):
        self.assertEqual(_preload.preload_library(LIB), os.path.join(os.path.dirname(LIB), _preload.PRELOAD_NAME))
        env = _preload.child_environment({}, LIB)
        self.assertTrue(os.path.samefile(env["LD_PRELOAD"], PRELOAD))
        self.assertEqual(env["VPMM_LIBRARY"], os.path.abspath(LIB))
        # kept after it, and never listed twice
        env = _preload.child_environment({"LD_PRELOAD": "/other/lib.so"}, LIB)
        self.assertEqual(env["LD_PRELOAD"].split(":")[1:], ["/other/lib.so"])
        again = _preload.child_environment({"LD_PRELOAD": env["LD_PRELOAD"]}, LIB)
        self.assertEqual(again["LD_PRELOAD"], env["LD_PRELOAD"])
        with tempfile.TemporaryDirectory() as d:
            lonely = os.path.join(d, "libvpmm.so.1")
            shutil.copy(LIB, lonely)
            with self.assertRaisesRegex(FileNotFoundError, "libvpmm_preload.so is not next to"):
                _preload.child_environment({}, lonely)

    def test_binds_the_interposers_library(self):
        rc, out = under_interposer(f"""
            import os
            from torch_memory_saver import _preload
            assert _preload.interposed()
            path = _preload.global_library()
            assert os.path.samefile(path, {LIB!r}), path
            env = {{}}
            assert _preload.bind_library(env, {{}}) == path and env == {{"VPMM_LIBRARY": path}}
            assert _preload.bind_library() == path and os.environ["VPMM_LIBRARY"] == path
            import vpmm
            assert os.path.samefile(_preload.library_file(vpmm._library.lib), path)
            assert _preload.bind_library() == path  # vpmm imported: the same file, accepted
            print("bound", path)
            """)
        self.assertEqual(rc, 0, out)
        self.assertIn("bound", out)

    def test_refuses_another_library(self):
        with tempfile.TemporaryDirectory() as d:
            other = os.path.join(d, "libvpmm.so.1")
            shutil.copy(LIB, other)
            rc, out = under_interposer(f"""
                from torch_memory_saver import _preload
                try:
                    _preload.bind_library()
                except ImportError as e:
                    print("IMPORTERROR", e)
                """, VPMM_LIBRARY=other)
            self.assertEqual(rc, 0, out)
            self.assertIn("IMPORTERROR", out)
            self.assertIn("is not the library libvpmm_preload.so loaded", out)
            # vpmm imported first with another file: refused too
            rc, out = under_interposer(f"""
                import sys, vpmm
                from torch_memory_saver import _preload
                try:
                    _preload.bind_library()
                except ImportError as e:
                    print("IMPORTERROR", e)
                """, VPMM_LIBRARY=other)
            self.assertIn("IMPORTERROR torch_memory_saver (libvpmm): vpmm was imported with", out)

    def test_python_scopes_reach_the_interposer(self):
        # TMS_INIT_ENABLE=1: outside any scope cudaMalloc is "default"; a
        # vpmm.region pushed from Python (the drop-in's region()) tags the
        # interposer's allocations, on the main thread and, after
        # open_thread_scope(), on another.
        rc, out = under_interposer("""
            import ctypes, threading
            from torch_memory_saver import _preload
            _preload.bind_library()
            import vpmm
            cuda = ctypes.CDLL(None)
            cuda.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
            cuda.cudaFree.argtypes = [ctypes.c_void_p]
            pool = vpmm.default_pool(0)

            def malloc(n):
                p = ctypes.c_void_p()
                assert cuda.cudaMalloc(ctypes.byref(p), n) == 0
                return p

            a = malloc(3 << 20)
            assert pool.tag_stats("default")["live_bytes"] >= 3 << 20
            with vpmm.region("py", host_backup=True):
                b = malloc(2 << 20)
            assert pool.tag_stats("py")["live_bytes"] >= 2 << 20
            with vpmm.region(None):  # disable(): untagged
                before = pool.tag_stats(None)["live_bytes"]
                c = malloc(2 << 20)
                assert pool.tag_stats(None)["live_bytes"] == before

            def other():
                _preload.open_thread_scope()
                with vpmm.region("thread"):
                    d = malloc(1 << 20)
                e = malloc(1 << 20)
                assert pool.tag_stats("thread")["live_bytes"] >= 1 << 20
                for p in (d, e):
                    assert cuda.cudaFree(p) == 0
            t = threading.Thread(target=other)
            t.start(); t.join()
            assert pool.pause("default") and pool.stats()["paused_bytes"] >= 3 << 20
            assert pool.resume("default")
            for p in (a, b, c):
                assert cuda.cudaFree(p) == 0
            assert pool.stats()["mapped_bytes"] == 0, pool.stats()["mapped_bytes"]  # cudaFree gives back
            print("scopes ok")
            """, TMS_INIT_ENABLE="1", TMS_INIT_ENABLE_CPU_BACKUP="1")
        self.assertEqual(rc, 0, out)
        self.assertIn("scopes ok", out)


# The drop-in itself in hook mode "preload" (fake_torch stands in for
# PyTorch; allocations are cudaMalloc calls through ctypes, as PyTorch's
# caching allocator would make them inside the drop-in's MemPools).
DROP_IN_PRELUDE = """
import ctypes, logging, os, sys
import torch
from torch_memory_saver import torch_memory_saver as tms, configure_subprocess
import vpmm
cuda = ctypes.CDLL(None)
if hasattr(cuda, "cudaMalloc"):  # under the interposer
    cuda.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
    cuda.cudaFree.argtypes = [ctypes.c_void_p]
pool = vpmm.default_pool(0)

def malloc(n, fill=None):
    p = ctypes.c_void_p()
    assert cuda.cudaMalloc(ctypes.byref(p), n) == 0
    if fill is not None:  # host backend: the memory is the process's own
        ctypes.memset(p.value, fill, n)
    return p

def byte(p, offset=0):
    return ctypes.c_uint8.from_address(p.value + offset).value

def live(tag):
    try:
        return pool.tag_stats(tag)["live_bytes"]
    except vpmm.InvalidArgument:
        return 0
"""


class DropInPreloadMode(unittest.TestCase):
    def run_drop_in(self, code, preload=True, **env):
        rc, out = child(DROP_IN_PRELUDE + textwrap.dedent(code), preload=preload, fake_torch=True, **env)
        self.assertEqual(rc, 0, out)
        return out

    def test_training_engine_whole_process(self):
        # TMS_INIT_ENABLE=1 + TMS_INIT_ENABLE_CPU_BACKUP=1: everything is
        # "default" with a backup from the start; a region nests; disable()
        # works at top level, is untagged, and gives its memory back; pause
        # leaves nothing mapped; resume brings the bytes back.
        out = self.run_drop_in("""
            import os
            assert tms.hook_mode == "preload"
            weights = malloc(4 << 20, fill=42)
            assert live("default") >= 4 << 20
            with tms.region(tag="grad_buffer", enable_cpu_backup=False):
                assert torch.active_pools, "region() uses a MemPool"
                grad = malloc(2 << 20, fill=99)
            assert not torch.active_pools
            assert live("grad_buffer") >= 2 << 20
            extra = malloc(2 << 20, fill=7)  # default again after the region
            assert live("default") >= 6 << 20
            # memory the pool keeps cached (an async free) goes back on pause too
            cuda.cudaMallocAsync.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t, ctypes.c_void_p]
            cuda.cudaFreeAsync.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
            tmp = ctypes.c_void_p()
            assert cuda.cudaMallocAsync(ctypes.byref(tmp), 4 << 20, None) == 0
            assert cuda.cudaFreeAsync(tmp, None) == 0
            assert pool.stats()["mapped_bytes"] > pool.stats()["live_bytes"]
            tms.pause()
            assert pool.stats()["mapped_bytes"] == 0, pool.dump()
            pools_before = torch.live_mem_pools()
            with tms.disable():
                before = pool.tag_stats(None)["live_bytes"]
                scratch = malloc(8 << 20, fill=53)
                assert byte(scratch) == 53
                assert pool.tag_stats(None)["live_bytes"] == before  # untagged
                assert cuda.cudaFree(scratch) == 0  # what PyTorch does when the MemPool goes
            assert torch.live_mem_pools() == pools_before, "disable()'s MemPool was kept"
            assert pool.stats()["mapped_bytes"] == 0, "disable() left memory mapped"
            tms.resume()
            assert byte(weights) == 42 and byte(weights, (4 << 20) - 1) == 42
            assert byte(extra) == 7
            grad_bytes = ctypes.string_at(grad.value, 16)  # no backup: any bytes, but mapped
            print("engine ok")
            """, TMS_INIT_ENABLE="1", TMS_INIT_ENABLE_CPU_BACKUP="1")
        self.assertIn("engine ok", out)

    def test_regions_without_init_enable(self):
        out = self.run_drop_in("""
            outside = malloc(2 << 20)
            assert pool.tag_stats(None)["live_bytes"] == 0  # untagged outside regions
            with tms.region(tag="kv"):
                kv = malloc(4 << 20)
                with tms.region(tag="w", enable_cpu_backup=True):
                    w = malloc(2 << 20, fill=5)
                    with tms.disable():
                        scratch = malloc(2 << 20)
                    kv2 = None
                kv2 = malloc(2 << 20)
            assert live("kv") >= 6 << 20 and live("w") >= 2 << 20
            assert pool.tag_stats(None)["live_bytes"] == live("kv") + live("w")
            try:
                with tms.disable():
                    pass
                raise AssertionError("disable() outside a region was accepted")
            except RuntimeError:
                pass
            tms.pause("kv")
            assert pool.tag_stats("kv")["paused_bytes"] >= 6 << 20 and live("w") >= 2 << 20
            tms.pause("w")
            # untagged memory (outside, scratch) stays; nothing free stays mapped
            assert pool.stats()["mapped_bytes"] == pool.stats()["live_bytes"], pool.dump()
            tms.pause("nosuchtag")  # unknown tags are not errors
            tms.resume("w")
            assert byte(w) == 5
            tms.resume()
            print("regions ok")
            """)
        self.assertIn("regions ok", out)

    def test_backup_stores_and_retain(self):
        # Until the loaded vpmm takes the store keywords, asking for one is a
        # clear NotImplementedError, and nothing is allocated under a wrong store.
        out = self.run_drop_in("""
            import inspect
            has_stores = "backup_store" in inspect.signature(vpmm.region).parameters
            try:
                with tms.region(tag="m", enable_cpu_backup=True, cpu_backup_backend="mmap"):
                    m = malloc(2 << 20, fill=9)
                assert has_stores, "an mmap region was accepted by a vpmm without stores"
            except NotImplementedError as e:
                assert not has_stores and "backup_store='mmap'" in str(e), e
            try:
                with tms.region(enable_cpu_backup=True, enable_disk_backup=True):
                    pass
                raise AssertionError("cpu and disk backup together were accepted")
            except ValueError:
                pass
            with tms.region(tag="r", enable_cpu_backup=True):
                r = malloc(2 << 20, fill=3)
            tms.pause("r")
            tms.retain_cpu_backup = True
            has_retain = "retain_backup" in inspect.signature(pool.resume).parameters
            try:
                tms.resume("r")
                assert has_retain
            except NotImplementedError as e:
                assert not has_retain and "retain_cpu_backup" in str(e), e
                assert pool.tag_stats("r")["n_paused"] >= 1  # nothing resumed
                tms.retain_cpu_backup = False
                tms.resume("r")
            assert byte(r) == 3
            print("stores ok", has_stores, has_retain)
            """)
        self.assertIn("stores ok", out)

    def test_margin_and_chunk_options(self):
        out = self.run_drop_in("""
            with tms.region(tag="big", enable_cpu_backup=True):
                big = malloc(4 << 20, fill=1)
            tms.pause("big")
            tms.memory_margin_bytes = 1 << 40  # more than the fake device's free memory
            try:
                tms.resume("big")
                raise AssertionError("resume ignored memory_margin_bytes")
            except vpmm.OutOfMemory as e:
                assert "memory_margin_bytes" in str(e)
            assert pool.tag_stats("big")["n_paused"] >= 1
            tms.memory_margin_bytes = 0
            tms.resume("big")
            try:
                with tms.region(tag="c", chunk_size=32 << 20):
                    pass
                raise AssertionError("chunk_size was accepted")
            except TypeError as e:
                assert "chunk_size" in str(e)
            with tms.region(tag="c", enable_disk_backup=False, cpu_backup_backend=None):
                pass  # TMS options passed with their off values are fine
            print("margin ok")
            """)
        self.assertIn("margin ok", out)

    def test_preload_mode_needs_the_interposer(self):
        out = self.run_drop_in("""
            logging.basicConfig(level=logging.WARNING)
            tms.hook_mode = "preload"
            assert not tms._interposed
            # served through MemPool routing, with a warning (no region here:
            # that would need PyTorch's pluggable allocator)
            tms.pause()
            assert not tms._preload
            with configure_subprocess():
                assert os.environ["LD_PRELOAD"].split(":")[0].endswith("libvpmm_preload.so")
                assert os.path.samefile(os.environ["VPMM_LIBRARY"], vpmm._library.path)
            assert "libvpmm_preload.so" not in os.environ.get("LD_PRELOAD", "")
            print("fallback ok")
            """, preload=False)
        self.assertIn("fallback ok", out)
        self.assertIn("served through MemPool routing", out)
        out = self.run_drop_in("""
            tms.hook_mode = "preload"
            try:
                tms.pause()
                raise AssertionError("TMS_INIT_ENABLE without the interposer was accepted")
            except RuntimeError as e:
                assert "configure_subprocess" in str(e)
            print("refused ok")
            """, preload=False, TMS_INIT_ENABLE="1")
        self.assertIn("refused ok", out)


if __name__ == "__main__":
    unittest.main(verbosity=2)
