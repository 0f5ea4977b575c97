#!/usr/bin/env python3
"""docs/design.md's table of the core's modules says what src/core/modules.txt
says (the ranks tests/check_layering.sh enforces), and every folder of
src/core/ is a module of it: the map a reader follows is the one the build
checks.

Usage: check_core_modules.py SOURCE_ROOT. Prints each difference; exits 1 if any.
"""
import os
import re
import sys

root = sys.argv[1] if len(sys.argv) > 1 else "."
table = {}
for line in open(os.path.join(root, "src/core/modules.txt")):
    if line.startswith("#") or not line.strip():
        continue
    rank, module = line.split()[:2]
    table[module] = int(rank)

doc = {}
text = open(os.path.join(root, "docs/design.md")).read()
m = re.search(r"^### Core modules\n(.*?)(?=^#)", text, re.S | re.M)
if not m:
    print("docs/design.md has no '### Core modules' section")
    sys.exit(1)
for row in m.group(1).splitlines():
    cells = [c.strip() for c in row.strip().strip("|").split("|")]
    if len(cells) < 3 or not cells[0].isdigit():
        continue
    doc[cells[1].strip("`")] = int(cells[0])

bad = []
for mod, rank in table.items():
    if mod not in doc:
        bad.append(f"module {mod} (rank {rank}) is missing from docs/design.md's module table")
    elif doc[mod] != rank:
        bad.append(f"module {mod}: rank {rank} in src/core/modules.txt, {doc[mod]} in docs/design.md")
for mod in doc:
    if mod not in table:
        bad.append(f"docs/design.md lists module {mod}, which src/core/modules.txt does not have")
core = os.path.join(root, "src/core")
for dirpath, dirnames, filenames in os.walk(core):
    rel = os.path.relpath(dirpath, core)
    if rel != "." and any(f.endswith((".cpp", ".hpp")) for f in filenames) and rel not in table:
        bad.append(f"src/core/{rel}/ holds sources but is no module of src/core/modules.txt")
for mod in table:
    if mod != "pool" and not os.path.isdir(os.path.join(core, mod)):
        bad.append(f"module {mod} of src/core/modules.txt has no folder src/core/{mod}/")
for b in bad:
    print(b)
print(f"core modules: {len(table)} in src/core/modules.txt, {len(doc)} in docs/design.md, "
      f"{len(bad)} differences")
sys.exit(1 if bad else 0)
