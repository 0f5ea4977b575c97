#!/usr/bin/env python3
"""Writes the option table of docs/options.md from the library itself.

The options are declared once, in src/config/option_list.hpp; the library
exports them (vpmm_option_count / vpmm_option_get), and this script prints
them as the markdown table docs/options.md carries, one row per option in
table order:  | `name` | `VPMM_X` or - | default | help |
The `options` unit test compares the docs with the library and fails when
they differ; run this script to bring the docs back in line.

Usage: scripts/options-doc.py [--check] [BUILD_DIR]   (default BUILD_DIR: build)
  without --check  rewrites the table in docs/options.md
  --check          exits 1, printing a diff, when docs/options.md differs
"""
import difflib
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOC = os.path.join(ROOT, "docs", "options.md")
HEADER = ["| option | variable | default | meaning |", "|--|--|--|--|"]


def library_rows(build):
    """The table's rows, read through the Python binding's loader and its
    struct layouts (made from the library's own vpmm_struct_field)."""
    os.environ["VPMM_LIBRARY"] = os.path.join(build, "libvpmm.so.1")
    sys.path.insert(0, os.path.join(ROOT, "bindings", "python"))
    import ctypes
    from vpmm import _library as L

    OptionInfo = L.make_struct("vpmm_option_info", "OptionInfo")
    count = L.sig("vpmm_option_count", L.u32)
    get = L.sig("vpmm_option_get", L.i32, L.u32, ctypes.POINTER(OptionInfo))
    rows = []
    for i in range(count()):
        o = OptionInfo()
        o.struct_size = ctypes.sizeof(OptionInfo)
        L.check(get(i, ctypes.byref(o)))
        text = {k: ctypes.string_at(getattr(o, k)).decode() if getattr(o, k) else None
                for k in ("name", "env", "default_text", "help")}  # char* fields: void* in ctypes
        env = f"`{text['env']}`" if text["env"] else "-"
        rows.append(f"| `{text['name']}` | {env} | {text['default_text']} | {text['help']} |")
    return rows


def split_doc(lines):
    """(before, table rows, after): the table starts at its header line and
    ends at the first line that is not a table row."""
    start = next(i for i, line in enumerate(lines) if line.startswith("| option"))
    end = start + 1
    while end < len(lines) and lines[end].startswith("|"):
        end += 1
    return lines[:start], [line for line in lines[start:end] if not line.startswith("|--")][1:], lines[end:]


def main():
    args = [a for a in sys.argv[1:] if a != "--check"]
    check = "--check" in sys.argv[1:]
    build = os.path.abspath(args[0] if args else os.path.join(ROOT, "build"))
    want = library_rows(build)
    with open(DOC) as f:
        lines = f.read().split("\n")
    before, have, after = split_doc(lines)
    if check:
        if have == want:
            print(f"ok: docs/options.md lists the library's {len(want)} options")
            return 0
        sys.stdout.writelines(line + "\n" for line in difflib.unified_diff(
            have, want, "docs/options.md", "the library", lineterm=""))
        print("docs/options.md differs from the option table: run scripts/options-doc.py")
        return 1
    with open(DOC, "w") as f:
        f.write("\n".join(before + HEADER + want + after))
    print(f"wrote the {len(want)} options of {build}/libvpmm.so.1 into docs/options.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
