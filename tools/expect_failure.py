#!/usr/bin/env python3
"""Runs a command that must fail in one known way: exit with the given
status and print the given text on stderr. A test registered with meson's
should_fail passes on any non-zero exit, a crash included; this one passes
only on the failure it names.

usage: expect_failure.py --exit N --stderr TEXT -- COMMAND ARGS..."""
import argparse
import subprocess
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--exit", type=int, required=True, help="the exit status the command must return")
    ap.add_argument("--stderr", required=True, help="text its stderr must contain")
    ap.add_argument("command", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    cmd = a.command[1:] if a.command[:1] == ["--"] else a.command
    if not cmd:
        ap.error("no command after --")
    r = subprocess.run(cmd, capture_output=True, text=True)
    ok = True
    if r.returncode != a.exit:
        how = f"signal {-r.returncode}" if r.returncode < 0 else f"exit status {r.returncode}"
        print(f"FAIL: expected exit status {a.exit}, got {how}")
        ok = False
    if a.stderr not in r.stderr:
        print(f"FAIL: stderr lacks {a.stderr!r}")
        ok = False
    if not ok:
        sys.stdout.write("--- stderr\n" + r.stderr[-4000:])
        return 1
    print(f"ok: exit status {a.exit} with {a.stderr!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
