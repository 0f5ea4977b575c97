#!/usr/bin/env bash
# What the README's Quick start costs, measured the way a newcomer meets it:
# clones this repository (its committed HEAD) into a fresh temporary
# directory, then runs there, each timed:
#   demo  scripts/demo.sh
#   pip   pip install . into a fresh venv of the python3 first on PATH
#   test  scripts/test.sh (500-600 CPU-seconds on two cores: README.md has the figure)
# with ccache off (CCACHE_DISABLE=1), and prints one Markdown table row per
# command: the CPU time of the whole process tree (user + sys of every
# process it waited for, from bash's `times`), the wall time, the 1-minute
# load average at its start and at its end, and the Debian packages it
# installed (a first run installs; a second finds them present).
# The table rows are what README.md quotes; the load says how far the wall
# times are from an idle machine's (CPU seconds move much less with load).
# Usage: scripts/measure-quickstart.sh [demo] [pip] [test]   (default: all three)
#   KEEP=1 keeps the clone and the logs; REPO=DIR clones another checkout.
set -euo pipefail
export LC_ALL=C CCACHE_DISABLE=1
here=$(cd "$(dirname "$0")/.." && pwd)
repo=${REPO:-$here}
steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=(demo pip test)
for s in "${steps[@]}"; do
  case $s in demo|pip|test) ;; *) echo "usage: $0 [demo] [pip] [test]" >&2; exit 2 ;; esac
done

work=$(mktemp -d)
if [ -n "${KEEP:-}" ]; then
  echo "keeping $work"
else
  trap 'rm -rf "$work"' EXIT
fi
git clone -q "$repo" "$work/libvpmm"
clone=$work/libvpmm
commit=$(git -C "$clone" rev-parse --short HEAD)

# CPU seconds (user, sys) of everything this shell has waited for so far.
# `times` runs in this shell (a $(...) or <(...) would report a subshell's
# children: none), into a file that awk then reads.
children_cpu() {
  times > "$work/times"
  awk 'NR == 2 {
    for (i = 1; i <= 2; i++) { split($i, t, /[ms]/); s[i] = t[1] * 60 + t[2] }
    printf "%.2f %.2f\n", s[1], s[2] }' "$work/times" > "$work/cpu"
}
load1() { cut -d' ' -f1 /proc/loadavg; }

rows=()
measure() {  # NAME LOG COMMAND...
  local name=$1 log=$2; shift 2
  local before after l0 l1 t0 t1 rc=0
  children_cpu; read -r -a before < "$work/cpu"
  l0=$(load1); t0=$(date +%s.%N)
  ( "$@" ) > "$log" 2>&1 || rc=$?
  t1=$(date +%s.%N); l1=$(load1)
  children_cpu; read -r -a after < "$work/cpu"
  local installed
  # scripts/deps.sh: "installing: PKG... (N packages with their dependencies)", apt's count.
  installed=$(sed -n 's/^installing: .*(\([0-9]*\) packages with their dependencies)$/\1/p' "$log" |
    awk '{ n += $1 } END { print n + 0 }')
  local row
  row=$(awk -v n="$name" -v u0="${before[0]}" -v s0="${before[1]}" -v u1="${after[0]}" -v s1="${after[1]}" \
      -v t0="$t0" -v t1="$t1" -v l0="$l0" -v l1="$l1" -v rc="$rc" -v pk="$installed" 'BEGIN {
    u = u1 - u0; s = s1 - s0
    printf "| %s | %.0f s (%.1f user + %.1f sys) | %.0f s | %s -> %s | %s |%s", n, u + s, u, s, t1 - t0, l0, l1,
      (pk > 0 ? pk " packages" : "none"), (rc != 0 ? " FAILED (exit " rc ")" : "") }')
  rows+=("$row")
  echo "$row" >&2
  if [ "$rc" -ne 0 ]; then echo "--- last lines of $name:" >&2; tail -20 "$log" >&2; fi
}


echo "measuring ${steps[*]} in a fresh clone of $repo ($commit), ccache off, $(nproc) cores" >&2
for s in "${steps[@]}"; do
  case $s in
    demo) measure '`scripts/demo.sh`' "$work/demo.log" bash -c "cd '$clone' && exec scripts/demo.sh" ;;
    pip)  # The venv is made first, untimed: it is not part of `pip install .`.
          python3 -m venv "$work/venv"
          measure '`pip install .` (fresh venv)' "$work/pip.log" \
            bash -c "cd '$clone' && exec '$work/venv/bin/python' -m pip install --disable-pip-version-check ." ;;
    test) measure '`scripts/test.sh`' "$work/test.log" bash -c "cd '$clone' && exec scripts/test.sh" ;;
  esac
done

echo
echo "Measured (finished) $(date -u '+%Y-%m-%d %H:%M UTC') on $(nproc) cores ($(sed -n 's/^PRETTY_NAME="\(.*\)"/\1/p' /etc/os-release 2>/dev/null)), commit $commit, fresh clone, ccache off:"
echo
echo "| command | CPU (user + sys) | wall | load average (1 min) at start -> end | packages installed |"
echo "|---|---|---|---|---|"
printf '%s\n' "${rows[@]}"
if [ -f "$work/test.log" ]; then
  echo
  echo "scripts/test.sh's last line: $(grep '^test.sh:' "$work/test.log" | tail -1)"
fi
[ -z "${KEEP:-}" ] || echo "logs: $work/*.log"
