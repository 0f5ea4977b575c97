#!/usr/bin/env python3
"""docs/misuse.md says which file tests each range of its rows: every row's
test (its last column, "same" for the row above's) must be a test of a file
its range names, and every row must fall in a range. Keeps the page's
introduction true as rows are added or tests move.
Usage: check_misuse_doc.py SOURCE_DIR"""
import os
import re
import sys

src = sys.argv[1]
doc = open(os.path.join(src, "docs", "misuse.md"), encoding="utf-8").read()
intro, table = doc.split("| # | Misuse |", 1)

# The ranges table: | 1-27 | topic | `tests/unit/test_x.cpp`, ... |
ranges = []
for m in re.finditer(r"^\| (\d+)(?:-(\d+))? \| [^|]* \| (.*) \|$", intro, re.M):
    lo, hi = int(m.group(1)), int(m.group(2) or m.group(1))
    files = re.findall(r"`(tests/[^`]+)`", m.group(3))
    # C++ sources escape the quotes a test name may hold.
    texts = [open(os.path.join(src, f), encoding="utf-8").read().replace('\\"', '"') for f in files]
    ranges.append((lo, hi, texts, files))
if not ranges:
    sys.exit("FAIL: docs/misuse.md has no table of row ranges")

# A test's name as the file spells it: the column may prefix the suite.
PREFIX = re.compile(r"^(contract|abi|limits|backup_stores|misuse): ")

bad = []
rows = 0
last = None
for m in re.finditer(r"^\| (\d+) \|.*\| ([^|]+) \|$", table, re.M):
    n, test = int(m.group(1)), m.group(2).strip()
    rows += 1
    name = test
    if name.startswith("same"):
        name = last
    else:
        # "same; other test" names a second test: the first must be there.
        name = name.split("; ")[0]
        while PREFIX.match(name) and name not in "".join(t for r in ranges for t in r[2]):
            name = PREFIX.sub("", name, count=1)
        last = name
    where = [r for r in ranges if r[0] <= n <= r[1]]
    if not where:
        bad.append(f"row {n}: in no range of the introduction's table")
        continue
    key = name.rstrip(". ")[:60]
    if name == f"row {n}":  # the contract's rows 28-60: "row N: what it checks"
        key = f"row {n}:"
    if not any(key in t for t in where[0][2]):
        bad.append(f"row {n}: test '{key}' is not in {', '.join(where[0][3])}")
for b in bad:
    print("FAIL:", b)
print(f"{rows} rows, {len(ranges)} ranges, {len(bad)} mismatches")
sys.exit(1 if bad else 0)
