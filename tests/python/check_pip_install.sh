#!/usr/bin/env bash
# `pip install .` at the root of the source tree, as a user runs it: offline,
# without build isolation, into a fresh venv, with Debian's meson-python.
# Builds a wheel (`pip wheel .`), installs that wheel, then, from an empty
# directory with no VPMM_* variable, PYTHONPATH or LD_LIBRARY_PATH set and no
# build tree in reach: imports vpmm (the library must be the one inside the
# package), allocates on the host backend, runs the `vpmm` console script
# and estimates a shipped snapshot with `python -m vpmm.estimate`. Then
# rebuilds with the torch_memory_saver drop-in (the opt-in second install
# path) and checks that it installs too.
# Usage: check_pip_install.sh SOURCE_DIR   Exit 77 (SKIP) without meson-python.
set -euo pipefail
src=$(cd "${1:-$(dirname "$0")/../..}" && pwd)
# scripts/sanitize.sh preloads ASan into the 'python' suite; this test builds
# and loads its own uninstrumented library, and the compilers need no runtime.
unset LD_PRELOAD ASAN_OPTIONS

# The interpreter that sees Debian's mesonpy (python3-mesonpy installs into
# /usr/lib/python3/dist-packages, which a pyenv python3 on PATH does not see).
py=""
for cand in "${VPMM_PIP_PYTHON:-}" /usr/bin/python3 python3; do
  [ -n "$cand" ] || continue
  if "$cand" -c "import mesonpy, venv, pip" >/dev/null 2>&1; then py=$cand; break; fi
done
if [ -z "$py" ]; then
  echo "SKIP: no python3 with mesonpy and pip (apt-get install python3-mesonpy python3-pip python3-venv)"
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

# --without-pip: the venv uses the system's pip through --system-site-packages
# (no ensurepip wheel needed); pip still installs into the venv.
"$py" -m venv --without-pip --system-site-packages "$work/venv"
vpy="$work/venv/bin/python"
export PIP_NO_INDEX=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
unset VPMM_LIBRARY VPMM_TOOL PYTHONPATH LD_LIBRARY_PATH VPMM_BACKEND
pipi=("$vpy" -m pip)

echo "== pip wheel . ($py, $("$vpy" -c 'import mesonpy; print("meson-python", mesonpy.__version__)'))"
start=$SECONDS
(cd "$work/src" && "${pipi[@]}" wheel --no-build-isolation --no-deps -w "$work/dist" \
   --config-settings=builddir="$work/build" . > "$work/wheel.log" 2>&1) || { cat "$work/wheel.log"; exit 1; }
whl=$(ls "$work"/dist/vpmm-*.whl)
echo "built $(basename "$whl") in $((SECONDS - start)) s"
"$vpy" - "$whl" "$src/bindings/python/vpmm" <<'PY'
import os, sys, zipfile
names = set(zipfile.ZipFile(sys.argv[1]).namelist())
want = {"vpmm/libvpmm.so.1", "vpmm/libvpmm_preload.so", "vpmm/bin/vpmm"}
want |= {"vpmm/" + f for f in os.listdir(sys.argv[2]) if f.endswith(".py") or f == "py.typed"}
missing = sorted(want - names)
assert not missing, f"missing from the wheel: {missing} (list new modules in bindings/python/wheel/meson.build)"
extra = sorted(n for n in names if not n.startswith(("vpmm/", "vpmm-")))
assert not extra, f"the wheel holds files outside the package: {extra}"
print(f"wheel: {len(names)} files, library, preload library, vpmm command and every module")
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

echo "== pip install . with the torch_memory_saver drop-in (setup-args=-Dtorch_memory_saver=true)"
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
