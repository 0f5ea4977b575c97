"""One status-name table serves the library and every binding.

The statuses are pinned in include/vpmm.h; their names have one home,
kStatusNames in src/common/status.cpp, which vpmm_status_string and the fault
backend read. The bindings keep lists of their own where their language wants
one (a Python dict and exception classes, a Go constant and sentinel per
status, a Rust enum), so this test reads each of them and fails when one
lacks a status, names it differently or maps it to another code: adding a
status then fails here until every binding knows it.
Usage: check_status_names.py SOURCE_ROOT [PATH_TO_LIBVPMM_SO]
"""
import ctypes
import re
import runpy
import sys
from pathlib import Path

root = Path(sys.argv[1])
errors = []


def check(ok, what):
    if not ok:
        errors.append(what)


# The pinned codes: the C enumeration of vpmm.h (the C++ constants repeat it).
header = (root / "include/vpmm.h").read_text()
enum = re.search(r"enum \{\s*VPMM_OK = 0,(.*?)\};", header, re.S).group(0)
pinned = {name: int(v) for name, v in re.findall(r"\b(VPMM_(?:OK|ERR_[A-Z_]+)) = (\d+)", enum)}
codes = sorted(pinned.values())
check(codes == list(range(len(codes))), f"vpmm.h: status codes are not 0..n-1: {pinned}")
names = {v: k for k, v in pinned.items()}
cpp_consts = dict((k, int(v)) for k, v in re.findall(
    r"static const vpmm_status (VPMM_(?:OK|ERR_[A-Z_]+)) = (\d+);", header))
check(cpp_consts == pinned, f"vpmm.h: C++ constants {cpp_consts} differ from the C enum {pinned}")

# The table.
status_cpp = (root / "src/common/status.cpp").read_text()
table_src = re.search(r"kStatusNames\[\] = \{(.*?)\};", status_cpp, re.S).group(1)
table = re.findall(r'"(VPMM_[A-Z_]+)"', table_src)
check(table == [names[c] for c in codes],
      f"src/common/status.cpp: kStatusNames {table} is not vpmm.h's {[names[c] for c in codes]}")

# The library, when given: vpmm_status_string is the table.
if len(sys.argv) > 2:
    lib = ctypes.CDLL(sys.argv[2])
    lib.vpmm_status_string.restype = ctypes.c_char_p
    lib.vpmm_status_string.argtypes = [ctypes.c_int32]
    for c in codes:
        got = lib.vpmm_status_string(c).decode()
        check(got == names[c], f"vpmm_status_string({c}) = {got}, not {names[c]}")
    for c in (-1, len(codes), 100):
        got = lib.vpmm_status_string(c).decode()
        check(got == "VPMM_ERR_UNKNOWN", f"vpmm_status_string({c}) = {got}")

# Python: STATUS_NAMES, and one exception class per error status.
py = runpy.run_path(str(root / "bindings/python/vpmm/errors.py"))
check(py["STATUS_NAMES"] == names, f"bindings/python/vpmm/errors.py: STATUS_NAMES "
      f"{py['STATUS_NAMES']} is not {names}")
for c in codes[1:]:
    cls = type(py["error_for_status"](c))
    check(cls is not py["VpmmError"] and cls.status == c,
          f"bindings/python: no exception class of its own for {names[c]}")

# Go: a Status constant and a sentinel per error status, bound to the C name.
go = (root / "bindings/go/errors.go").read_text()
go_consts = dict(re.findall(r"(Status[A-Za-z]+)\s+Status = C\.(VPMM_ERR_[A-Z_]+)", go))
for c in codes[1:]:
    n = names[c]
    check(n in go_consts.values(), f"bindings/go/errors.go: no Status constant for {n}")
    const = next((k for k, v in go_consts.items() if v == n), None)
    check(const is None or re.search(r"Err[A-Za-z]+\s*=\s*&Error\{Status: %s\}" % const, go),
          f"bindings/go/errors.go: no sentinel error for {n}")
go_test = (root / "bindings/go/errors_test.go").read_text()
for c in codes[1:]:
    check(f'"{names[c]}"' in go_test, f"bindings/go/errors_test.go: {names[c]} is not tested")

# Rust: Status::from_code and Status::code cover every error status.
rs = (root / "bindings/rust/vpmm/src/error.rs").read_text()
for c in codes[1:]:
    n = names[c]
    check(re.search(r"sys::%s\s*=>\s*Status::" % n, rs),
          f"bindings/rust/vpmm/src/error.rs: Status::from_code lacks {n}")
    check(re.search(r"=>\s*sys::%s\b" % n, rs),
          f"bindings/rust/vpmm/src/error.rs: Status::code lacks {n}")

if errors:
    print("\n".join(errors))
    sys.exit(1)
print(f"status names: {len(codes)} statuses, one table (src/common/status.cpp); "
      "vpmm.h, the library and the Python, Go and Rust bindings agree")
