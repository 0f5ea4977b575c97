#!/usr/bin/env python3
"""VPMM_LOG and the allocator hooks' failure reports: a hook that returns
NULL (PyTorch then says only "out of memory") prints the reason on stderr,
once per kind of failure at the default level, every time at debug, never
at off; a malformed VPMM_LOG is itself reported like any malformed variable.
Each case runs in a fresh process (the level is read once per process).
Usage: test_hook_log.py LIBVPMM_SO"""
import os
import subprocess
import sys

lib = sys.argv[1]
child = r"""
import ctypes, sys
l = ctypes.CDLL(sys.argv[1])
l.vpmm_torch_malloc.restype = ctypes.c_void_p
l.vpmm_torch_malloc.argtypes = [ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p]
ptrs = [l.vpmm_torch_malloc(4096, 0, None) for _ in range(3)]
print(sum(1 for p in ptrs if not p))
"""
failures = 0


def case(name, env, want_nulls, want_lines, want_text=None):
    global failures
    e = {k: v for k, v in os.environ.items() if not k.startswith("VPMM_")}
    e.update(env)
    e["VPMM_BACKEND"] = e.get("VPMM_BACKEND", "host")
    r = subprocess.run([sys.executable, "-c", child, lib], env=e, capture_output=True, text=True)
    lines = [l for l in r.stderr.splitlines() if l.startswith("libvpmm:")]
    ok = r.returncode == 0 and r.stdout.strip() == str(want_nulls) and len(lines) == want_lines
    if ok and want_text:
        ok = all(t in "\n".join(lines) for t in want_text)
    print(("ok   " if ok else "FAIL ") + name)
    if not ok:
        failures += 1
        print(f"  nulls {r.stdout.strip()} (want {want_nulls}), {len(lines)} report lines (want {want_lines})")
        print("  stderr: " + r.stderr.replace("\n", "\n          "))


bad = {"VPMM_PAGE_SIZE": "3M"}
case("default level: the reason, once", bad, 3, 1,
     ["vpmm_torch_malloc", "VPMM_ERR_INVALID_ARGUMENT", "page_size 3145728", "default va_size"])
case("VPMM_LOG=debug: every failure", dict(bad, VPMM_LOG="debug"), 3, 3)
case("VPMM_LOG=off: nothing", dict(bad, VPMM_LOG="off"), 3, 0)
case("VPMM_LOG=error: configuration failures still show", dict(bad, VPMM_LOG="error"), 3, 1)
case("VPMM_LOG=info: the default pool is announced", {"VPMM_LOG": "info"}, 0, 1, ["default pool of device 0"])
case("a well-configured pool says nothing by default", {}, 0, 0)
case("malformed VPMM_LOG: reported as a malformed variable", {"VPMM_LOG": "loud"}, 3, 1,
     ['VPMM_LOG="loud" is malformed'])
print(f"{7 - failures} passed, {failures} failed")
sys.exit(1 if failures else 0)
