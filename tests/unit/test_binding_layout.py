#!/usr/bin/env python3
"""The Python binding's ctypes structs agree with the library's own layout
facts (vpmm_struct_layout / vpmm_struct_field): every field the binding
declares exists in the library's struct at the same offset and size, and the
library's field list is a prefix-compatible superset (the struct_size rule
lets a binding declare fewer trailing fields, never different ones). Guards
the binding's hand-copied layouts until it reads them from the library.
Usage: test_binding_layout.py (VPMM_LIBRARY set; bindings/python on the path)"""
import ctypes
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bindings", "python"))
import vpmm  # noqa: E402  (the binding under test)

lib = ctypes.CDLL(os.environ["VPMM_LIBRARY"])


class FieldInfo(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_uint32), ("kind", ctypes.c_int32), ("name", ctypes.c_char_p),
                ("offset", ctypes.c_uint32), ("size", ctypes.c_uint32)]


def library_layout(name):
    size, n = ctypes.c_uint32(), ctypes.c_uint32()
    if lib.vpmm_struct_layout(name.encode(), ctypes.byref(size), ctypes.byref(n)) != 0:
        return None, None
    fields = []
    for i in range(n.value):
        f = FieldInfo()
        f.struct_size = ctypes.sizeof(FieldInfo)
        assert lib.vpmm_struct_field(name.encode(), i, ctypes.byref(f)) == 0
        fields.append((f.name.decode(), f.offset, f.size))
    return size.value, fields


# The binding's ctypes structs, each matched to the public struct whose
# field names it starts with (so renaming a private class breaks nothing).
public = ["vpmm_config", "vpmm_stats", "vpmm_alloc_attrs", "vpmm_tag_stats", "vpmm_region_info"]
layouts = {n: library_layout(n) for n in public}
pairs = []
for cls in vars(vpmm).values():
    if not (isinstance(cls, type) and issubclass(cls, ctypes.Structure) and cls._fields_):
        continue
    names = [f[0] for f in cls._fields_]
    match = [n for n, (size, fields) in layouts.items()
             if fields and [f[0] for f in fields][:len(names)] == names]
    if len(match) == 1:
        pairs.append((match[0], cls))
    else:
        print(f"FAIL {cls.__name__}: fields {names[:4]}... match no public struct's leading fields")
        pairs.append((None, cls))
failures = checked = 0
for c_name, cls in pairs:
    if c_name is None:
        failures += 1
        checked += 1
        continue
    size, fields = layouts[c_name]
    if size is None:
        print(f"FAIL {c_name}: the library does not describe it")
        failures += 1
        continue
    lib_fields = {n: (o, s) for n, o, s in fields}
    bad = []
    for i, (fname, *_rest) in enumerate(cls._fields_):
        desc = getattr(cls, fname)
        if fname not in lib_fields:
            bad.append(f"{fname}: not a field of {c_name}")
        elif lib_fields[fname] != (desc.offset, desc.size):
            bad.append(f"{fname}: binding offset/size {desc.offset}/{desc.size}, library {lib_fields[fname]}")
        elif i < len(fields) and fields[i][0] != fname:
            bad.append(f"field {i} is {fname} in the binding, {fields[i][0]} in the library")
    if ctypes.sizeof(cls) > size:
        bad.append(f"binding struct is {ctypes.sizeof(cls)} bytes, the library's {size}")
    checked += 1
    print(("ok   " if not bad else "FAIL ") + f"{c_name} ({len(cls._fields_)} of {len(fields)} fields)")
    for b in bad:
        print("  " + b)
    failures += bool(bad)
print(f"{checked - failures} passed, {failures} failed")
sys.exit(1 if failures or checked == 0 else 0)
