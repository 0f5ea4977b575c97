#!/usr/bin/env bash
# Builds the library and the unit suite under ASan+UBSan (build-asan/) and,
# separately, TSan (build-tsan/), and runs `meson test --suite unit` in each.
# Fails on any sanitizer report and on any failing test; at the end it says
# which (a sanitizer report is named as such, apart from plain test failures).
#
#   scripts/sanitize.sh            # both
#   scripts/sanitize.sh asan       # one of asan, tsan
#   SANITIZE_JOBS=2 scripts/sanitize.sh
#   SAN_TIMEOUT_MULTIPLIER=4 (default): meson test's timeouts times this
#
# Notes
#  - UBSan halts on the first report (halt_on_error) with a stack trace;
#    ASan checks leaks at exit (detect_leaks=1).
#  - TSan needs the address-space layout it was built for. Kernels with a
#    large mmap randomisation (vm.mmap_rnd_bits > 28) break it ("unexpected
#    memory mapping", "FATAL: ThreadSanitizer"); the script probes a TSan
#    binary first and, if that fails, runs the suite under
#    `setarch $(uname -m) -R` (ASLR off for the tests only).
#  - Tests in the suite 'python' run the uninstrumented interpreter against
#    the instrumented libvpmm.so: under ASan they run with the ASan runtime
#    preloaded (leak checks off: CPython keeps memory until exit); under TSan
#    they are skipped (TSan cannot be preloaded into a running interpreter).
#  - Tests in the suite 'static' link a program with -static, which the
#    sanitizer runtimes do not support: they run in the plain build only.
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$PWD
JOBS=${SANITIZE_JOBS:-$(nproc)}
WHICH=("$@")
[[ ${#WHICH[@]} -eq 0 ]] && WHICH=(asan tsan)

export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
# handle_segv=0 (ASan and TSan): several tests touch unmapped pool memory in a
# forked child on purpose and expect it to die by SIGSEGV (a real crash still
# fails its test, without the sanitizer's report).
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:handle_segv=0:strict_string_checks=1:detect_stack_use_after_return=1}
export TSAN_OPTIONS=${TSAN_OPTIONS:-handle_segv=0:second_deadlock_stack=1:history_size=4}

# The unit tests that load libvpmm into a Python interpreter (see Notes).
PY_TESTS=(python_binding python_without_frameworks python_install hook_log binding_layout python_ipc)

# Sanitizer reports look like these in the test logs.
REPORT_RE='ERROR: AddressSanitizer|ERROR: LeakSanitizer|runtime error:|WARNING: ThreadSanitizer|ERROR: ThreadSanitizer|ThreadSanitizer: reported|FATAL: ThreadSanitizer|ERROR: UndefinedBehaviorSanitizer'

configure() {  # dir, sanitizer
  local dir=$1 san=$2
  if [[ ! -f $dir/build.ninja ]]; then
    meson setup "$dir" --buildtype debug -Db_sanitize="$san" -Db_lundef=false \
      -Dgpu_tests=disabled >/dev/null
  fi
}

tsan_wrapper() {  # prints the wrapper TSan binaries need here ("" or setarch)
  local probe=$ROOT/build-tsan/tsan-probe
  printf '#include <thread>\nint x; int main(){ std::thread t([]{ x = 1; }); t.join(); return x - 1; }\n' >"$probe.cpp"
  c++ -fsanitize=thread -g "$probe.cpp" -o "$probe" 2>/dev/null || { echo ""; return; }
  if "$probe" >/dev/null 2>&1; then
    echo ""
  elif setarch "$(uname -m)" -R "$probe" >/dev/null 2>&1; then
    echo "setarch $(uname -m) -R"
  else
    echo ""
  fi
}

list_tests() {  # names of a suite's tests ("proj:suite / name" or "name"); more meson args after
  meson test -C "$1" --list "${@:2}" 2>/dev/null | grep -v '^ninja' | sed 's|.* / ||'
}

declare -A result
reports=()
failures=()
for kind in "${WHICH[@]}"; do
  case $kind in
    asan) dir=$ROOT/build-asan san=address,undefined ;;
    tsan) dir=$ROOT/build-tsan san=thread ;;
    *) echo "sanitize.sh: unknown '$kind' (asan or tsan)" >&2; exit 2 ;;
  esac
  start=$(date +%s)
  echo "== $kind: configure + build ($dir)"
  configure "$dir" "$san"
  ninja -C "$dir" -j "$JOBS" >/dev/null
  wrapper=()
  if [[ $kind == tsan ]]; then
    w=$(tsan_wrapper)
    if [[ -n $w ]]; then
      echo "   TSan needs ASLR off here: running the tests under '$w'"
      wrapper=(--wrapper "$w")
    fi
  fi
  echo "== $kind: meson test --suite unit"
  # Every unit test but the Python and static ones (see the top).
  mapfile -t tests < <(list_tests "$dir" --suite unit --no-suite python --no-suite static)
  mapfile -t pytests < <(list_tests "$dir" --suite python)
  if [[ ${#tests[@]} -eq 0 ]]; then
    echo "sanitize.sh: no unit tests found in $dir" >&2
    exit 2
  fi
  set +e
  # Timeouts are set for plain builds; a sanitizer runs the same work 2-15x
  # slower (on two cores under TSan the snapshot test takes 29 s of its 30).
  meson test -C "$dir" --num-processes "$JOBS" --timeout-multiplier "${SAN_TIMEOUT_MULTIPLIER:-4}" \
    --print-errorlogs "${wrapper[@]}" "${tests[@]}" >"$dir/sanitize.log" 2>&1
  rc=$?
  set -e
  if [[ ${#pytests[@]} -gt 0 ]]; then
    if [[ $kind == asan ]]; then
      libasan=$(c++ -print-file-name=libasan.so)
      set +e
      LD_PRELOAD=$libasan ASAN_OPTIONS=$ASAN_OPTIONS:detect_leaks=0 \
        meson test -C "$dir" --no-rebuild --print-errorlogs --logbase pylog "${pytests[@]}" \
        >>"$dir/sanitize.log" 2>&1
      prc=$?
      set -e
      [[ $prc -ne 0 ]] && rc=$prc
      cat "$dir/meson-logs/pylog.txt" >>"$dir/meson-logs/testlog.txt" 2>/dev/null || true
    else
      echo "   ${pytests[*]} skipped under TSan (an interpreter cannot load TSan late)"
    fi
  fi
  log=$dir/meson-logs/testlog.txt
  # (meson repeats failures at the end: print each line once)
  grep -E '^ *[0-9]+/[0-9]+ ' "$dir/sanitize.log" | awk '!seen[$0]++' | sed 's/^/   /' || true
  if grep -qE "$REPORT_RE" "$log" 2>/dev/null; then
    reports+=("$kind")
    echo "   sanitizer reports in $log:"
    grep -nE "$REPORT_RE" "$log" | head -n 20 | sed 's/^/     /'
  fi
  if [[ $rc -ne 0 ]]; then
    failures+=("$kind")
    grep -E '^ *[0-9]+/[0-9]+ .*(FAIL|TIMEOUT|ERROR)' "$dir/sanitize.log" | awk '!seen[$0]++' |
      sed 's/^/   failed: /' || true
    # What each failing test said (its failed checks, or its last lines), so
    # that a CI log names the check without the build directory at hand.
    python3 - "$dir/meson-logs/testlog.json" "$dir/meson-logs/pylog.json" <<'PY' || true
import json, os, sys
for path in sys.argv[1:]:
    if not os.path.exists(path):
        continue
    for line in open(path):
        r = json.loads(line)
        if r.get("result") in ("OK", "SKIP", "EXPECTEDFAIL"):
            continue
        out = ((r.get("stdout") or "") + (r.get("stderr") or "")).splitlines()
        said = [l for l in out if "failed" in l or l.startswith("FAIL")] or out[-15:]
        print(f"   {r.get('name')} ({r.get('result')}):")
        for l in said[:30]:
            print(f"     {l}")
PY
  fi
  result[$kind]="exit $rc, $(( $(date +%s) - start ))s"
done

echo
echo "sanitize summary:"
for kind in "${WHICH[@]}"; do echo "  $kind: ${result[$kind]}"; done
status=0
if [[ ${#reports[@]} -ne 0 ]]; then
  echo "SANITIZER REPORTS: ${reports[*]}"
  status=1
fi
if [[ ${#failures[@]} -ne 0 ]]; then
  echo "FAILING TESTS: ${failures[*]} (see build-*/meson-logs/testlog.txt)"
  status=1
fi
[[ $status == 0 ]] && echo "clean: no sanitizer reports, every unit test passed"
exit $status
