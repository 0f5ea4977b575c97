"""Allocators taking turns inside one measurement: one worker process per
allocator, all loaded at once, each asked in turn (the order rotated by one
every time) to run the same unit of work before any runs the next. A lent
VM's speed drifts over tens of seconds and whole processes of one allocator
launched minutes apart ran 1.3-1.6x apart; taking turns puts that drift on
every allocator alike. Shared by serve_lockstep.py (waves of the serving
client) and step_lockstep.py (cycles of the training clients).

A worker prints {"ready": NAME} once it is loaded, then answers each line
it reads on stdin (the unit's number) with one JSON line, and "end" with
its result line (the one its client prints on its own)."""
import json
import math
import os
import subprocess
import sys

TORCH_ALLOCS = ("native", "expandable", "cudamallocasync")
# libvpmm under another configuration, by the names scripts/gpu-placement.sh
# gives them: the other placement chains, the default chain that never
# pays for a move, one handle per growth (no page handles), and another
# tree's build where BASE_LIBRARY names one.
VARIANTS = {"vpmm-exact": {"VPMM_PLACEMENT": "exact"}, "vpmm-views": {"VPMM_PLACEMENT": "views"},
            "vpmm-pending": {"VPMM_PLACEMENT": "pending"}, "vpmm-never": {"VPMM_DRIVER_BUDGET": "never"},
            "vpmm-unlimited": {"VPMM_MAX_HANDLE_SIZE": "unlimited"}}
if os.environ.get("BASE_LIBRARY"):  # vpmm-base: the library of another tree (scripts/gpu-placement.sh)
    VARIANTS["vpmm-base"] = {"VPMM_LIBRARY": os.environ["BASE_LIBRARY"]}


def geomean(qs):
    return math.exp(sum(map(math.log, qs)) / len(qs))


class Workers:
    """One worker process per allocator name; command(alloc, name) is its
    argv, alloc the client's --alloc (vpmm for VARIANTS, run with their
    environment)."""

    def __init__(self, allocs, command, who):
        self.allocs = list(allocs)
        self.who = who
        self.procs = {}
        for a in self.allocs:
            base = "vpmm" if a in VARIANTS else a
            self.procs[a] = subprocess.Popen(command(base, a), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                             text=True, bufsize=1, env={**os.environ, **VARIANTS.get(a, {})})
        for a, p in self.procs.items():
            line = p.stdout.readline()
            if not line.startswith('{"ready"'):
                self.close()
                sys.exit(f"{who}: {a} did not start: {line!r}")

    def order(self, unit):
        """The allocators in the turn order of this unit: rotated by one a unit."""
        k = unit % len(self.allocs)
        return self.allocs[k:] + self.allocs[:k]

    def ask(self, alloc, unit):
        """Runs `unit` in alloc's worker; its JSON answer."""
        p = self.procs[alloc]
        p.stdin.write(f"{unit}\n")
        line = p.stdout.readline()
        if not line:
            self.close()
            sys.exit(f"{self.who}: {alloc} ended during unit {unit} (its stderr says why)")
        return json.loads(line)

    def finish(self):
        """Every worker's result line, the workers ended."""
        results = {}
        for a, p in self.procs.items():
            p.stdin.write("end\n")
            p.stdin.flush()
            line = p.stdout.readline()
            results[a] = json.loads(line) if line else {"error": "no result line"}
            p.wait(60)
        return results

    def close(self):
        for p in self.procs.values():
            if p.poll() is None:
                p.kill()
