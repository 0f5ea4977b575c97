#!/usr/bin/env python3
"""Writes the seed corpus of the fuzz targets (fuzz/corpus/<target>/).

Seeds are small, hand-shaped inputs that reach each target's interesting
paths at once (the byte layouts are those the targets read: see the
comments in fuzz_ops.cpp, fuzz_api.cpp, fuzz_config.cpp). Re-run after
changing a target's input layout; libFuzzer grows its own corpus from these
in build-fuzz/corpus/.
"""
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


def put(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def u16(v):
    return struct.pack("<H", v & 0xFFFF)


# ---- fuzz_ops: [shape, va, initial, limits] then ops (op byte: low 5 bits =
# kind, next 2 = stream slot, top bit = flag; fuzz_ops.cpp's switch)
MALLOC, MALLOC_EX, FREE, FREE_OTHER, HOLD, RELEASE, PAUSE, RESUME, TRIM, LIMIT = 0, 2, 4, 6, 7, 8, 9, 10, 11, 12
RESERVE, SCOPE, DESTROY_STREAM, CPU_CHECK, SYNC, STALE, QUEUED_PAUSE, TIGHT_RESUME, RERESERVE = \
    13, 14, 15, 17, 18, 19, 21, 23, 24
TAG_A, TAG_B, TAG_ALL = 0, 1, 2  # pick_tag


def op(kind, slot=0, flag=0):
    return bytes([(kind & 31) | ((slot & 3) << 5) | ((flag & 1) << 7)])


def malloc_pages(pages, slot=0):
    return op(MALLOC, slot) + u16(((pages - 1) << 1))


def malloc_small(size, slot=0):
    return op(MALLOC, slot) + u16(((size - 1) << 1) | 1)


def malloc_tagged(pages_or_small, tag_b=False, backup=True, slot=0, small=False):
    r = ((pages_or_small - 1) << 1) | 1 if small else (pages_or_small - 1) << 1
    return op(MALLOC_EX, slot) + u16(r) + bytes([(0 if tag_b else 1) | (2 if backup else 0)])


def free(i, slot=0):
    return op(FREE, slot) + u16(i)


def hdr(shape=0x02, va=0, initial=0, limits=0):  # 0x02: 64 KiB pages, one handle per growth
    return bytes([shape, va, initial, limits])


put("fuzz_ops", "walkthrough", hdr(0x02, 0, 15) + malloc_pages(10) + malloc_pages(1) + free(0)
    + malloc_pages(4) + malloc_pages(11) + op(CPU_CHECK))
put("fuzz_ops", "held_stream_harvest", hdr() + malloc_pages(2, 1) + malloc_pages(4, 2) + op(HOLD, 2) + free(1, 2)
    + malloc_pages(6, 1) + op(RELEASE, 2) + malloc_pages(1, 1) + op(CPU_CHECK))
put("fuzz_ops", "small_cross_stream", hdr(0x00) + malloc_small(1000, 1) + malloc_small(1000, 1)
    + op(HOLD, 2) + op(FREE_OTHER, 2) + u16(0) + malloc_small(2000, 1) + op(RELEASE, 2) + op(CPU_CHECK))
put("fuzz_ops", "pause_resume", hdr() + malloc_tagged(3) + malloc_tagged(900, small=True) + malloc_tagged(1, backup=False)
    + op(PAUSE) + bytes([TAG_A]) + op(CPU_CHECK) + op(RESUME) + bytes([TAG_A]) + op(CPU_CHECK)
    + op(PAUSE) + bytes([TAG_ALL]) + op(RESUME) + bytes([TAG_ALL]))
put("fuzz_ops", "oom_and_limit", hdr() + b"".join(malloc_pages(40) for _ in range(8)) + op(LIMIT) + bytes([8])
    + b"".join(malloc_pages(20) for _ in range(4)) + op(LIMIT, 0, 1) + bytes([0]))
put("fuzz_ops", "reservations", hdr() + op(RESERVE) + bytes([0, 10]) + op(RESERVE) + bytes([2, 5])
    + op(MALLOC_EX) + u16(2 << 1) + bytes([4]) + op(RESERVE) + bytes([1]) + op(RESERVE) + bytes([8, 63])
    + malloc_pages(30) + op(RESERVE) + bytes([1]))
put("fuzz_ops", "scopes_retire", hdr() + op(SCOPE, 1) + malloc_pages(2, 1) + op(SCOPE, 0, 1) + free(0, 1)
    + op(DESTROY_STREAM, 1) + bytes([0]) + malloc_pages(3, 1) + op(SYNC, 1) + op(TRIM) + bytes([0]))
put("fuzz_ops", "one_handle_per_page", hdr(0x06, 1, 4) + malloc_pages(3) + malloc_pages(2, 1) + free(0)
    + malloc_pages(5, 2) + op(FREE) + u16(0) + malloc_pages(7) + op(CPU_CHECK))
# Work queued on a held stream still reads a small block of a tagged slab
# when the block is freed there; then the tag is paused.
put("fuzz_ops", "queued_free_then_pause", hdr(0x00) + malloc_tagged(700, slot=1, small=True)
    + malloc_tagged(2, slot=1) + op(QUEUED_PAUSE, 2) + u16(0) + bytes([0x07]) + op(CPU_CHECK)
    + op(RESUME) + bytes([TAG_ALL]) + op(CPU_CHECK))
# The same for a trim of free memory, and a rewrite on the block's own stream.
put("fuzz_ops", "queued_free_then_trim", hdr(0x02) + malloc_pages(3, 1) + malloc_small(300, 1)
    + op(QUEUED_PAUSE, 3) + u16(0) + bytes([0x08]) + op(QUEUED_PAUSE, 1) + u16(0) + bytes([0x28]) + op(CPU_CHECK))
# Several allocations paused, each fitting alone, resumed under a limit just
# above what is mapped; then the limit is lifted and everything comes back.
put("fuzz_ops", "tight_resume", hdr(0x02, 0, 2) + malloc_tagged(4) + malloc_tagged(4, tag_b=True) + malloc_tagged(3)
    + malloc_pages(2) + op(PAUSE) + bytes([TAG_ALL]) + op(TIGHT_RESUME) + bytes([0x2d]) + op(CPU_CHECK)
    + op(TIGHT_RESUME) + bytes([0x05]))
# A stream retired and destroyed while held, with work queued and a tagged
# allocation on it; its stale handle is then passed back; a pause follows.
put("fuzz_ops", "destroy_held_stream", hdr() + malloc_tagged(2, slot=2) + malloc_small(500, 2) + op(HOLD, 2)
    + free(1, 2) + op(DESTROY_STREAM, 2) + bytes([0x18]) + op(STALE) + bytes([0x01, 0]) + u16(100)
    + op(STALE) + bytes([0x0f, 0])
    + op(PAUSE) + bytes([TAG_ALL]) + op(RESUME) + bytes([TAG_ALL]) + op(CPU_CHECK))
# Reservations released and made again at once; the stale handles passed back.
put("fuzz_ops", "stale_reservations", hdr() + op(RESERVE) + bytes([0, 10]) + op(RERESERVE) + bytes([0])
    + op(RERESERVE) + bytes([0]) + op(STALE) + bytes([0x00, 0]) + op(STALE) + bytes([0x02, 1])
    + op(STALE) + bytes([0x04, 0]))
# Limits at creation: an explicit cap (16 pages), a tiny fraction beside it.
put("fuzz_ops", "creation_limits", hdr(0x02, 0, 0, 0x43) + b"".join(malloc_pages(6) for _ in range(4))
    + op(TRIM) + bytes([0]) + malloc_pages(10))

# Views over 2 pages (the initial byte's bits 3-4): two 2-page blocks freed on
# a held stream after their own stream ran (other streams' pending frees),
# then a 4-page request on a third stream that no free region fits.
put("fuzz_ops", "view_foreign_pending", hdr(0x02, 0, 0x08) + malloc_pages(2, 1) + malloc_pages(1, 1)
    + malloc_pages(2, 1) + malloc_pages(1, 1) + op(HOLD, 2) + op(FREE_OTHER, 2) + u16(0)
    + op(FREE_OTHER, 2) + u16(1) + malloc_pages(4, 3) + op(RELEASE, 2) + op(CPU_CHECK))
# The PyTorch hooks (kind 31; its byte: what in bits 0-2, stream k in bits 3-4,
# j in bits 5-6, a flag in bit 7): a tensor on stream 0, read on stream 1 (record_stream), its
# stream then held with its last use queued, freed by PyTorch on stream 0;
# a tensor of the same size on stream 2; every hold released and checked.
TORCH = 31
put("fuzz_ops", "record_stream_third_stream", hdr()
    + op(TORCH) + bytes([0x00]) + u16(6) + op(TORCH) + bytes([0x22, 0]) + op(TORCH) + bytes([0x04])
    + op(TORCH) + bytes([0x03, 0]) + op(TORCH) + bytes([0x10]) + u16(6) + op(TORCH) + bytes([0x07]))

# (fuzz/corpus/fuzz_ops/regression_* are earlier libFuzzer finds, carried over
# to this layout by hand; this script does not write them.)

# ---- fuzz_api: op byte (fn % 32), pool byte, then the call's own bytes
api = []
api.append(bytes([0, 0, 2, 0x40, 0x00, 0, 0, 0, 1]))       # malloc on pool 0
api.append(bytes([2, 0, 1, 0, 0, 0]))                       # free pool-returned pointer
api.append(bytes([2, 1, 5] + [0x41] * 8 + [0]))             # free a garbage value on the other pool
api.append(bytes([2, 2, 1, 0, 0, 0]))                       # free on the destroyed pool
api.append(bytes([4, 0, 3, 0, 0, 0, 0x10, 3]))              # interior lookup
api.append(bytes([5, 0, 0, 0x10, 0, 0, 0, 1]))              # stats with a short struct_size
api.append(bytes([7, 0, 0x10, 0, 1, 1]))                    # dump_text short buffer
api.append(bytes([12, 0, 1, 1, 3, 0x00, 0x10, 0, 0, 0, 0, 0, 1]))  # reserve
api.append(bytes([13, 0, 3] + [0x33] * 8 + [0]))            # release a garbage reservation
api.append(bytes([21, 0, 4] + [0x77] * 8 + [0]))            # hold a garbage stream
api.append(bytes([22, 0, 1, 3, 1, 0x61, 0x62, 0x63, 1]))    # push "abc"
api.append(bytes([24, 0, 1, 0x10, 0, 0, 0, 1, 1]))          # create with struct_size 16
api.append(bytes([10, 0, 3, 2, 0x61, 0x62, 1]))             # pause an unknown tag
for i, a in enumerate(api):
    put("fuzz_api", "call%02d" % i, a)
put("fuzz_api", "sequence", b"".join(api))

# ---- fuzz_config: mode byte (0 env, 1 fields, 2 trace), then the mode's bytes
put("fuzz_config", "env_host_64k", bytes([0]) + u16(0x8000 | 0x1 | 0x4) + bytes([0, 7]))
put("fuzz_config", "env_malformed", bytes([0]) + u16(0x4 | 0x8) + bytes([160, 5, 0x31, 0x30, 0x51, 0x5a, 0x5a, 7]))
put("fuzz_config", "env_limit_percent", bytes([0]) + u16(0x200 | 0x8001) + bytes([0, 12]))
put("fuzz_config", "env_octal", bytes([0]) + u16(0x4) + bytes([200, 3, 0x30, 0x31, 0x30]))
put("fuzz_config", "fields", bytes([1, 1, 1, 1, 3, 1, 10, 1, 5, 1, 4, 0, 1, 2, 0, 0, 0, 1, 0, 1, 1, 1, 1]))
put("fuzz_config", "fields_nan", bytes([1, 1, 1, 1, 2, 1, 3, 1, 1, 1, 1, 2, 1, 4, 4, 1]))
trace_a = b"# walkthrough\nmalloc a 10p\nmalloc b 1p\nfree a\nmalloc c 4p\nmalloc d 11p\nsync\n"
trace_b = b"malloc w 64M\nmalloc x 0x1800000 1\nmalloc y 10p 1\nfree x 1\nsync 1\nfree y 0\nsync\n"
trace_rmm = (b"Thread,Time,Action,Pointer,Size,Stream\n"
             b"1,08:00:00.1,allocate,7f8a40000000,1024,0\n"
             b"1,08:00:00.2,allocate failure,0,99999999999,0\n"
             b"1,08:00:00.3,free,7f8a40000000,1024,0\n")
put("fuzz_config", "trace_walkthrough", bytes([2, 3]) + b"10p" + trace_a)
put("fuzz_config", "trace_streams", bytes([2, 4]) + b"0x1B" + trace_b)
put("fuzz_config", "trace_rmm", bytes([2, 2]) + b"4K" + trace_rmm)
put("fuzz_config", "trace_bad", bytes([2, 3]) + b"010" + b"malloc a 0\nfree b\nmalloc c 1 2000\n")
# A line of only separators once broke the trace parser; it is now rejected
# with "a line of separators only" (FILE:LINE). Kept as a regression seed.
put("fuzz_config", "trace_separator_only_line", bytes([2, 0]) + b",\n")

# ---- fuzz_ipc: op byte (% 14, fuzz_ipc.cpp's switch), then the op's bytes.
# alloc: kind (0 tagged, 1 untagged, 2 small), u16 size; free: index;
# export: how (0 one, 1 many, 2 tag), [count,] (index, u16 offset) per pointer;
# receive: export; attack: received, kind (% 12), descriptor, its bytes;
# import: received, pool, pidfd (0 of 4); pause/resume/trim: k [, u16].
I_ALLOC, I_FREE, I_EXPORT, I_RECV, I_ATTACK, I_IMPORT, I_CLOSE_IMP, I_PAUSE, I_CLOSE_EXP, I_SEND = \
    0, 2, 3, 4, 5, 8, 9, 10, 11, 12


def ipc_alloc(kind, size):
    return bytes([I_ALLOC, kind]) + u16(size)


base = ipc_alloc(0, 0x6000) + ipc_alloc(1, 0x4000) + ipc_alloc(2, 300) + ipc_alloc(2, 300)
one = bytes([I_EXPORT, 0, 0]) + u16(8)
many = bytes([I_EXPORT, 1, 3, 0]) + u16(0) + bytes([1]) + u16(64) + bytes([2]) + u16(4)
tag = bytes([I_EXPORT, 2])
recv0 = bytes([I_RECV, 0])
imp = bytes([I_IMPORT, 0, 0, 1])
put("fuzz_ipc", "truncate_then_free", base + one + recv0 + imp + bytes([I_ATTACK, 0, 0, 0]) + u16(0)
    + bytes([I_FREE, 0, I_PAUSE, 2]) + u16(0))
put("fuzz_ipc", "write_state_word", base + one + recv0 + imp + bytes([I_FREE, 0])
    + bytes([I_ATTACK, 0, 3, 0, 1]) + bytes([I_ATTACK, 0, 4, 0]) + (1).to_bytes(8, "little") + bytes([3]))
put("fuzz_ipc", "many_pause_resume", base + many + recv0 + imp + bytes([I_PAUSE, 0, I_PAUSE, 1]) + recv0
    + bytes([I_IMPORT, 1, 1, 0]))
put("fuzz_ipc", "tag_slab_trim", base + tag + recv0 + imp + bytes([I_FREE, 2, I_FREE, 2, I_PAUSE, 2]) + u16(0))
put("fuzz_ipc", "mangled_descriptor", base + one + recv0 + bytes([I_ATTACK, 0, 10, 0, 0]) + u16(40)
    + bytes([1]) + imp + bytes([I_ATTACK, 0, 9, 1, 2]) + imp + bytes([I_ATTACK, 0, 11, 0, 1]) + imp)
put("fuzz_ipc", "locks_seals_flags", base + one + recv0 + bytes([I_ATTACK, 0, 6, 0, 40]) + bytes(range(80))
    + bytes([I_ATTACK, 0, 5, 1, 0x1f, I_ATTACK, 0, 7, 2]) + imp + bytes([I_SEND, 0, 63, I_CLOSE_EXP, 0]))
