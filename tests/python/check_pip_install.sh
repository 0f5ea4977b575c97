#!/usr/bin/env bash
# `pip install .` at the root of the source tree, as a user runs it: the
# README's command, offline (PIP_NO_INDEX), with pip's build isolation, in a
# fresh venv of the python3 first on PATH (pyenv's here, which cannot import
# Debian's meson-python: pyproject.toml's in-tree backend finds it anyway).
# Builds a wheel (`pip wheel .`), installs that wheel, then, from an empty
# directory with no VPMM_* variable, PYTHONPATH or LD_LIBRARY_PATH set and no
# build tree in reach: imports vpmm (the library must be the one inside the
# package), allocates on the host backend, runs the `vpmm` console script
# and estimates a shipped snapshot with `python -m vpmm.estimate`. Then
# rebuilds with the torch_memory_saver drop-in (the opt-in second install
# path) with --no-build-isolation, and checks that it installs too.
# Usage: check_pip_install.sh SOURCE_DIR
# Exit 77 (SKIP) where no meson-python is found at all (the build would need
# an index: see bindings/python/pep517/vpmm_build_backend.py's message).
set -euo pipefail
src=$(cd "${1:-$(dirname "$0")/../..}" && pwd)
# scripts/sanitize.sh preloads ASan into the 'python' suite; this test builds
# and loads its own uninstrumented library, and the compilers need no runtime.
unset LD_PRELOAD ASAN_OPTIONS

# The user's python3 (VPMM_PIP_PYTHON overrides), with venv.
py=""
for cand in "${VPMM_PIP_PYTHON:-}" python3 /usr/bin/python3; do
  [ -n "$cand" ] || continue
  if "$cand" -c "import venv" >/dev/null 2>&1; then py=$cand; break; fi
done
[ -n "$py" ] || { echo "SKIP: no python3 with venv (apt-get install python3-venv)"; exit 77; }
if ! "$py" -c "import mesonpy" >/dev/null 2>&1 && [ ! -d /usr/lib/python3/dist-packages/mesonpy ]; then
  echo "SKIP: no meson-python for $py and no Debian python3-mesonpy: an offline pip install cannot build" \
       "(apt-get install python3-mesonpy)"
  exit 77
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# pip builds in the source directory (meson-python puts its build and a
# native file there), so it gets a copy: the checkout is never written to.
mkdir "$work/src"
if git -C "$src" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  (cd "$src" && git ls-files -co --exclude-standard -z | xargs -0 cp --parents -t "$work/src")
else
  (cd "$src" && tar --exclude='./build*' --exclude='./.mesonpy*' -cf - .) | tar -xf - -C "$work/src"
fi
find "$work/src" -name __pycache__ -prune -exec rm -rf {} +

# A venv with its own pip where the Python has ensurepip (pyenv, Debian's
# with python3-venv); else one that uses the system's pip through
# --system-site-packages. pip installs into the venv either way.
if ! "$py" -m venv "$work/venv" > "$work/venv.log" 2>&1; then
  rm -rf "$work/venv"
  "$py" -m venv --without-pip --system-site-packages "$work/venv"
fi
vpy="$work/venv/bin/python"
export PIP_NO_INDEX=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
unset PIP_FIND_LINKS
unset VPMM_LIBRARY VPMM_TOOL PYTHONPATH LD_LIBRARY_PATH VPMM_BACKEND
pipi=("$vpy" -m pip)

echo "== pip wheel . ($("$vpy" -c 'import sys; print(sys.executable, sys.version.split()[0])'), offline, build isolation on)"
start=$SECONDS
(cd "$work/src" && "${pipi[@]}" wheel --no-deps -w "$work/dist" \
   --config-settings=builddir="$work/build" . > "$work/wheel.log" 2>&1) || { cat "$work/wheel.log"; exit 1; }
whl=$(ls "$work"/dist/vpmm-*.whl)
echo "built $(basename "$whl") in $((SECONDS - start)) s"
"$vpy" - "$whl" "$src/bindings/python/vpmm" <<'PY'
import os, sys, zipfile
names = set(zipfile.ZipFile(sys.argv[1]).namelist())
want = {"vpmm/libvpmm.so.1", "vpmm/libvpmm_preload.so", "vpmm/libvpmm_history.so", "vpmm/bin/vpmm"}
want |= {"vpmm/" + f for f in os.listdir(sys.argv[2]) if f.endswith(".py") or f == "py.typed"}
missing = sorted(want - names)
assert not missing, f"missing from the wheel: {missing} (list new modules in bindings/python/wheel/meson.build)"
extra = sorted(n for n in names if not n.startswith(("vpmm/", "vpmm-")))
assert not extra, f"the wheel holds files outside the package: {extra}"
print(f"wheel: {len(names)} files, library, preload and history libraries, vpmm command and every module")
PY

"${pipi[@]}" install --no-deps "$whl" > "$work/install.log" 2>&1 || { cat "$work/install.log"; exit 1; }
mkdir "$work/elsewhere"
cd "$work/elsewhere"
"$vpy" - "$work/venv" <<'PY'
import os, sys
import vpmm
venv = sys.argv[1]
assert vpmm.__file__.startswith(venv), vpmm.__file__
assert vpmm.library_path() == os.path.join(os.path.dirname(vpmm.__file__), "libvpmm.so.1"), vpmm.library_path()
p = vpmm.Pool("host", use_env=False, host_capacity=64 << 20)
a = p.malloc(3 << 20)
assert p.stats()["live_bytes"] >= 3 << 20
p.free(a)
p.close()
print(f"import vpmm from {os.getcwd()}: {vpmm.library_path()} {vpmm.version()}, host malloc/free ok")
PY
"$work/venv/bin/vpmm" info > "$work/info.log" 2>&1 || { cat "$work/info.log"; exit 1; }
head -n1 "$work/info.log"
"$vpy" -m vpmm.estimate --snapshot "$src/traces/training.pickle.gz" > "$work/estimate.log" 2>&1 || {
  cat "$work/estimate.log"; exit 1; }
grep -q "PyTorch reserved" "$work/estimate.log" || { cat "$work/estimate.log"; echo "FAIL: no comparison"; exit 1; }
tail -n 5 "$work/estimate.log"

echo "== pip install --no-build-isolation . with the torch_memory_saver drop-in (setup-args=-Dtorch_memory_saver=true)"
(cd "$work/src" && "${pipi[@]}" install --no-build-isolation --no-deps --force-reinstall \
   --config-settings=builddir="$work/build" \
   --config-settings=setup-args=-Dtorch_memory_saver=true . > "$work/tms.log" 2>&1) || { cat "$work/tms.log"; exit 1; }
"$vpy" - "$work/venv" <<'PY'
import importlib.util, sys
spec = importlib.util.find_spec("torch_memory_saver")
assert spec and spec.origin.startswith(sys.argv[1]), spec
try:
    import torch_memory_saver  # noqa: F401
    print("torch_memory_saver installed and imports (PyTorch present)")
except ImportError as e:
    assert "PyTorch" in str(e), e
    print(f"torch_memory_saver installed at {spec.origin} (without PyTorch: {str(e)[:60]}...)")
PY
echo "PASS"
