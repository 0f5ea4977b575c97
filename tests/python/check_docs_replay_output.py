#!/usr/bin/env python3
"""The demo's last table, as the README and docs/ quote it, against what the
`vpmm` command prints today: `vpmm replay --backend host --summary
traces/training.pickle.gz` (a replay decides by a fixed clock, so its
numbers are the same every run).

  - README.md's "(training: MAPPED against RESERVED)" must name the table's
    "libvpmm mapped" and "PyTorch reserved" sizes;
  - every code block of docs/*.md that quotes that table (lines starting
    "    PyTorch reserved" and "    libvpmm mapped") must quote each of its
    rows exactly;
  - docs/trace-format.md's example of a text trace's report must be, line
    for line, tests/data/golden/replay_training_trace.txt's (which
    'tool_golden_output' holds to the command's output): times as "N ms",
    a layout shortened with "..." matching at both ends.

A change of placement that moves the peak fails here until the docs say the
new number. Usage: check_docs_replay_output.py SOURCE_DIR VPMM_TOOL"""
import glob
import os
import re
import subprocess
import sys

src, tool = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
trace = "traces/training.pickle.gz"
env = {k: v for k, v in os.environ.items() if not k.startswith("VPMM_")}
r = subprocess.run([tool, "replay", "--backend", "host", "--summary", trace], cwd=src, env=env,
                   capture_output=True, text=True, timeout=300)
if r.returncode != 0:
    sys.exit(f"FAIL: vpmm replay --summary {trace} exited {r.returncode}: {r.stderr}")
table = [l.rstrip() for l in r.stdout.splitlines()]
print("\n".join(table))
# The rows a quote is checked by: the label each starts with.
labels = ("    PyTorch reserved", "    libvpmm mapped ", "    requested ", "  libvpmm would map")
rows = {lab: l for l in table for lab in labels if l.startswith(lab)}
problems = [f"vpmm's table has no row {lab.strip()!r}" for lab in labels if lab not in rows]


def size(label):
    m = re.match(r"\s*\S.*?\s{2,}(\d+(?:\.\d+)? [KMGT]iB)", rows.get(label, ""))
    return m.group(1) if m else None


readme = open(os.path.join(src, "README.md"), encoding="utf-8").read()
m = re.search(r"\(training: (\S+ [KMGT]iB) against (\S+ [KMGT]iB)\)", readme)
if not m:
    problems.append("README.md no longer says '(training: MAPPED against RESERVED)': "
                    "update this check with what it quotes now")
elif (m.group(1), m.group(2)) != (size("    libvpmm mapped "), size("    PyTorch reserved")):
    problems.append(f"README.md says 'training: {m.group(1)} against {m.group(2)}', the replay maps "
                    f"{size('    libvpmm mapped ')} against {size('    PyTorch reserved')}")
quotes = 0
for path in sorted(glob.glob(os.path.join(src, "docs", "*.md"))):
    text = open(path, encoding="utf-8").read()
    for block in re.findall(r"^```[^\n]*\n(.*?)^```$", text, flags=re.S | re.M):
        lines = [l.rstrip() for l in block.splitlines()]
        # The snapshot's table: PyTorch's row beside libvpmm's (a text
        # trace's report, checked below, has libvpmm's only).
        if not any(l.startswith("    libvpmm mapped ") for l in lines) or \
                not any(l.startswith("    PyTorch reserved") for l in lines):
            continue
        quotes += 1
        for l in lines:
            for lab in labels:
                if l.startswith(lab) and lab in rows and l != rows[lab]:
                    problems.append(f"{os.path.relpath(path, src)} quotes\n  {l}\nwhere vpmm prints\n  {rows[lab]}")
# The text trace's report: docs/trace-format.md against the golden output.
golden = open(os.path.join(src, "tests", "data", "golden", "replay_training_trace.txt"), encoding="utf-8").read()
want = golden.split("-- stdout\n", 1)[1].split("-- stderr", 1)[0].splitlines()
fmt = open(os.path.join(src, "docs", "trace-format.md"), encoding="utf-8").read()
example = [b for b in re.findall(r"^```[^\n]*\n(.*?)^```$", fmt, flags=re.S | re.M)
           if b.startswith("traces/training.trace: host backend")]
if len(example) != 1:
    problems.append(f"docs/trace-format.md: {len(example)} example(s) of traces/training.trace's report, not one")
else:
    at = 0
    for line in example[0].splitlines():
        line = re.sub(r"\d+(?:\.\d+)? ms\b", "N ms", line.rstrip())
        if "..." in line:
            head, tail = line.split("...", 1)
            match = lambda g: g.startswith(head) and g.endswith(tail)
        else:
            match = lambda g: g == line
        found = next((i for i in range(at, len(want)) if match(want[i])), None)
        if found is None:
            label = re.match(r"\s*\S+(?: \S+)*?(?=\s{2,}|$)", line).group(0)
            have = [g for g in want if g.startswith(label)]
            problems.append(f"docs/trace-format.md's example quotes\n  {line}\nwhere the golden output has\n  "
                            f"{have[0] if have else '(no such line, or not in this order)'}")
        else:
            at = found + 1
    print(f"docs/trace-format.md's example: {len(example[0].splitlines())} lines against the golden output")
for p in problems:
    print("FAIL:", p)
print(f"README's figure and {quotes} quote(s) of the table in docs/: {len(problems)} problem(s)")
sys.exit(1 if problems else 0)
