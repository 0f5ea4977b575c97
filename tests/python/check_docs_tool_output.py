#!/usr/bin/env python3
"""What README.md and docs/ quote of the `vpmm` command's output, against
what it prints today. The demo's last table is `vpmm replay --backend host
--summary traces/training.pickle.gz` (a replay decides by a fixed clock, so
its numbers are the same every run):

  - README.md's "(training: MAPPED against RESERVED)" must name the table's
    "libvpmm mapped" and "PyTorch reserved" sizes;
  - every code block of docs/*.md that quotes that table (lines starting
    "    PyTorch reserved" and "    libvpmm mapped") must quote each of its
    rows exactly;
  - docs/options.md's example of `vpmm info` must list the variables and the
    effective config's rows the command lists now (names only: the values
    and the driver lines are the machine's);
  - docs/trace-format.md's example of a text trace's report must be, line
    for line, tests/data/golden/replay_training_trace.txt's (which
    'tool_golden_output' holds to the command's output): times as "N ms",
    a layout shortened with "..." matching at both ends.

A change of placement that moves the peak, or an option added, fails here
until the docs say so. Usage: check_docs_tool_output.py SOURCE_DIR VPMM_TOOL"""
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
# `vpmm info` in docs/options.md: the same variables and rows as the command.
def info_names(lines):
    env_vars, rows, in_config = [], [], False
    for l in lines:
        if l.startswith("effective config"):
            in_config = True
        m = re.match(r"^  (VPMM_\w+)\s", l)
        if m and not in_config:
            env_vars.append(m.group(1))
        m = re.match(r"^  ([a-z_0-9]+)\s{2,}\S", l)
        if m and in_config:
            rows.append(m.group(1))
    return env_vars, rows


info_env = dict(env, VPMM_PAGE_SIZE="4M")
r = subprocess.run([tool, "info"], cwd=src, env=info_env, capture_output=True, text=True, timeout=120)
opts = open(os.path.join(src, "docs", "options.md"), encoding="utf-8").read()
m = re.search(r"^```\n(\$ [^\n]*vpmm info\n.*?)^```$", opts, flags=re.S | re.M)
if not m:
    problems.append("docs/options.md has no ```-block of `$ ... vpmm info`")
else:
    have, now = info_names(m.group(1).splitlines()), info_names(r.stdout.splitlines())
    for what, h, n in (("variables", have[0], now[0]), ("effective config rows", have[1], now[1])):
        if h != n:
            extra, missing = sorted(set(h) - set(n)), sorted(set(n) - set(h))
            problems.append(f"docs/options.md's `vpmm info` differs from the command's {what}: "
                            f"extra {extra or 'none'}, missing {missing or 'none'}"
                            + ("; the order differs" if not extra and not missing else ""))
    print(f"docs/options.md's vpmm info: {len(now[0])} variables, {len(now[1])} rows")
for p in problems:
    print("FAIL:", p)
print(f"README's figure and {quotes} quote(s) of the table in docs/: {len(problems)} problem(s)")
sys.exit(1 if problems else 0)
