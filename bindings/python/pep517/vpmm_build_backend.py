"""The build backend pyproject.toml names: meson-python, found wherever this
machine has it, or a message saying exactly what to install.

`pip install .` needs meson-python (the `mesonpy` module) in the Python that
builds. A Python without it failed with "BackendUnavailable: No module named
'mesonpy'", and offline with "No matching distribution found for
meson-python": no word of what to do. So pyproject.toml names this module
(backend-path) and requires nothing up front, and each hook:

1. uses the `mesonpy` the building Python imports (a venv or pyenv with
   meson-python installed, or pip's isolated build environment after it
   installed what get_requires_for_build_wheel asked for);
2. else Debian's python3-mesonpy (and the meson it depends on), which are
   pure Python installed for /usr/bin/python3 under
   /usr/lib/python3/dist-packages: appended to sys.path, after everything of
   the building Python's own, so a pyenv or venv Python builds offline with
   the Debian packages scripts/test.sh installs;
3. else asks pip for meson-python (get_requires_for_build_wheel), which pip
   installs where an index is reachable, and when it is not (or pip was told
   --no-build-isolation) fails the build with the commands that fix it.

Every other hook (build_sdist, build_editable, ...) is meson-python's own.
"""
import os
import sys

_DEBIAN_SITE = "/usr/lib/python3/dist-packages"
_REQUIRES = ["meson-python>=0.12", "meson>=0.63"]
_backend = None


def _find():
    global _backend
    if _backend is not None:
        return _backend
    try:
        import mesonpy
        _backend = mesonpy
        return _backend
    except ImportError:
        pass
    if os.path.isdir(os.path.join(_DEBIAN_SITE, "mesonpy")) and os.path.isdir(os.path.join(_DEBIAN_SITE, "mesonbuild")):
        sys.path.append(_DEBIAN_SITE)
        try:
            import mesonpy
        except ImportError:
            sys.path.remove(_DEBIAN_SITE)
            return None
        print(f"vpmm: building with Debian's meson-python ({_DEBIAN_SITE}) for {sys.executable}",
              file=sys.stderr)
        _backend = mesonpy
    return _backend


def _instructions():
    here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    return (
        f"vpmm: cannot build: meson-python (the 'mesonpy' module) is not importable by {sys.executable},\n"
        f"and Debian's python3-mesonpy is not installed. Either:\n"
        f"  - where an index is reachable: {sys.executable} -m pip install {here}\n"
        f"    (pip fetches meson-python and meson into its build environment; with --no-build-isolation,\n"
        f"    first: {sys.executable} -m pip install meson-python meson ninja)\n"
        f"  - offline, on Debian or Ubuntu: sudo apt-get install meson ninja-build g++ python3-mesonpy,\n"
        f"    then the same command again: this backend finds Debian's meson-python for any Python.\n"
        f"See docs/python.md, \"Installing and finding the library\".")


def _require():
    backend = _find()
    if backend is None:
        raise RuntimeError(_instructions())
    return backend


def get_requires_for_build_wheel(config_settings=None):
    backend = _find()
    if backend is None:
        # pip installs these where it can; where it cannot, its "No matching
        # distribution" follows this text.
        print(_instructions(), file=sys.stderr)
        return list(_REQUIRES)
    hook = getattr(backend, "get_requires_for_build_wheel", None)
    return hook(config_settings) if hook else []


def get_requires_for_build_sdist(config_settings=None):
    backend = _find()
    if backend is None:
        return list(_REQUIRES)
    hook = getattr(backend, "get_requires_for_build_sdist", None)
    return hook(config_settings) if hook else []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    return _require().build_wheel(wheel_directory, config_settings, metadata_directory)


def build_sdist(sdist_directory, config_settings=None):
    return _require().build_sdist(sdist_directory, config_settings)


def __getattr__(name):
    # The optional hooks (build_editable, get_requires_for_build_editable,
    # prepare_metadata_for_build_*): meson-python's where it has them, absent
    # otherwise (pip then falls back as PEP 517 says).
    if name.startswith("_"):
        raise AttributeError(name)
    backend = _find()
    if backend is None or not hasattr(backend, name):
        raise AttributeError(name)
    return getattr(backend, name)
