"""Without PyTorch, CuPy or NumPy: vpmm itself imports and works, and the
framework modules refuse with an ImportError that says what is missing.
Each case runs in a child process where the framework is made unimportable
(None in sys.modules), whether or not it is installed on this machine."""
import os
import subprocess
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
COMPAT = os.path.join(HERE, "compat")


def child(code, hide):
    prelude = "import sys\n" + "".join(f"sys.modules[{m!r}] = None\n" for m in hide)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([HERE, COMPAT]))
    return subprocess.run([sys.executable, "-c", prelude + code], env=env, capture_output=True,
                          text=True, timeout=120)


class WithoutFrameworks(unittest.TestCase):
    def test_vpmm_imports_without_torch_or_cupy(self):
        r = child("import vpmm\n"
                  "p = vpmm.Pool('host', use_env=False, host_capacity=64 << 20)\n"
                  "a = p.malloc(1 << 20, tag='t', host_backup=True)\n"
                  "assert p.pause('t') and p.resume('t')\n"
                  "p.free(a); p.close()\n"
                  "assert 'torch' not in sys.modules or sys.modules['torch'] is None\n"
                  "print('ok')\n", ["torch", "cupy"])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.strip(), "ok")

    def assert_import_error(self, module, hide, words):
        r = child(f"try:\n    import {module}\nexcept ImportError as e:\n    print('IMPORTERROR', e)\n"
                  f"else:\n    print('IMPORTED')\n", hide)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(r.stdout.startswith("IMPORTERROR"), r.stdout + r.stderr)
        for w in words:
            self.assertIn(w, r.stdout)

    def test_vpmm_torch_says_torch_is_missing(self):
        self.assert_import_error("vpmm.torch", ["torch"], ["vpmm.torch needs PyTorch", "Install torch"])

    def test_vpmm_cupy_says_cupy_is_missing(self):
        self.assert_import_error("vpmm.cupy", ["cupy"], ["vpmm.cupy needs CuPy", "Install cupy"])

    def test_vpmm_jax_says_numpy_is_missing(self):
        self.assert_import_error("vpmm.jax", ["numpy", "jax"], ["vpmm.jax needs NumPy", "Install numpy"])

    def test_use_as_torch_allocator_says_torch_is_missing(self):
        r = child("import vpmm\ntry:\n    vpmm.use_as_torch_allocator()\n"
                  "except ImportError as e:\n    print('IMPORTERROR', e)\n", ["torch"])
        self.assertIn("IMPORTERROR vpmm.torch needs PyTorch", r.stdout, r.stderr)

    def test_drop_in_needs_torch_too(self):
        self.assert_import_error("torch_memory_saver", ["torch"], ["vpmm.torch needs PyTorch"])

    def test_missing_library_is_a_clear_import_error(self):
        env_lib = os.environ.get("VPMM_LIBRARY")
        try:
            os.environ["VPMM_LIBRARY"] = "/nonexistent/libvpmm.so.1"
            r = child("try:\n    import vpmm\nexcept ImportError as e:\n    print('IMPORTERROR', e)\n", [])
        finally:
            if env_lib is None:
                os.environ.pop("VPMM_LIBRARY")
            else:
                os.environ["VPMM_LIBRARY"] = env_lib
        self.assertIn("IMPORTERROR vpmm: VPMM_LIBRARY='/nonexistent/libvpmm.so.1' does not exist", r.stdout)


if __name__ == "__main__":
    unittest.main(verbosity=2)
