"""`pip install bindings/python` works offline (no index, no build
isolation, no setuptools or wheel: the in-tree build backend), and the
installed package is the one that imports and runs. Also: the sdist holds
what a rebuild needs, and the package version is the library's."""
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import unittest
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))


def pip_available():
    return subprocess.run([sys.executable, "-m", "pip", "--version"], capture_output=True).returncode == 0


class OfflineInstall(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="vpmm-pip-")
        # pip builds in a copy of the tree, so the test never writes into the checkout.
        self.src = os.path.join(self.tmp, "src")
        shutil.copytree(HERE, self.src, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def test_pip_install_offline_then_import(self):
        # CI installs python3-pip (scripts/deps.sh); a missing pip is a failure, not a skip.
        self.assertTrue(pip_available(), f"{sys.executable} -m pip is not available (install python3-pip)")
        target = os.path.join(self.tmp, "site")
        env = dict(os.environ, PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1",
                   PIP_BREAK_SYSTEM_PACKAGES="1")
        r = subprocess.run([sys.executable, "-m", "pip", "install", "--no-build-isolation", "--no-index",
                            "--no-deps", "--target", target, self.src], env=env, capture_output=True,
                           text=True, timeout=300)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertTrue(os.path.exists(os.path.join(target, "vpmm", "py.typed")))
        self.assertTrue(os.path.exists(os.path.join(target, "vpmm", "torch.py")))
        code = ("import vpmm, sys\n"
                "print(vpmm.__file__)\n"
                "p = vpmm.Pool('host', use_env=False, host_capacity=64 << 20)\n"
                "a = p.malloc(1 << 20)\n"
                "p.free(a); p.close()\n"
                "print(vpmm.version())\n")
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        env["PYTHONPATH"] = target
        r = subprocess.run([sys.executable, "-c", code], env=env, cwd=self.tmp, capture_output=True,
                           text=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        where, version = r.stdout.split()
        self.assertTrue(where.startswith(target), where)
        self.assertEqual(version, meson_version())

    def test_backend_builds_wheel_and_sdist(self):
        sys.path.insert(0, os.path.join(self.src, "_build_backend"))
        try:
            import vpmm_build
        finally:
            sys.path.pop(0)
        self.assertEqual(vpmm_build.get_requires_for_build_wheel(), [])
        out = os.path.join(self.tmp, "dist")
        whl = vpmm_build.build_wheel(out)
        self.assertEqual(whl, f"vpmm-{meson_version()}-py3-none-any.whl")
        with zipfile.ZipFile(os.path.join(out, whl)) as z:
            names = set(z.namelist())
            record = z.read(f"vpmm-{meson_version()}.dist-info/RECORD").decode()
        for n in ("vpmm/__init__.py", "vpmm/_pool.py", "vpmm/torch.py", "vpmm/cupy.py", "vpmm/errors.py"):
            self.assertIn(n, names)
            self.assertIn(n + ",sha256=", record)
        sd = vpmm_build.build_sdist(out)
        with tarfile.open(os.path.join(out, sd)) as t:
            members = set(t.getnames())
        base = f"vpmm-{meson_version()}"
        for n in ("pyproject.toml", "_build_backend/vpmm_build.py", "vpmm/__init__.py", "PKG-INFO"):
            self.assertIn(f"{base}/{n}", members)


def meson_version():
    with open(os.path.join(ROOT, "meson.build")) as f:
        text = f.read()
    return re.search(r"version\s*:\s*'([^']+)'", text).group(1)


class Versions(unittest.TestCase):
    def test_package_version_is_the_library_version(self):
        with open(os.path.join(HERE, "pyproject.toml")) as f:
            text = f.read()
        self.assertEqual(re.search(r'^version = "([^"]+)"', text, re.M).group(1), meson_version())
        with open(os.path.join(HERE, "vpmm", "__init__.py")) as f:
            init = f.read()
        self.assertIn(f'__version__ = "{meson_version()}"', init)


if __name__ == "__main__":
    unittest.main(verbosity=2)
