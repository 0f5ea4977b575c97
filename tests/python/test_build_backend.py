"""pyproject.toml's build backend (bindings/python/pep517/vpmm_build_backend.py)
without building anything: it hands every hook to the meson-python the
building Python imports; else to Debian's python3-mesonpy, appended to
sys.path; else it asks pip for meson-python and, where pip cannot get it,
fails with the commands that fix it, naming the Python that builds.
Stand-in `mesonpy` modules record the calls."""
import importlib.util
import io
import os
import socket
import sys
import tempfile
import unittest
from contextlib import redirect_stderr

HERE = os.path.dirname(os.path.abspath(__file__))
BACKEND = os.path.join(HERE, "..", "..", "bindings", "python", "pep517", "vpmm_build_backend.py")

FAKE_MESONPY = '''
calls = []
def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    calls.append(("build_wheel", wheel_directory))
    return "vpmm-0.1.0-fake.whl"
def build_sdist(sdist_directory, config_settings=None):
    calls.append(("build_sdist", sdist_directory))
    return "vpmm-0.1.0.tar.gz"
def get_requires_for_build_wheel(config_settings=None):
    return ["ninja"]
def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    return "vpmm-0.1.0-editable.whl"
'''


def load_backend(debian_site):
    spec = importlib.util.spec_from_file_location("vpmm_build_backend_under_test", BACKEND)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod._DEBIAN_SITE = debian_site
    return mod


class BuildBackend(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.saved_path = list(sys.path)
        self.saved = sys.modules.get("mesonpy", "absent")

    def tearDown(self):
        sys.path[:] = self.saved_path
        if self.saved == "absent":
            sys.modules.pop("mesonpy", None)
        else:
            sys.modules["mesonpy"] = self.saved
        self.tmp.cleanup()

    def block_mesonpy(self):
        # This Python's own meson-python (Debian's, under /usr/bin/python3)
        # out of reach, as under a Python that has none.
        sys.modules.pop("mesonpy", None)
        sys.path[:] = [p for p in sys.path if not os.path.isdir(os.path.join(p or ".", "mesonpy"))]

    def fake_site(self, with_mesonbuild=True):
        site = os.path.join(self.tmp.name, "dist-packages")
        os.makedirs(os.path.join(site, "mesonpy"))
        with open(os.path.join(site, "mesonpy", "__init__.py"), "w") as f:
            f.write(FAKE_MESONPY)
        if with_mesonbuild:
            os.makedirs(os.path.join(site, "mesonbuild"))
        return site

    def test_the_building_pythons_own_mesonpy_first(self):
        site = self.fake_site()
        sys.path.insert(0, site)  # importable directly, as in a venv with meson-python
        sys.modules.pop("mesonpy", None)
        b = load_backend("/nonexistent")
        self.assertEqual(b.build_wheel("/out"), "vpmm-0.1.0-fake.whl")
        self.assertEqual(b.get_requires_for_build_wheel(), ["ninja"])
        self.assertEqual(b.build_editable("/out"), "vpmm-0.1.0-editable.whl")

    def test_debian_mesonpy_serves_another_python(self):
        self.block_mesonpy()
        site = self.fake_site()
        b = load_backend(site)
        err = io.StringIO()
        with redirect_stderr(err):
            self.assertEqual(b.build_wheel("/out"), "vpmm-0.1.0-fake.whl")
        self.assertIn(f"building with Debian's meson-python ({site}) for {sys.executable}", err.getvalue())
        self.assertEqual(sys.path[-1], site, "appended after the building Python's own paths")
        self.assertEqual(b.build_sdist("/out"), "vpmm-0.1.0.tar.gz")

    def test_without_meson_python_pip_fetches_it_where_it_can(self):
        self.block_mesonpy()
        b = load_backend(os.path.join(self.tmp.name, "no-such-site"))
        b._pip_can_fetch_meson_python = lambda: True
        self.assertEqual(b.get_requires_for_build_wheel(), ["meson-python>=0.12", "meson>=0.63"])

    def test_without_meson_python_and_nothing_to_fetch_it_says_what_to_do(self):
        self.block_mesonpy()
        b = load_backend(os.path.join(self.tmp.name, "no-such-site"))
        b._pip_can_fetch_meson_python = lambda: False
        # SystemExit with the text: the failing hook's output is what pip shows.
        with self.assertRaises(SystemExit) as cm:
            b.get_requires_for_build_wheel()
        for words in (f"not importable by {sys.executable}", "-m pip install",
                      "sudo apt-get install meson ninja-build g++ python3-mesonpy",
                      "pip install --no-build-isolation"):
            self.assertIn(words, str(cm.exception.code))
        with self.assertRaises(RuntimeError) as cm:
            b.build_wheel("/out")
        self.assertIn("pip install meson-python meson ninja", str(cm.exception))
        self.assertFalse(hasattr(b, "build_editable"), "no optional hook without a backend")

    def pip_env(self, **env):
        # pip's configuration as the test sets it: no file, no PIP_* from outside.
        saved = dict(os.environ)
        self.addCleanup(lambda: (os.environ.clear(), os.environ.update(saved)))
        for k in [k for k in os.environ if k.startswith("PIP_") or k.lower().endswith("_proxy")]:
            del os.environ[k]
        os.environ["PIP_CONFIG_FILE"] = os.devnull
        os.environ.update(env)
        b = load_backend("/nonexistent")
        b.sys = type(sys)("sys_stand_in")  # pip.conf of sys.prefix: none
        b.sys.prefix = self.tmp.name
        b.sys.executable = sys.executable
        return b

    def test_what_pip_could_fetch_from(self):
        links = os.path.join(self.tmp.name, "wheels")
        os.makedirs(links)
        b = self.pip_env(PIP_NO_INDEX="1", PIP_FIND_LINKS=links)
        no_index, _, found = b._pip_settings()
        self.assertTrue(no_index)
        self.assertIn(links, found)
        self.assertFalse(b._pip_can_fetch_meson_python(), "no index, and no meson-python among the links")
        open(os.path.join(links, "meson_python-0.15.0-py3-none-any.whl"), "w").close()
        self.assertTrue(b._pip_can_fetch_meson_python(), "a find-links wheel pip installs offline")
        # An index nothing answers on (port 9 of this host: connection refused).
        b = self.pip_env(PIP_INDEX_URL="http://127.0.0.1:9/simple")
        self.assertEqual(b._pip_settings()[1], ["http://127.0.0.1:9/simple"])
        self.assertFalse(b._pip_can_fetch_meson_python())
        # An index that answers: a listening socket of this test.
        srv = socket.socket()
        srv.bind(("127.0.0.1", 0))
        srv.listen(1)
        self.addCleanup(srv.close)
        b = self.pip_env(PIP_INDEX_URL=f"http://127.0.0.1:{srv.getsockname()[1]}/simple")
        self.assertTrue(b._pip_can_fetch_meson_python())
        self.assertFalse(self.pip_env(PIP_INDEX_URL=f"http://127.0.0.1:{srv.getsockname()[1]}/simple",
                                      PIP_NO_INDEX="yes")._pip_can_fetch_meson_python())

    def test_a_debian_site_without_meson_is_not_used(self):
        self.block_mesonpy()
        b = load_backend(self.fake_site(with_mesonbuild=False))
        with self.assertRaises(RuntimeError):
            b.build_wheel("/out")


if __name__ == "__main__":
    unittest.main()
