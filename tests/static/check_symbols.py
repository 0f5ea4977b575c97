#!/usr/bin/env python3
"""Fails when libvpmm.a defines a global symbol a user's program could clash
with: every defined global must be the C API (vpmm*) or C++ in namespace vpmm,
or a weak (COMDAT) instantiation of the C++ standard library over standard
types only, which every C++ object that uses the same template emits
identically (one over a vpmm:: type is an error: it names libvpmm's insides).
Usage: check_symbols.py NM libvpmm.a"""
import re
import subprocess
import sys

nm, archive = sys.argv[1], sys.argv[2]
out = subprocess.run([nm, "-g", "--defined-only", archive], check=True, capture_output=True, text=True).stdout
# Mangled names in namespace std / __gnu_cxx, typeinfo and guards of them.
std = re.compile(r"^_Z(Z?N?K?(St|9__gnu_cxx)|T[ISV]St|GVZN?St)")
bad, n = [], 0
for line in out.splitlines():
    parts = line.split()
    if len(parts) != 3:
        continue
    kind, name = parts[1], parts[2]
    n += 1
    if name.startswith("vpmm") or name.startswith("_ZN4vpmm"):
        continue
    # Over one of libvpmm's own types it is no standard-library instantiation
    # a program shares: scripts/prelink-static.sh makes those local.
    if kind in "WVu" and std.match(name) and "4vpmm" not in name:
        continue
    bad.append(f"{kind} {name}")
if bad:
    print(f"{archive}: {len(bad)} global symbol(s) outside the vpmm namespace:")
    for b in bad:
        print("  " + b)
    sys.exit(1)
print(f"{archive}: {n} defined globals, all vpmm_* or weak std:: instantiations")
