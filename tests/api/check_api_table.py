"""vpmm_get_api's table holds every exported function of libvpmm and nothing else.

The exported set comes from the ELF itself (`nm -D --defined-only`), not from a
list kept by hand, so a function added to the library without a table entry
(or an entry pointing elsewhere) fails here. Every slot of the table after its
two uint32_t header words is a function pointer (src/api/api_table.cpp asserts
that layout), so the table is read as an array of addresses and compared with
the addresses the dynamic loader gives each exported name.
Usage: check_api_table.py PATH_TO_LIBVPMM_SO
"""
import ctypes
import subprocess
import sys

lib_path = sys.argv[1]
nm = subprocess.run(["nm", "-D", "--defined-only", lib_path], check=True, capture_output=True,
                    text=True).stdout
exported = sorted({line.split()[-1].split("@")[0] for line in nm.splitlines()
                   if line.split() and line.split()[-2:-1] == ["T"]
                   and line.split()[-1].startswith("vpmm_")})
assert "vpmm_get_api" in exported, "vpmm_get_api is not exported"
functions = [name for name in exported if name != "vpmm_get_api"]

lib = ctypes.CDLL(lib_path)
lib.vpmm_get_api.restype = ctypes.c_void_p
lib.vpmm_get_api.argtypes = [ctypes.c_uint32]
table = lib.vpmm_get_api(1)
assert table, "vpmm_get_api(1) returned NULL"
size, abi = ctypes.c_uint32.from_address(table).value, ctypes.c_uint32.from_address(table + 4).value
assert abi == 1, f"table abi_version {abi}"
ptr = ctypes.sizeof(ctypes.c_void_p)
assert (size - 8) % ptr == 0, f"table size {size} is not 8 + n pointers"
slots = [ctypes.c_void_p.from_address(table + 8 + i * ptr).value for i in range((size - 8) // ptr)]
assert all(slots), f"empty slots at {[i for i, s in enumerate(slots) if not s]}"
assert len(set(slots)) == len(slots), "a function appears twice in the table"

address = {ctypes.cast(getattr(lib, name), ctypes.c_void_p).value: name for name in functions}
missing = sorted(name for addr, name in address.items() if addr not in slots)
foreign = [i for i, s in enumerate(slots) if s not in address]
assert not missing, f"exported but not in vpmm_api: {missing}"
assert not foreign, f"table slots that are no exported vpmm_* function: {foreign}"
assert lib.vpmm_get_api(2) is None, "vpmm_get_api(2) must be NULL: only ABI 1 exists"
print(f"vpmm_api: {len(slots)} entries = every exported vpmm_* function but vpmm_get_api")
