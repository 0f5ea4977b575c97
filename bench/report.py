#!/usr/bin/env python3
"""Builds bench/results/<device>.md from the RESULT lines of the benchmark logs.

Usage: report.py --out FILE --command "CMD" [--findings MD] LOG [LOG...]

Each benchmark program (bench_vpmm, bench_torch) prints one line
`RESULT {json}` per measurement (bench/bench_common.hpp); bench_pause_resume
prints `PAUSE key value` lines. This script only
formats: it computes ratios and compares against the project's targets
(hot path pair < 0.15 us; fragmentation ratio <= 1.02; growth within 2x of a
single cuMemCreate + map + set-access; pause/resume with backup >= 85% of the
pinned copy limit, without backup within 1.25x / 2x of one handle per
allocation) and says whether each is met. It never
fails on missing data: absent measurements show as "n/a".
"""
import argparse
import datetime
import json
import subprocess
import sys

HOT_TARGET_US = 0.15
FRAG_TARGET = 1.02
GROWTH_TARGET = 2.0

HOT_ALLOCS = ["vpmm", "torch_native", "torch_expandable", "cudaMallocAsync", "cudaMalloc",
              "vmm_per_alloc"]
HOT_CASES = ["4KiB", "1MiB", "2MiB", "64MiB", "churn"]
FRAG_ALLOCS = ["vpmm_growth_handles", "vpmm_page_handles", "torch_native", "torch_expandable",
               "cudaMallocAsync"]


def load_pause(paths):
    """The `PAUSE key value` lines of bench_pause_resume, as a dict."""
    vals = {}
    for p in paths:
        try:
            with open(p, errors="replace") as f:
                for line in f:
                    parts = line.split()
                    if len(parts) == 3 and parts[0] == "PAUSE":
                        try:
                            vals[parts[1]] = float(parts[2])
                        except ValueError:
                            pass
        except OSError:
            pass
    return vals


PAUSE_TARGET_PCT = 85.0
PAUSE_SHAPES = [("64x256MiB", "64 x 256 MiB", 1.25), ("4096x4MiB", "4096 x 4 MiB", 2.0)]


def pause_section(v, w):
    """Section 5 from the PAUSE lines (absent values show as n/a)."""
    def g(k, f="%.2f"):
        return "n/a" if k not in v else f % v[k]

    def met(ok):
        return "met" if ok else "**not met**"

    w("## 5. Pause and resume (bench/bench_pause_resume.cu, same run)")
    w("")
    w("16 GiB per shape. Medians of 5 cycles after a first cycle that pins the backup buffers. "
      "Pinned copy limit: one 4 GiB cudaMemcpyAsync each way, same run: D2H %s GB/s, H2D %s GB/s. "
      "Pinning 4 GiB: cudaHostAlloc %s ms, cudaHostRegister %s ms (libvpmm registers)."
      % (g("limit_d2h_gbps"), g("limit_h2d_gbps"), g("pin_4GiB_hostalloc_ms", "%.0f"),
         g("pin_4GiB_register_ms", "%.0f")))
    w("")
    w("With host backup (`VPMM_ALLOC_HOST_BACKUP`). \"per-allocation\" is one handle per "
      "allocation with a blocking cudaMemcpy each (torch_memory_saver's way, its buffers pinned "
      "once up front):")
    w("")
    w("| shape | | libvpmm GB/s | share of the pinned limit | target >= %.0f%% | per-allocation GB/s | "
      "libvpmm / per-allocation | first cycle ms (pins) | data intact |" % PAUSE_TARGET_PCT)
    w("|---|---|---|---|---|---|---|---|---|")
    for key, name, _ in PAUSE_SHAPES:
        for op, lim in (("pause", "d2h"), ("resume", "h2d")):
            mine = v.get("%s_backup_%s_gbps" % (key, op))
            pct = v.get("%s_backup_%s_pct_of_limit" % (key, op))
            drv = v.get("%s_backup_driver_%s_gbps" % (key, op))
            w("| %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
                name, op, g("%s_backup_%s_gbps" % (key, op)),
                "n/a" if pct is None else "**%.1f%%**" % pct,
                "n/a" if pct is None else met(pct >= PAUSE_TARGET_PCT),
                g("%s_backup_driver_%s_gbps" % (key, op)),
                "n/a" if not (mine and drv) else "%.2fx" % (mine / drv),
                g("%s_backup_first_%s_ms" % (key, op), "%.0f"),
                "n/a" if "%s_backup_data_intact" % key not in v else
                ("yes" if v["%s_backup_data_intact" % key] == 1 else "**no**")))
    w("")
    w("Without backup, against one handle per allocation with the driver API (unmap + release per "
      "handle to pause; create + map + set-access per handle to resume), ms:")
    w("")
    w("| shape | vpmm pause | vpmm resume | driver pause | driver resume | vpmm / driver (pause + resume) | target |")
    w("|---|---|---|---|---|---|---|")
    for key, name, target in PAUSE_SHAPES:
        r = v.get("%s_ratio" % key)
        w("| %s | %s | %s | %s | %s | %s | <= %.2fx (%s) |" % (
            name, g("%s_vpmm_pause_ms" % key), g("%s_vpmm_resume_ms" % key),
            g("%s_driver_pause_ms" % key), g("%s_driver_resume_ms" % key),
            "n/a" if r is None else "**%.2fx**" % r, target,
            "n/a" if r is None else met(r <= target)))
    w("")


def load(paths):
    rows = []
    for p in paths:
        try:
            with open(p, errors="replace") as f:
                for line in f:
                    if line.startswith("RESULT "):
                        try:
                            rows.append(json.loads(line[7:]))
                        except json.JSONDecodeError:
                            pass
        except OSError:
            pass
    return rows


def fmt_us(v):
    if v is None:
        return "n/a"
    if v >= 1000:
        return "%.0f" % v
    if v >= 10:
        return "%.1f" % v
    if v >= 1:
        return "%.2f" % v
    return "%.3f" % v


def gib(v):
    return "n/a" if v is None else "%.2f" % (v / 2**30)


def mib(v):
    return "n/a" if v is None else "%.1f" % (v / 2**20)


def yes(b):
    return "yes" if b else "**no**"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--command", default="scripts/gpu-run.sh")
    ap.add_argument("--findings", help="hand-written markdown appended after the tables")
    ap.add_argument("logs", nargs="+")
    a = ap.parse_args()
    rows = load(a.logs)
    dev = next((r for r in rows if r["bench"] == "device"), {})
    out = []
    w = out.append
    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version",
                              "--format=csv,noheader"], capture_output=True, text=True,
                             timeout=20).stdout.strip()
    except Exception:  # noqa: BLE001 - the report must not fail for want of nvidia-smi
        smi = ""
    w("# libvpmm benchmarks on %s" % dev.get("name", "an unknown device"))
    w("")
    w("- Date: %s" % datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"))
    w("- Device: %s (%s GiB); nvidia-smi: %s" % (dev.get("name", "?"), gib(dev.get("total_bytes")),
                                             smi or "n/a"))
    w("- CUDA driver %s, runtime %s; libvpmm %s%s" % (dev.get("driver", "?"), dev.get("runtime", "?"),
                                                    dev.get("vpmm", "?"),
                                                    " (--quick)" if dev.get("quick") else ""))
    w("- Command: `%s`" % a.command)
    w("- Method: one process per allocator family (libvpmm, cudaMalloc*, per-allocation VMM in "
      "bench_vpmm; PyTorch native and expandable_segments in two bench_torch processes), same "
      "machine, same run. Warm-ups first; each figure is the median of repeated runs (hot "
      "path: 7 runs of 50000 pairs for caching allocators, 5 runs of 200 for uncached ones, "
      "libvpmm on a fresh pool per case; growth: 7 runs, 3 for page handles, 300 ms apart). "
      "Workloads are deterministic (fixed seeds), identical for every allocator.")
    w("")

    # ---------------------------------------------------------------- hot path
    hot = {}
    hot_min = {}
    for r in rows:
        if r["bench"] == "hotpath" and r.get("ok"):
            hot[(r["alloc"], r["case"])] = r.get("us")
            hot_min[(r["alloc"], r["case"])] = r.get("min_us")
    w("## 1. Hot path: alloc + free pair, same size, one stream, warm (us per pair)")
    w("")
    w("Mixed churn: 64 live blocks; each op frees a random one and allocates a random size "
      "(log-uniform 4 KiB-16 MiB, seed 42) in its place; us per free + alloc.")
    w("")
    present = [x for x in HOT_ALLOCS if any((x, c) in hot for c in HOT_CASES)]
    w("| size | " + " | ".join(present) + " | " +
      " | ".join("%s / vpmm" % x for x in present if x != "vpmm") + " |")
    w("|---" * (1 + len(present) + len([x for x in present if x != "vpmm"])) + "|")
    for c in HOT_CASES:
        v = hot.get(("vpmm", c))
        cells = [fmt_us(hot.get((x, c))) for x in present]
        ratios = []
        for x in present:
            if x == "vpmm":
                continue
            o = hot.get((x, c))
            ratios.append("%.1fx" % (o / v) if o and v else "n/a")
        w("| %s | %s | %s |" % (c, " | ".join(cells), " | ".join(ratios)))
    w("")
    met = [c for c in HOT_CASES if hot.get(("vpmm", c)) is not None and hot[("vpmm", c)] < HOT_TARGET_US]
    for r in rows:
        if r["bench"] == "hotpath" and not r.get("ok"):
            w("- %s %s: **failed**%s" % (r["alloc"], r["case"],
                                        (": " + r["error"]) if r.get("error") else ""))
    w("")
    w("libvpmm fastest of the 7 runs (us per pair): " + ", ".join(
        "%s %s" % (c, fmt_us(hot_min.get(("vpmm", c)))) for c in HOT_CASES) + ".")
    w("")
    w("Target: libvpmm pair < %.2f us (median). Met for: %s; not met for: %s." % (
        HOT_TARGET_US, ", ".join(met) or "none",
        ", ".join(c for c in HOT_CASES if c not in met) or "none"))
    w("(A ratio above 1x means libvpmm is faster.)")
    w("")

    # ---------------------------------------------------------- fragmentation
    frag = [r for r in rows if r["bench"] == "frag"]
    w("## 2. Fragmentation: peak physical / peak live")
    w("")
    w("Peak live = the trace's maximum of the sum of requested bytes (not rounded). Peak "
      "physical = device memory the allocator held at its peak (libvpmm: peak_mapped_bytes; "
      "PyTorch: reserved_bytes peak; cudaMallocAsync: cudaMemPoolAttrReservedMemHigh). Each trace "
      "runs with the device's free memory capped by a cudaMalloc'd blocker at "
      "2 x peak live + 1 GiB (whole GiB); \"largest after\" is the largest single allocation "
      "(64 MiB bisection) still served after the trace with its final live set held; \"ideal\" = "
      "cap - final live. Every allocation is touched by a cudaMemsetAsync on its stream.")
    w("")
    traces = []
    for r in frag:
        if r["trace"] not in traces:
            traces.append(r["trace"])
    w("| trace | allocator | peak live MiB | peak physical MiB | ratio | <= %.2f | own live peak MiB | physical / own live | largest after GiB | ideal GiB | held after release-all MiB | notes |" % FRAG_TARGET)
    w("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for t in traces:
        for r in frag:
            if r["trace"] != t:
                continue
            ratio = r.get("ratio")
            own = r.get("rounded_live") or None
            w("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
                t, r["alloc"], mib(r.get("peak_live")), mib(r.get("peak_physical")),
                "%.3f" % ratio if ratio is not None and r.get("ok") else "failed",
                yes(ratio is not None and r.get("ok") and ratio <= FRAG_TARGET),
                mib(own), "%.3f" % (r["peak_physical"] / own) if own and r.get("peak_physical") else "n/a",
                gib(r.get("largest_after")), gib(r.get("largest_ideal")),
                mib(r.get("held_after_release")),
                (r.get("error", "") + " " + r.get("extra", "")).strip()))
    w("")
    w("Own live peak: the allocator's own count of live bytes after its rounding (libvpmm: "
      "peak_live_bytes, page-rounded, small-object slabs whole; PyTorch: allocated_bytes peak; "
      "cudaMallocAsync: UsedMemHigh), so physical / own live is the fragmentation beyond "
      "rounding. Held after release-all: bytes still held once everything was freed and the "
      "allocator asked to give its cache back (vpmm_pool_trim(0), emptyCache(), "
      "cudaMemPoolTrimTo(0)).")
    w("")
    for alloc in ("vpmm_growth_handles", "vpmm_page_handles"):
        ok_t = [r["trace"] for r in frag if r["alloc"] == alloc and r.get("ok") and r.get("ratio") is not None and r["ratio"] <= FRAG_TARGET]
        bad_t = [r["trace"] for r in frag if r["alloc"] == alloc and r["trace"] not in ok_t]
        w("Target ratio <= %.2f for %s: met on %s; not met on %s." % (
            FRAG_TARGET, alloc, ", ".join(ok_t) or "none", ", ".join(bad_t) or "none"))
    w("")
    w("The walkthrough_X rows replay the seed's walkthrough with PAGES = 11 + X pages mapped up "
      "front (page handles), as in cases A-D; their peak physical includes the preallocation "
      "by construction.")
    w("")

    # ---------------------------------------------------------------- growth
    gr = {}
    for r in rows:
        if r["bench"] == "growth":
            gr[(r["alloc"], r["bytes"])] = r
    w("## 3. Growth: first malloc on an empty pool vs one cuMemCreate + Reserve + Map + SetAccess")
    w("")
    w("| size | single handle ms (min) | vpmm growth handles ms (min) | ratio | vpmm page handles ms (handles) | ratio | release: single / growth / page ms |")
    w("|---|---|---|---|---|---|---|")
    sizes = sorted({k[1] for k in gr})
    for s in sizes:
        base = gr.get(("cuMemCreate_single", s), {}).get("us")
        g = gr.get(("vpmm_growth_handles", s), {})
        p = gr.get(("vpmm_page_handles", s), {})

        def ms(v):
            return "n/a" if v is None else "%.2f" % (v / 1000)

        def ratio(v):
            if v is None or not base:
                return "n/a"
            return "%.2fx (%s)" % (v / base, "met" if v / base <= GROWTH_TARGET else "**not met**")

        def mm(d):
            return "%s (%s)" % (ms(d.get("us")), ms(d.get("min_us")))

        w("| %s GiB | %s | %s | %s | %s (%s) | %s | %s / %s / %s |" % (
            "%g" % (s / 2**30), mm(gr.get(("cuMemCreate_single", s), {})), mm(g),
            ratio(g.get("us")), ms(p.get("us")),
            "%d" % p["handles"] if p.get("handles") is not None else "?", ratio(p.get("us")),
            ms(gr.get(("cuMemCreate_single", s), {}).get("release_us")), ms(g.get("release_us")),
            ms(p.get("release_us"))))
    w("")
    w("Medians of 7 runs (single handle, growth handles) or 3 (page handles), after one "
      "warm-up create; ratios of medians. Target: within %.0fx of the single handle. Release = "
      "unmap + release of everything (vpmm: vpmm_pool_destroy)." % GROWTH_TARGET)
    w("")

    # ------------------------------------------------------------ multistream
    ms_rows = [r for r in rows if r["bench"] == "multistream"]
    w("## 4. Multi-stream: 4 threads, 4 streams, concurrent alloc/free")
    w("")
    w("Each thread: warm-up, then N iterations of malloc (log-uniform 4 KiB-32 MiB) + a 256-byte "
      "cudaMemsetAsync on its stream, keeping 16 live and freeing the oldest. Latency of every "
      "malloc and free call measured on the CPU.")
    w("")
    w("| allocator | iters/thread | wall ms | calls | p50 us (malloc / free) | p99 us | max us | calls > 1 ms (malloc / free) | stream waits | events recorded | cross-stream reuse | defrag | grow |")
    w("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in ms_rows:
        def g(k, f="%.0f"):
            v = r.get(k)
            return "n/a" if v is None else f % v
        w("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            r["alloc"], g("iters"), g("wall_ms", "%.1f"), g("calls"),
            "%s (%s / %s)" % (g("p50_us", "%.2f"), g("p50_malloc_us", "%.2f"), g("p50_free_us", "%.2f")),
            g("p99_us", "%.2f"), g("max_us", "%.0f"),
            "%s (%s / %s)" % (g("over_1ms"), g("over_1ms_malloc"), g("over_1ms_free")), g("n_stream_waits"),
            g("n_events_recorded"), g("n_cross_stream_reuse"), g("n_defrag"), g("n_grow")))
    w("")
    hs = next((r for r in rows if r["bench"] == "hotpath_stats"), None)
    if hs:
        w("libvpmm pool counters after the hot-path runs: %s" % hs.get("extra", ""))
        w("")
    pause_section(load_pause(a.logs), w)
    if a.findings:
        try:
            with open(a.findings) as f:
                w(f.read().rstrip("\n"))
        except OSError:
            pass
    with open(a.out, "w") as f:
        f.write("\n".join(out) + "\n")
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
