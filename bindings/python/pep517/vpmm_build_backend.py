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
3. else asks pip for meson-python (get_requires_for_build_wheel), but only
   where pip could get it: an index pip is configured with answers a TCP
   connection, or a find-links directory holds a meson-python wheel. Where
   nothing could (offline, --no-index, PIP_NO_INDEX), the hook fails with the
   project's instructions instead: pip shows a failing hook's output, while
   it hides a succeeding hook's and would go on to retry the index five
   times and end with "No matching distribution found for meson-python".
   With --no-build-isolation pip asks for no requirements and build_wheel
   fails with the same instructions.

VPMM_PEP517_DEBIAN_SITE names another directory to look for Debian's
meson-python in (a distribution with another layout; tests point it at
nothing to build as on a machine without python3-mesonpy).

Every other hook (build_sdist, build_editable, ...) is meson-python's own.
"""
import configparser
import os
import socket
import sys
import urllib.parse

_DEBIAN_SITE = os.environ.get("VPMM_PEP517_DEBIAN_SITE") or "/usr/lib/python3/dist-packages"
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
        f"Debian's python3-mesonpy is not installed, and pip has no index or wheel to fetch it from.\n"
        f"On Debian or Ubuntu, offline: sudo apt-get install meson ninja-build g++ python3-mesonpy,\n"
        f"then run the same pip command again: this backend finds Debian's meson-python for any Python.\n"
        f"Elsewhere: with an index reachable, `{sys.executable} -m pip install {here}` fetches meson-python\n"
        f"itself; or install it into this Python (`{sys.executable} -m pip install meson-python meson ninja`)\n"
        f"and build with `pip install --no-build-isolation {here}`.\n"
        f"See docs/python.md, \"Installing and finding the library\".")


def _truthy(value):
    return str(value).strip().lower() in ("1", "true", "yes", "on")


def _pip_settings():
    """What pip would fetch from: (no_index, index URLs, find-links), from
    pip's configuration files, its PIP_* variables and the options of the pip
    command that runs this hook (its parent process: pip passes no option
    to a build backend). Best effort: anything unreadable is left out."""
    no_index = False
    indexes, extra, links = [], [], []
    files = [f for f in (os.environ.get("PIP_CONFIG_FILE"),) if f]
    files += ["/etc/xdg/pip/pip.conf", "/etc/pip.conf", os.path.expanduser("~/.pip/pip.conf"),
              os.path.join(os.environ.get("XDG_CONFIG_HOME") or os.path.expanduser("~/.config"), "pip", "pip.conf"),
              os.path.join(sys.prefix, "pip.conf")]
    for path in files:
        cfg = configparser.ConfigParser(interpolation=None)
        try:
            cfg.read(path)
        except (configparser.Error, OSError):
            continue
        for section in ("global", "install", "wheel"):
            if not cfg.has_section(section):
                continue
            sec = cfg[section]
            if "no-index" in sec:
                no_index = _truthy(sec["no-index"])
            if "index-url" in sec:
                indexes = sec["index-url"].split()
            extra += sec.get("extra-index-url", "").split()
            links += sec.get("find-links", "").split()
    env = os.environ
    if "PIP_NO_INDEX" in env:
        no_index = _truthy(env["PIP_NO_INDEX"])
    if env.get("PIP_INDEX_URL"):
        indexes = env["PIP_INDEX_URL"].split()
    extra += env.get("PIP_EXTRA_INDEX_URL", "").split()
    links += env.get("PIP_FIND_LINKS", "").split()
    try:
        with open(f"/proc/{os.getppid()}/cmdline", "rb") as f:
            argv = [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:
        argv = []
    for i, arg in enumerate(argv):
        opt, eq, val = arg.partition("=")
        if not eq:
            val = argv[i + 1] if i + 1 < len(argv) else ""
        if arg == "--no-index":
            no_index = True
        elif opt in ("-i", "--index-url"):
            indexes = [val]
        elif opt == "--extra-index-url":
            extra.append(val)
        elif opt in ("-f", "--find-links"):
            links.append(val)
    return no_index, (indexes or ["https://pypi.org/simple"]) + extra, links


def _answers(url, timeout=3.0):
    """Whether the host of an http(s) URL (or the proxy pip would use for
    it) accepts a TCP connection; for file: URLs and paths, whether they
    exist."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme in ("", "file"):
        return os.path.exists(urllib.parse.unquote(parts.path) if parts.scheme else url)
    proxy = os.environ.get(f"{parts.scheme}_proxy") or os.environ.get(f"{parts.scheme.upper()}_PROXY") \
        or os.environ.get("all_proxy") or os.environ.get("ALL_PROXY")
    if proxy:
        parts = urllib.parse.urlsplit(proxy if "://" in proxy else "http://" + proxy)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        socket.create_connection((parts.hostname, port), timeout).close()
        return True
    except (OSError, TypeError, ValueError):
        return False


def _pip_can_fetch_meson_python():
    no_index, indexes, links = _pip_settings()
    for link in links:
        parts = urllib.parse.urlsplit(link)
        if parts.scheme in ("http", "https"):
            if _answers(link):
                return True
            continue
        path = urllib.parse.unquote(parts.path) if parts.scheme == "file" else link
        try:
            names = os.listdir(path) if os.path.isdir(path) else [os.path.basename(path)]
        except OSError:
            continue
        if any(n.lower().replace("-", "_").startswith("meson_python") for n in names):
            return True
    return not no_index and any(_answers(url) for url in indexes)


def _require():
    backend = _find()
    if backend is None:
        raise RuntimeError(_instructions())
    return backend


def get_requires_for_build_wheel(config_settings=None):
    backend = _find()
    if backend is None:
        if _pip_can_fetch_meson_python():
            return list(_REQUIRES)
        # A failing hook's output is what pip shows (a succeeding one's it
        # hides): the instructions, not its retries of an index it cannot reach.
        raise SystemExit(_instructions())
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
