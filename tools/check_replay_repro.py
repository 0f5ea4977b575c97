#!/usr/bin/env python3
"""Replay figures are reproducible: the same trace and flags give the same
summary plain, with --timeline (whose peak must equal the summary's), and
while other replays run at once. Host-backend figures once depended on
timing and on vpmm_pool_stats having side effects; CI's fragmentation
assertions are only trustworthy if this holds.
Usage: check_replay_repro.py VPMM TRACE [FLAGS...]"""
import csv
import os
import re
import subprocess
import sys
import tempfile

vpmm, trace, flags = sys.argv[1], sys.argv[2], sys.argv[3:]
base = [vpmm, "replay", "--backend", "host"] + flags


def figures(out):
    # Everything but the measurements: the wall-clock line, the driver line
    # (its time, and its count of event queries, which depends on when the
    # host streams' threads finish), and in the driver-by-kind line the
    # times and the event queries.
    return [re.sub(r"event query \d+", "event query N", re.sub(r"\b\d+(\.\d+)? ms\b", "N ms", l))
            for l in out.splitlines() if "replay time" not in l and "driver by malloc" not in l]


def fmt_bytes(v):  # tools/cli.cpp's fmt_bytes
    units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"]
    u, div = 0, 1
    while u < 5 and v >= div * 1024:
        div *= 1024
        u += 1
    return f"{v // div} {units[u]}" if v % div == 0 else f"{v / div:.1f} {units[u]}"


def run(extra=()):
    r = subprocess.run(base + list(extra) + [trace], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"{' '.join(base)} {trace} failed: {r.stderr}")
    return figures(r.stdout)


failures = 0


def same(label, got, want):
    global failures
    if got != want:
        failures += 1
        print(f"FAIL {label}: figures differ from the plain replay")
        for a, b in zip(want, got):
            if a != b:
                print(f"  plain: {a}\n  {label}: {b}")
    elif not label.startswith("again"):
        print(f"ok   {label}")


plain = run()
peak = next(l for l in plain if l.strip().startswith("peak mapped")).split(None, 2)[2].strip()
print(f"plain: peak mapped {peak}")
# Stream handles are heap addresses and ASLR moves them from run to run: a
# pool that broke ties by stream order differed in about one run in six.
for i in range(30):
    same(f"again {i}", run(), plain)
print("ok   30 more plain replays" if failures == 0 else "")

with tempfile.TemporaryDirectory() as tmp:
    tl = os.path.join(tmp, "timeline.csv")
    same("--timeline", run(["--timeline", tl]), plain)
    with open(tl) as f:
        tl_peak = max(int(r["mapped_bytes"]) for r in csv.DictReader(f))
    if fmt_bytes(tl_peak) != peak:
        failures += 1
        print(f"FAIL the timeline's peak {fmt_bytes(tl_peak)} is not the summary's {peak}")
    else:
        print(f"ok   timeline peak = summary peak ({peak})")

    # Under load: several replays of this trace and others at once, the
    # checked ones with --check (slower, so the others interleave).
    procs = [subprocess.Popen(base + ["--check", "--timeline", os.path.join(tmp, f"t{i}.csv"), trace],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(3)]
    procs += [subprocess.Popen(base + [trace], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
              for _ in range(3)]
    for i, p in enumerate(procs):
        out, err = p.communicate()
        if p.returncode != 0:
            sys.exit(f"concurrent replay {i} failed: {err}")
        got = [l.replace(" (with --check)", "") for l in figures(out)]
        same(f"concurrent replay {i}", got, plain)

print(f"{'FAILED' if failures else 'passed'}: {failures} difference(s)")
sys.exit(1 if failures else 0)
