"""The backup keywords of the binding against the host backend: backup_store
("pinned", "mmap", "disk"), backup_dir, retain_backup on Pool.malloc and
vpmm.region, Pool.set_backup_dir, and pause(unchanged=True)."""
import ctypes
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import vpmm  # noqa: E402

PAGE = 64 << 10


def fill(addr, n, byte):
    ctypes.memset(addr, byte, n)


def holds(addr, n, byte):
    return ctypes.string_at(addr, n) == bytes([byte]) * n


class BackupStoreTest(unittest.TestCase):
    def setUp(self):
        os.environ.pop("VPMM_BACKUP_DIR", None)
        self.pool = vpmm.Pool("host", use_env=False, page_size=PAGE, va_size=1024 * PAGE,
                              host_capacity=64 << 20)
        self.dir = tempfile.TemporaryDirectory(prefix="vpmm-py-stores-")

    def tearDown(self):
        self.pool.close()
        self.assertEqual(os.listdir(self.dir.name), [])  # the pool removed its files
        self.dir.cleanup()

    def files(self):
        return sorted((f, os.path.getsize(os.path.join(self.dir.name, f))) for f in os.listdir(self.dir.name))

    def test_each_store_keeps_the_bytes(self):
        self.assertEqual(vpmm.BACKUP_STORES, ("pinned", "mmap", "disk"))
        ptrs = {}
        for i, store in enumerate(vpmm.BACKUP_STORES):
            kw = {"backup_dir": self.dir.name} if store == "disk" else {}
            with vpmm.region("w", host_backup=True, backup_store=store, **kw):
                ptrs[store] = self.pool.malloc(3 * PAGE)
            fill(ptrs[store], 3 * PAGE, 0x40 + i)
        for _cycle in range(3):
            self.assertTrue(self.pool.pause("w"))
            st = self.pool.stats()
            self.assertEqual(st["paused_bytes"], 9 * PAGE)
            self.assertEqual(st["backup_mmap_bytes"], 3 * PAGE)
            self.assertEqual(st["backup_disk_bytes"], 3 * PAGE)
            self.assertEqual(len(self.files()), 1)
            self.assertTrue(self.pool.resume("w"))
            for i, store in enumerate(vpmm.BACKUP_STORES):
                self.assertTrue(holds(ptrs[store], 3 * PAGE, 0x40 + i), store)
        self.assertEqual(self.pool.stats()["backup_mmap_bytes"], 0)  # given back at resume
        self.assertEqual(self.files(), [(self.files()[0][0], 3 * PAGE)])  # kept until freed
        for p in ptrs.values():
            self.pool.free(p)

    def test_malloc_keywords_and_the_pools_directory(self):
        a = self.pool.malloc(PAGE, tag="d", host_backup=True, backup_store="disk", backup_dir=self.dir.name)
        with self.assertRaises(vpmm.InvalidArgument):  # no directory anywhere
            self.pool.malloc(PAGE, tag="d", host_backup=True, backup_store="disk")
        self.pool.set_backup_dir(self.dir.name)
        b = self.pool.malloc(2 * PAGE, tag="d", host_backup=True, backup_store="disk")
        self.pool.set_backup_dir(None)
        fill(a, PAGE, 1)
        fill(b, 2 * PAGE, 2)
        self.assertTrue(self.pool.pause("d"))
        self.assertEqual(sorted(n for _f, n in self.files()), [PAGE, 2 * PAGE])
        self.assertIsNone(self.pool.backup(a))  # a file has no host address
        self.assertTrue(self.pool.resume("d"))
        self.assertTrue(holds(a, PAGE, 1) and holds(b, 2 * PAGE, 2))
        self.pool.free(a)
        self.assertEqual([n for _f, n in self.files()], [2 * PAGE])
        self.pool.free(b)

    def test_relative_directory_is_made_absolute(self):
        cwd = os.getcwd()
        os.chdir(os.path.dirname(self.dir.name))
        try:
            with vpmm.region("r", host_backup=True, backup_store="disk",
                             backup_dir=os.path.basename(self.dir.name)):
                p = self.pool.malloc(PAGE)
        finally:
            os.chdir(cwd)
        os.chdir("/")
        try:
            self.assertTrue(self.pool.pause("r"))  # elsewhere: the file still goes to the directory
        finally:
            os.chdir(cwd)
        self.assertEqual(len(self.files()), 1)
        self.assertTrue(self.pool.resume("r"))
        self.pool.free(p)

    def test_retained_backup_and_unchanged_pause(self):
        w = self.pool.malloc(2 * PAGE, tag="w", host_backup=True, backup_store="mmap", retain_backup=True)
        fill(w, 2 * PAGE, 7)
        self.assertIsNone(self.pool.backup(w))  # never paused
        self.assertTrue(self.pool.pause("w"))
        host, n = self.pool.backup(w)
        self.assertTrue(self.pool.resume("w"))
        self.assertEqual(self.pool.backup(w), (host, n))  # outlives the resume, same address
        self.assertEqual(ctypes.string_at(host, 2 * PAGE), b"\x07" * 2 * PAGE)
        self.assertEqual(self.pool.tag_stats("w")["retained_bytes"], 2 * PAGE)
        self.assertEqual(self.pool.stats()["backup_retained_bytes"], 2 * PAGE)
        self.assertTrue(self.pool.pause("w", unchanged=True))
        self.assertEqual(self.pool.stats()["backup_skipped_bytes"], 2 * PAGE)
        self.assertTrue(self.pool.resume("w"))
        self.assertTrue(holds(w, 2 * PAGE, 7))
        fill(w, 2 * PAGE, 8)
        self.assertTrue(self.pool.pause("w"))  # not declared unchanged: copies the new bytes
        self.assertEqual(self.pool.stats()["backup_skipped_bytes"], 2 * PAGE)
        self.assertTrue(self.pool.resume("w"))
        self.assertTrue(holds(w, 2 * PAGE, 8))
        self.pool.free(w)
        self.assertEqual(self.pool.stats()["backup_retained_bytes"], 0)

    def test_keyword_mistakes_name_the_keyword(self):
        cases = [
            (dict(backup_store="mmap"), "backup_store needs host_backup=True"),
            (dict(retain_backup=True), "retain_backup needs host_backup=True"),
            (dict(backup_dir="/tmp"), "backup_dir needs host_backup=True"),
            (dict(backup_store="disk", backup_dir="/tmp"), "backup_store, backup_dir need host_backup=True"),
            (dict(host_backup=True, backup_store="nvme"), "is not one of"),
            (dict(host_backup=True, backup_store="mmap", backup_dir="/tmp"), "only used by backup_store='disk'"),
        ]
        for kw, words in cases:
            with self.assertRaises(vpmm.InvalidArgument) as cm:
                with vpmm.region("k", **kw):
                    pass
            self.assertIn(words, str(cm.exception))
            with self.assertRaises(vpmm.InvalidArgument):
                self.pool.malloc(PAGE, tag="k", **kw)
        with self.assertRaises(vpmm.InvalidArgument):  # a backup needs a tag, as before
            vpmm.region(None, host_backup=True, backup_store="disk").__enter__()
        with self.assertRaises(TypeError):
            self.pool.malloc(PAGE, tag="k", host_backup=True, backup_store="disk", backup_dir=3)
        with self.assertRaises(vpmm.InvalidArgument):
            self.pool.set_backup_dir("d" * 5000)
        self.assertEqual(self.pool.stats()["n_live"], 0)

    def test_environment_directory(self):
        # VPMM_BACKUP_DIR is read with the options, when a pool is made.
        os.environ["VPMM_BACKUP_DIR"] = self.dir.name
        try:
            pool = vpmm.Pool("host", use_env=False, page_size=PAGE, va_size=1024 * PAGE,
                             host_capacity=64 << 20)
        finally:
            del os.environ["VPMM_BACKUP_DIR"]
        p = pool.malloc(PAGE, tag="e", host_backup=True, backup_store="disk")
        self.assertTrue(pool.pause("e"))
        self.assertEqual(len(self.files()), 1)
        self.assertTrue(pool.resume("e"))
        pool.free(p)
        pool.close()
        # A pool made before the variable was set does not see it.
        os.environ["VPMM_BACKUP_DIR"] = self.dir.name
        try:
            with self.assertRaises(vpmm.InvalidArgument):
                self.pool.malloc(PAGE, tag="f", host_backup=True, backup_store="disk")
        finally:
            del os.environ["VPMM_BACKUP_DIR"]


# A stand-in for the parts of torch that vpmm.torch's MemPool routing uses:
# enough to check which MemPool each set of backup keywords gets, and that the
# scope it opens carries the store (allocations go to the host default pool).
STAND_IN_TORCH = """
import contextlib
__version__ = "stand-in"
class device:
    def __init__(self, spec):
        self.type, self.index = "cuda", 0
class _Cuda:
    class MemPool:
        def __init__(self, allocator=None):
            self.id = (id(self),)
    class memory:
        class CUDAPluggableAllocator:
            def __init__(self, path, malloc, free):
                pass
            def allocator(self):
                return object()
    @staticmethod
    def current_device():
        return 0
    @staticmethod
    @contextlib.contextmanager
    def use_mem_pool(mp, device=None):
        yield
    @staticmethod
    @contextlib.contextmanager
    def device(idx):
        yield
    @staticmethod
    def synchronize(device=None):
        pass
cuda = _Cuda()
"""

TORCH_CHILD = r"""
import os, sys, ctypes
import vpmm, vpmm.torch as vt
d = sys.argv[1]
with vt.pool("w", host_backup=True, backup_store="mmap") as a:
    pass
with vt.pool("w", host_backup=True, backup_store="mmap") as a2:
    pass
with vt.pool("w", host_backup=True) as pinned:
    pass
with vt.pool("w", host_backup=True, backup_store="mmap", retain_backup=True) as kept:
    pass
with vt.pool("w", host_backup=True, backup_store="disk", backup_dir=d) as disk:
    p = vpmm.default_pool(0).malloc(4 << 20)  # inside the block: the scope's store
assert a is a2, "the same keywords share a MemPool"
assert len({id(a), id(pinned), id(kept), id(disk)}) == 4, "other keywords get MemPools of their own"
ctypes.memset(p, 5, 4 << 20)
assert vt.pause("w")
assert len(os.listdir(d)) == 1, os.listdir(d)
assert vt.resume("w")
assert ctypes.string_at(p, 16) == b"\x05" * 16
assert vt.pause("w", unchanged=True) and vt.resume("w")
try:
    with vt.pool("w", host_backup=True, backup_store="mmap", pin_ahead=True):
        pass
    raise SystemExit("pin_ahead with mmap was accepted")
except vpmm.InvalidArgument as e:
    assert "pin_ahead" in str(e)
vpmm.default_pool(0).free(p)
assert os.listdir(d) == []
print("CHILD OK")
"""


class TorchKeywordsTest(unittest.TestCase):
    def test_mem_pools_are_keyed_by_the_backup_keywords(self):
        import subprocess
        with tempfile.TemporaryDirectory() as tmp, tempfile.TemporaryDirectory() as d:
            os.makedirs(os.path.join(tmp, "torch"))
            with open(os.path.join(tmp, "torch", "__init__.py"), "w") as f:
                f.write(STAND_IN_TORCH)
            env = dict(os.environ, VPMM_BACKEND="host", VPMM_HOST_CAPACITY="64M",
                       PYTHONPATH=os.pathsep.join([tmp, os.path.dirname(os.path.abspath(__file__))]))
            r = subprocess.run([sys.executable, "-c", TORCH_CHILD, d], env=env, capture_output=True,
                               text=True, timeout=120)
            self.assertIn("CHILD OK", r.stdout, r.stdout + r.stderr)


if __name__ == "__main__":
    sys.exit(unittest.main(verbosity=2))
