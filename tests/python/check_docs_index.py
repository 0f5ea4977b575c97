#!/usr/bin/env python3
"""docs/README.md is the map of the docs: every page of docs/ is in its table,
and every relative link it holds (and the README's links into docs/) leads
to a file that exists. docs/building.md's Layout block is the map of the
tree: it names every tracked top-level directory and every directory of
src/, tests/ and bindings/ ("src/ledger/"), so a folder added is a line
added there.
Usage: check_docs_index.py SOURCE_DIR"""
import os
import re
import subprocess
import sys

src = sys.argv[1]
docs = os.path.join(src, "docs")
index = open(os.path.join(docs, "README.md"), encoding="utf-8").read()
bad = []
table = index[index.index("## Every page"):]
for page in sorted(f for f in os.listdir(docs) if f.endswith(".md") and f != "README.md"):
    if f"[{page}]({page})" not in table:
        bad.append(f"docs/{page} is not in docs/README.md's table")
for path, text in (("docs/README.md", index),
                   ("README.md", open(os.path.join(src, "README.md"), encoding="utf-8").read())):
    base = os.path.dirname(os.path.join(src, path))
    for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", text):
        if not os.path.exists(os.path.normpath(os.path.join(base, target))):
            bad.append(f"{path}: link to {target}, which does not exist")
building = open(os.path.join(docs, "building.md"), encoding="utf-8").read()
m = re.search(r"^## Layout\n\n```\n(.*?)^```$", building, flags=re.S | re.M)
if not m:
    bad.append("docs/building.md has no ## Layout block")
else:
    layout = m.group(1)
    try:
        out = subprocess.run(["git", "-C", src, "ls-files", "-z", "-co", "--exclude-standard"],
                             capture_output=True, check=True).stdout.decode()
        files = [f for f in out.split("\0") if f and os.path.exists(os.path.join(src, f))]
    except (OSError, subprocess.CalledProcessError):
        files = []  # not a git checkout: nothing to compare with
    dirs = set()
    for f in files:
        parts = f.split("/")
        if len(parts) > 1 and not parts[0].startswith("."):
            dirs.add(parts[0] + "/")
            if parts[0] in ("src", "tests", "bindings") and len(parts) > 2:
                dirs.add(parts[0] + "/" + parts[1] + "/")
    for d in sorted(dirs):
        # A top-level directory starts a line of its own (or its folders'
        # lines); a folder may share a line ("tests/hip_emu/ ...;  tests/hip/").
        where = r"^" if d.count("/") == 1 else r"(^|\s)"
        if not re.search(where + re.escape(d), layout, flags=re.M):
            bad.append(f"docs/building.md's Layout does not name {d}")
    print(f"layout: {len(dirs)} directories")
for b in bad:
    print("FAIL:", b)
print(f"docs index: {len(bad)} problem(s)")
sys.exit(1 if bad else 0)
