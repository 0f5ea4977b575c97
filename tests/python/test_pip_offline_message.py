#!/usr/bin/env python3
"""`pip install .` where no meson-python can be had, as a newcomer meets it:
a fresh venv of the python3 first on PATH (no system site packages, so no
mesonpy), Debian's python3-mesonpy out of reach (VPMM_PEP517_DEBIAN_SITE
pointed at nothing), and pip offline three ways: PIP_NO_INDEX=1, `--no-index`
on the command line, and an index that nothing answers on. Each must fail
with the project's instructions (the Debian packages, --no-build-isolation)
and without pip's "No matching distribution found", which is what it showed
when the backend's help was printed by a hook that succeeded.
No build runs: pip stops at "Getting requirements to build wheel".
Usage: test_pip_offline_message.py SOURCE_DIR
Exit 77 (SKIP) where the python3 cannot make a venv with pip."""
import os
import shutil
import subprocess
import sys
import tempfile

src = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", ".."))
python = shutil.which("python3") or sys.executable
work = tempfile.mkdtemp(prefix="vpmm-pip-offline-")
try:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_") and not k.lower().endswith("_proxy")}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_CACHE_DIR="1",
               PIP_RETRIES="0", PIP_TIMEOUT="5", VPMM_PEP517_DEBIAN_SITE=os.path.join(work, "no-debian-site"))
    # Nothing here loads libvpmm: scripts/sanitize.sh's ASan preload has no business in pip.
    for var in ("PYTHONPATH", "LD_PRELOAD", "ASAN_OPTIONS"):
        env.pop(var, None)
    venv = os.path.join(work, "venv")
    made = subprocess.run([python, "-m", "venv", venv], env=env, capture_output=True, text=True)
    vpy = os.path.join(venv, "bin", "python")
    if made.returncode != 0 or subprocess.run([vpy, "-m", "pip", "--version"], env=env, capture_output=True).returncode != 0:
        print(f"SKIP: {python} cannot make a venv with pip (apt-get install python3-venv)")
        sys.exit(77)
    if subprocess.run([vpy, "-c", "import mesonpy"], env=env, capture_output=True).returncode == 0:
        print(f"SKIP: a fresh venv of {python} imports mesonpy: the case cannot be made here")
        sys.exit(77)
    # What pip reads before it asks the backend: the project's own files
    # (the checkout itself is never written to).
    tree = os.path.join(work, "src")
    for rel in ("pyproject.toml", "LICENSE", "bindings/python/README.md", "bindings/python/pep517"):
        dst = os.path.join(tree, rel)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        (shutil.copytree if os.path.isdir(os.path.join(src, rel)) else shutil.copy)(os.path.join(src, rel), dst)
    cases = [("PIP_NO_INDEX=1", {"PIP_NO_INDEX": "1"}, []),
             ("--no-index", {}, ["--no-index"]),
             ("an index nothing answers on", {"PIP_INDEX_URL": "http://127.0.0.1:9/simple"}, [])]
    failed = 0
    shown = None
    for name, extra_env, args in cases:
        r = subprocess.run([vpy, "-m", "pip", "install", *args, tree], cwd=work, env={**env, **extra_env},
                           capture_output=True, text=True, timeout=300)
        out = r.stdout + r.stderr
        shown = shown or out
        problems = []
        if r.returncode == 0:
            problems.append("pip install succeeded")
        for words in ("sudo apt-get install meson ninja-build g++ python3-mesonpy", "--no-build-isolation",
                      "docs/python.md"):
            if words not in out:
                problems.append(f"pip's output lacks {words!r}")
        if "No matching distribution" in out:
            problems.append("pip's output has its own 'No matching distribution' instead")
        if problems:
            failed += 1
            print(f"FAIL ({name}): " + "; ".join(problems) + "\n--- pip's output:\n" + out)
        else:
            print(f"ok ({name}): pip shows the instructions")
    if failed == 0:
        print("what pip shows (PIP_NO_INDEX=1):\n" + shown[-1500:])
    sys.exit(1 if failed else 0)
finally:
    shutil.rmtree(work, ignore_errors=True)
