#!/usr/bin/env python3
"""docs/README.md is the map of the docs: every page of docs/ is in its table,
and every relative link it holds (and the README's links into docs/) leads
to a file that exists.
Usage: check_docs_index.py SOURCE_DIR"""
import os
import re
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
for b in bad:
    print("FAIL:", b)
print(f"docs index: {len(bad)} problem(s)")
sys.exit(1 if bad else 0)
