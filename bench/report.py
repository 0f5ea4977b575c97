#!/usr/bin/env python3
"""Builds bench/results/<device>.md from the RESULT lines of the benchmark logs.

Usage: report.py --out FILE [--command "CMD"] [--findings MD]
                 [--clients FILE] [--replays FILE] LOG [LOG...]

Each benchmark program (bench_vpmm, bench_torch) prints one line
`RESULT {json}` per measurement (bench/bench_common.hpp); bench_pause_resume
prints `PAUSE key value` lines. This script only
formats: it computes ratios and compares against the project's targets
(hot path pair < 0.15 us; fragmentation: the default policy's ratio <= 1.02
and within 0.01 of page handles; growth: the default policy no slower than
PyTorch's expandable segments (must) and within 3x of a single
cuMemCreate + map + set-access (aim); pause/resume with backup >= 85% of the
pinned copy limit, without backup within 1.25x / 2x of one handle per
allocation; real training: libvpmm's default peak <= 0.97x expandable
segments', step time within 1%) and says whether each is met. It never
fails on missing data: absent measurements show as "n/a", and the "Real
workloads" section is left out when neither --clients nor --replays is given.
"""
import argparse
import datetime
import json
import re
import subprocess
import sys

HOT_TARGET_US = 0.15
FRAG_TARGET = 1.02
FRAG_PAGE_SLACK = 0.01    # vpmm_default's ratio at most this above vpmm_page_handles'
GROWTH_TORCH_TARGET = 1.0  # vpmm_default / torch_expandable (must)
GROWTH_SINGLE_AIM = 3.0    # vpmm_default / one cuMemCreate + map (aim)
CLIENT_PEAK_TARGET = 0.97  # vpmm_default peak / torch expandable peak
CLIENT_STEP_TARGET = 1.01  # vpmm_default step time / torch expandable step time
LOSS_RTOL = 1e-3

HOT_ALLOCS = ["vpmm", "torch_native", "torch_expandable", "cudaMallocAsync", "cudaMalloc",
              "vmm_per_alloc"]
HOT_CASES = ["4KiB", "1MiB", "2MiB", "64MiB", "churn"]
FRAG_ALLOCS = ["vpmm_default", "vpmm_growth_handles", "vpmm_page_handles", "vpmm_cap_32MiB",
               "torch_native", "torch_expandable", "cudaMallocAsync"]
VPMM_POLICIES = ["vpmm_default", "vpmm_growth_handles", "vpmm_page_handles", "vpmm_cap_32MiB"]


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


def frag_order(r):
    """Table order: vpmm_default first, then the other policies, then the rest."""
    a = r["alloc"]
    if a in FRAG_ALLOCS:
        return FRAG_ALLOCS.index(a)
    if a.startswith("vpmm_cap_"):
        return FRAG_ALLOCS.index("vpmm_cap_32MiB")
    return len(FRAG_ALLOCS)


def frag_ok(r):
    return bool(r.get("ok")) and r.get("ratio") is not None


def ms(v):
    return "n/a" if v is None else "%.2f" % (v / 1000)


def growth_rows(rows):
    """{(alloc, bytes): RESULT row} of the growth lines (bench_vpmm and bench_torch)."""
    gr = {}
    for r in rows:
        if r["bench"] == "growth" and r.get("bytes") is not None:
            gr[(r["alloc"], int(r["bytes"]))] = r
    return gr


def growth_section(gr, w):
    """Section 3: first malloc on an empty pool, per size."""
    w("## 3. Growth: first malloc on an empty pool vs one cuMemCreate + Reserve + Map + SetAccess")
    w("")
    w("| size | single handle ms (min) | vpmm_default ms (handles) | vpmm_default / single "
      "| growth handles ms (handles) | growth / single | page handles ms (handles) | page / single "
      "| torch_expandable ms (min) | torch_native ms (min) | vpmm_default / torch_expandable "
      "| release ms: single / default / growth / page / expandable / native |")
    w("|---|---|---|---|---|---|---|---|---|---|---|---|")
    must, aim = {}, {}
    for s in sorted({k[1] for k in gr}):
        single = gr.get(("cuMemCreate_single", s))
        base = single.get("us") if single else None
        d = gr.get(("vpmm_default", s))
        te = gr.get(("torch_expandable", s))
        size = "%g GiB" % (s / 2**30)

        def mm(r):  # median (min); a row whose runs all failed reads "failed"
            if r is None:
                return "n/a"
            if r.get("us") is None or r.get("ok") is False:
                return "failed"
            return "%s (%s)" % (ms(r.get("us")), ms(r.get("min_us")))

        def mh(r):  # median (handles)
            if r is None:
                return "n/a"
            if r.get("us") is None:
                return "failed"
            return "%s (%s)" % (ms(r["us"]), "%d" % r["handles"] if r.get("handles") is not None else "?")

        def over(r, ref):
            v = r.get("us") if r else None
            if v is None or not ref or (r and r.get("ok") is False):
                return None
            return v / ref

        def rel(r):
            return "n/a" if r is None else ms(r.get("release_us"))

        rs = over(d, base)
        rt = over(d, te.get("us") if te and te.get("ok") is not False else None)
        if rs is not None:
            aim[size] = rs <= GROWTH_SINGLE_AIM
        if rt is not None:
            must[size] = rt <= GROWTH_TORCH_TARGET
        g = gr.get(("vpmm_growth_handles", s))
        p = gr.get(("vpmm_page_handles", s))
        w("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            size, mm(single), mh(d),
            "n/a" if rs is None else "%.2fx (aim %s)" % (rs, "met" if rs <= GROWTH_SINGLE_AIM else "**not met**"),
            mh(g), "n/a" if over(g, base) is None else "%.2fx" % over(g, base),
            mh(p), "n/a" if over(p, base) is None else "%.2fx" % over(p, base),
            mm(te), mm(gr.get(("torch_native", s))),
            "n/a" if rt is None else "**%.2fx** (%s)" % (rt, "met" if rt <= GROWTH_TORCH_TARGET else "**not met**"),
            " / ".join(rel(x) for x in (single, d, g, p, te, gr.get(("torch_native", s))))))
    w("")
    w("Medians of 7 runs (single handle, vpmm_default, growth handles) or 3 (page handles), after "
      "one warm-up create, 300 ms apart; PyTorch (bench_torch, the allocator of each process): "
      "raw_alloc_with_stream + cudaDeviceSynchronize after emptyCache(), medians of 5 runs after "
      "one warm-up, 300 ms apart. Ratios of medians. Release = unmap + release of everything "
      "(vpmm: vpmm_pool_destroy; PyTorch: raw_delete + emptyCache).")
    w("")

    def verdict(d):
        if not d:
            return "n/a"
        yes_ = [k for k, v in d.items() if v]
        no_ = [k for k, v in d.items() if not v]
        return "met at %s; not met at %s" % (", ".join(yes_) or "none", ", ".join(no_) or "none")
    w("Target: vpmm_default / torch_expandable <= %gx (must): %s. vpmm_default <= %gx single "
      "handle (aim): %s." % (GROWTH_TORCH_TARGET, verdict(must), GROWTH_SINGLE_AIM, verdict(aim)))
    w("")


# ------------------------------------------------------------ real workloads
def load_clients(paths):
    """The JSON lines of bench/torch/train_client.py and growth.py (every other
    line ignored), and the `### client LABEL: exit RC` markers scripts/gpu-run.sh
    writes after each run, as (objects, [(label, rc)])."""
    objs, exits = [], []
    for p in paths or []:
        try:
            with open(p, errors="replace") as f:
                for line in f:
                    st = line.strip()
                    m = re.match(r"^### client (.+): exit (\d+)$", st)
                    if m:
                        exits.append((m.group(1), int(m.group(2))))
                        continue
                    if not st.startswith("{"):
                        continue
                    try:
                        o = json.loads(st)
                    except ValueError:
                        continue
                    if isinstance(o, dict) and "client" in o:
                        objs.append(o)
        except OSError:
            pass
    return objs, exits


UNITS = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40, "PiB": 2**50}
SIZE_RE = r"([0-9]+(?:\.[0-9]+)?)\s*(B|KiB|MiB|GiB|TiB|PiB)\b"
REPLAY_POLICIES = {"default": "vpmm_default", "unlimited": "vpmm_growth_handles",
                   "1p": "vpmm_page_handles"}


def load_replays(paths):
    """Blocks of `vpmm replay` output, each opened by a `== TRACE POLICY` line."""
    blocks = []
    cur = None

    def block(label):
        parts = label.split(None, 1)
        b = {"trace": parts[0] if parts else "?", "policy": parts[1] if len(parts) > 1 else "",
             "req": None, "mapped": None, "ratio": None, "frag": None, "torch": [], "errors": [],
             "rc": None}
        blocks.append(b)
        return b

    for p in paths or []:
        try:
            with open(p, errors="replace") as f:
                for line in f:
                    st = line.strip()
                    if st.startswith("=="):
                        cur = block(st[2:].strip())
                        continue
                    m_req = re.match(r"^peak\s+requested\s+" + SIZE_RE, st)
                    m_map = re.match(r"^peak\s+mapped\s+" + SIZE_RE, st)
                    m_frag = re.match(r"^fragmentation\s+([0-9.]+).*?peak\s+mapped\s*/\s*peak\s+requested\s+"
                                      r"([0-9.]+)", st)
                    m_rc = re.match(r"^-- exit (\d+)$", st)
                    torch = "pytorch reserved peak" in st
                    err = (st.startswith("vpmm replay:") or st.startswith("vpmm:") or
                           st.startswith("(skipped"))
                    if cur is None and (m_req or m_map or m_frag or torch or err):
                        cur = block("?")
                    if m_req:
                        cur["req"] = float(m_req.group(1)) * UNITS[m_req.group(2)]
                    elif m_map:
                        cur["mapped"] = float(m_map.group(1)) * UNITS[m_map.group(2)]
                    elif m_frag:
                        cur["frag"] = float(m_frag.group(1))
                        cur["ratio"] = float(m_frag.group(2))
                    elif torch:
                        if st not in cur["torch"]:
                            cur["torch"].append(st)
                    elif err:
                        cur["errors"].append(st)
                    elif m_rc and cur is not None:
                        cur["rc"] = int(m_rc.group(1))
        except OSError:
            pass
    return blocks


def losses_match(a, ref):
    """"yes", or why not: every loss within LOSS_RTOL relative of the native run's."""
    if not isinstance(a, list) or not isinstance(ref, list) or not ref:
        return "n/a"
    if len(a) != len(ref):
        return "**no** (%d losses, native %d)" % (len(a), len(ref))
    for i, (x, y) in enumerate(zip(a, ref)):
        if x is None or y is None or abs(x - y) > LOSS_RTOL * max(abs(y), 1e-12):
            return "**no** (loss %d of %d: %s vs %s)" % (i + 1, len(ref), x, y)
    return "yes"


def by_label(clients, kind):
    """The runs of one client kind by label; the last run of a label wins."""
    out = {}
    for o in clients:
        if o.get("client") == kind:
            out[o.get("label") or o.get("alloc", "?")] = o
    return out


def client_order(runs):
    """PyTorch's allocators first (native, expandable, cudaMallocAsync), then libvpmm's."""
    rank = {"native": 0, "expandable": 1, "cudamallocasync": 2}
    return sorted(runs, key=lambda k: rank.get(runs[k].get("alloc"), 3))


def ratio_to(o, ref, key):
    v = o.get(key)
    r = ref.get(key) if ref else None
    return v / r if v is not None and r else None


def peak_over_live(o):
    live = o.get("live_peak_gib")
    return o["peak_bytes"] / 2**30 / live if live and o.get("peak_bytes") else None


def fmt(v, spec):
    return "n/a" if v is None else spec % v


def real_section(clients, exits, replays, gr, w):
    """Section 6: the live PyTorch training client under each allocator, the
    PyTorch growth script, and `vpmm replay` over recorded snapshots."""
    w("## 6. Real workloads")
    w("")
    train = by_label(clients, "train")
    serve = by_label(clients, "serve")
    growth = [o for o in clients if o.get("client") == "growth"]
    if not (train or serve or exits or growth or replays):
        w("n/a: no client or replay results in the given files.")
        w("")
    if train or exits:
        first = next(iter(train.values()), {})
        w("Live training (bench/torch/train_client.py, batch scale %s): a GPT-style model (16 "
          "layers, d=1024, AdamW, bf16 autocast) over six batch/sequence shapes, one process per "
          "allocator (libvpmm through CUDAPluggableAllocator, its policy from "
          "VPMM_MAX_HANDLE_SIZE). Peak = the allocator's peak device memory (PyTorch: "
          "reserved_bytes peak, under cudaMallocAsync the driver pool's reserved high-water mark; "
          "libvpmm: peak_mapped_bytes); live = the tensors live at their peak, the floor no "
          "allocator goes below (PyTorch: allocated_bytes peak, 512-byte blocks; libvpmm: "
          "peak_live_bytes, rounded as the pool rounds: 512 bytes in the default pool); step = median step time of the rounds after the "
          "first." % first.get("batch_scale", "?"))
        w("")
        w("| run | peak GiB | live GiB | peak / live | peak / expandable | step ms | step / expandable "
          "| losses = native (%g rel.) |" % LOSS_RTOL)
        w("|---|---|---|---|---|---|---|---|")
        exp = next((o for o in train.values() if o.get("alloc") == "expandable"), None)
        nat = next((o for o in train.values() if o.get("alloc") == "native"), None)
        for k in client_order(train):
            o = train[k]
            pk, st = ratio_to(o, exp, "peak_bytes"), ratio_to(o, exp, "step_ms_median")
            w("| %s | %s | %s | %s | %s | %s | %s | %s |" % (
                k, gib(o.get("peak_bytes")), fmt(o.get("live_peak_gib"), "%.3f"),
                fmt(peak_over_live(o), "%.3f"), fmt(pk, "%.3fx"),
                "n/a" if o.get("step_ms_median") is None else
                "%.2f (%s steps)" % (o["step_ms_median"], o.get("steps_timed", "?")),
                fmt(st, "%.3fx"),
                "reference" if o is nat else
                ("n/a (no native run)" if nat is None else losses_match(o.get("losses"), nat.get("losses")))))
        w("")
        d = train.get("vpmm_default")
        if d is None or exp is None:
            verdict = "n/a (%s)" % ("no vpmm_default run" if d is None else "no expandable run")
        else:
            pk, st = ratio_to(d, exp, "peak_bytes"), ratio_to(d, exp, "step_ms_median")
            if pk is None or st is None:
                verdict = "n/a"
            else:
                ok = pk <= CLIENT_PEAK_TARGET and st <= CLIENT_STEP_TARGET
                verdict = "%s (peak %.4fx, step %.4fx)" % ("met" if ok else "**not met**", pk, st)
                floor = exp.get("live_peak_gib")
                if not ok and floor and exp.get("peak_bytes") and \
                        CLIENT_PEAK_TARGET * exp["peak_bytes"] / 2**30 < floor:
                    verdict += ("; %.2fx expandable's peak is %.3f GiB, below the %.3f GiB of tensors "
                                "live at its peak, which no allocator can hold less than"
                                % (CLIENT_PEAK_TARGET, CLIENT_PEAK_TARGET * exp["peak_bytes"] / 2**30, floor))
        w("Target: vpmm_default peak <= %.2fx torch expandable, step time within %.0f%% (at most "
          "%.0f%% slower): %s." % (CLIENT_PEAK_TARGET, (CLIENT_STEP_TARGET - 1) * 100,
                                   (CLIENT_STEP_TARGET - 1) * 100, verdict))
        w("")
        bad = ["%s (exit %d%s)" % (lab, rc, ", timed out or skipped for time" if rc in (124, 137) else "")
               for lab, rc in exits if rc != 0]
        if bad:
            w("Runs that exited non-zero (see clients.log): %s." % ", ".join(bad))
            w("")
    if serve:
        first = next(iter(serve.values()), {})
        w("Live serving (bench/torch/serve_client.py, batch scale %s, %s waves): bf16 weights of "
          "the same model, waves of requests of variable batch and prompt length, a KV cache grown "
          "by concatenation every decode step (the pattern of traces/inference.pickle.gz). Peak and "
          "live as above; ms per token = median over the waves after the first."
          % (first.get("batch_scale", "?"), first.get("waves_timed", -1) + 1 if first.get("waves_timed") is not None else "?"))
        w("")
        w("| run | peak GiB | live GiB | peak / live | peak / expandable | ms per token |")
        w("|---|---|---|---|---|---|")
        exp = next((o for o in serve.values() if o.get("alloc") == "expandable"), None)
        for k in client_order(serve):
            o = serve[k]
            w("| %s | %s | %s | %s | %s | %s |" % (
                k, gib(o.get("peak_bytes")), fmt(o.get("live_peak_gib"), "%.3f"),
                fmt(peak_over_live(o), "%.3f"), fmt(ratio_to(o, exp, "peak_bytes"), "%.3fx"),
                fmt(o.get("ms_per_token_median"), "%.2f")))
        w("")
    if growth:
        w("PyTorch's first allocation through torch.empty + synchronize after empty_cache() "
          "(bench/torch/growth.py: median and min of 5 runs after a warm-up), beside libvpmm's "
          "default growth from bench_vpmm:")
        w("")
        w("| size | allocator | ms (min) | vpmm_default ms | vpmm_default / this |")
        w("|---|---|---|---|---|")
        for o in sorted(growth, key=lambda o: (o.get("gib") or 0, str(o.get("alloc")))):
            n = o.get("gib")
            d = gr.get(("vpmm_default", int(n) << 30)) if isinstance(n, (int, float)) and n == int(n) else None
            dv = d.get("us") if d else None
            med = o.get("ms_median")
            w("| %s GiB | %s | %s (%s) | %s | %s |" % (
                n, o.get("alloc", "?"), "n/a" if med is None else "%.2f" % med,
                "n/a" if o.get("ms_min") is None else "%.2f" % o["ms_min"], ms(dv),
                "%.2fx" % (dv / 1000 / med) if dv is not None and med else "n/a"))
        w("")
    if replays:
        w("Recorded PyTorch snapshots (traces/*.pickle.gz, bench/torch/record_traces.py) replayed "
          "by `vpmm replay --backend cuda` on a fresh pool per policy. Ratio = peak mapped / peak "
          "requested (the sum of requested bytes); mapped / live = peak mapped / libvpmm's "
          "own live peak (after its rounding). Sizes as the tool prints them (1 decimal).")
        w("")
        w("| trace | policy | peak requested GiB | peak mapped GiB | ratio | mapped / live | notes |")
        w("|---|---|---|---|---|---|---|")
        for b in replays:
            ratio = b["ratio"]
            if ratio is None and b["req"] and b["mapped"] is not None:
                ratio = b["mapped"] / b["req"]
            pol = b["policy"]
            if pol in REPLAY_POLICIES:
                pol = "%s (%s)" % (pol, REPLAY_POLICIES[pol])
            notes = list(b["errors"])
            if b["rc"]:
                notes.append("exit %d" % b["rc"])
            if b["req"] is None and b["mapped"] is None and not notes:
                notes.append("no figures (see replays.log)")
            w("| %s | %s | %s | %s | %s | %s | %s |" % (
                b["trace"], pol or "?", gib(b["req"]), gib(b["mapped"]),
                "n/a" if ratio is None else "%.3f" % ratio,
                "n/a" if b["frag"] is None else "%.3f" % b["frag"],
                "; ".join(n.replace("|", "\\|") for n in notes)))
        w("")
        # A line every run of a trace printed alike (PyTorch's reserved peak)
        # shows once per trace; the others (libvpmm / PyTorch) per policy.
        quoted = []
        for t in dict.fromkeys(b["trace"] for b in replays):
            bs = [b for b in replays if b["trace"] == t and b["torch"]]
            for b in bs:
                for l in b["torch"]:
                    common = len(bs) > 1 and all(l in o["torch"] for o in bs)
                    item = "- %s: `%s`" % (t if common else "%s %s" % (t, b["policy"]), l)
                    if item not in quoted:
                        quoted.append(item)
        if quoted:
            w("PyTorch's own figures from the snapshots, as the replay prints them:")
            w("")
            for q in quoted:
                w(q)
            w("")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog="Without --clients and --replays the \"Real workloads\" "
                                        "section is left out.")
    ap.add_argument("--out", required=True, help="markdown file to write (also printed)")
    ap.add_argument("--command", default="scripts/gpu-run.sh",
                    help="the command line shown in the report's header")
    ap.add_argument("--findings", help="hand-written markdown appended after the tables")
    ap.add_argument("--clients", metavar="FILE", action="append",
                    help="output of bench/torch/train_client.py and bench/torch/growth.py runs: "
                         "one JSON object per line ({\"client\": \"train\", \"label\": ..., "
                         "\"peak_bytes\": ..., \"step_ms_median\": ..., \"losses\": [...]} or "
                         "{\"client\": \"growth\", \"alloc\": ..., \"gib\": ..., \"ms_median\": "
                         "...}); other lines are ignored, except `### client LABEL: exit RC` "
                         "markers (non-zero exits are listed). Feeds the \"Real workloads\" "
                         "section (training table, target vpmm_default peak <= 0.97x "
                         "expandable, step time within 1%%). Repeatable.")
    ap.add_argument("--replays", metavar="FILE", action="append",
                    help="stdout of `vpmm replay` runs over recorded PyTorch snapshots, each run "
                         "opened by a line `== TRACE POLICY`; the peak requested / peak mapped / "
                         "fragmentation lines give the \"Real workloads\" replay table, and lines "
                         "containing `pytorch reserved peak` are quoted under it. Repeatable.")
    ap.add_argument("logs", nargs="+", metavar="LOG",
                    help="benchmark logs with RESULT lines (bench_vpmm, bench_torch) and PAUSE "
                         "lines (bench_pause_resume)")
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
      "libvpmm on a fresh pool per case; growth: 7 runs, 3 for page handles, 5 for PyTorch, 300 ms apart). "
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
        for r in sorted((r for r in frag if r["trace"] == t), key=frag_order):
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
    policies = [x for x in VPMM_POLICIES if any(r["alloc"] == x for r in frag)]
    policies += [x for x in dict.fromkeys(r["alloc"] for r in frag)
                 if x.startswith("vpmm_cap_") and x not in policies]
    for alloc in policies:
        ok_t = [r["trace"] for r in frag if r["alloc"] == alloc and frag_ok(r)
                and r["ratio"] <= FRAG_TARGET]
        bad_t = [r["trace"] for r in frag if r["alloc"] == alloc and r["trace"] not in ok_t]
        w("Ratio <= %.2f for %s: met on %s; not met on %s." % (
            FRAG_TARGET, alloc, ", ".join(ok_t) or "none", ", ".join(bad_t) or "none"))
    w("")
    w("Target: vpmm_default ratio <= %.2f and within %.2f of vpmm_page_handles (at most %.2f above "
      "it), per trace:" % (FRAG_TARGET, FRAG_PAGE_SLACK, FRAG_PAGE_SLACK))
    w("")
    by = {(r["trace"], r["alloc"]): r for r in frag}
    judged = 0
    for t in traces:
        d = by.get((t, "vpmm_default"))
        if d is None:
            continue  # e.g. the walkthrough_X rows (initial pages only)
        judged += 1
        pg = by.get((t, "vpmm_page_handles"))
        if not frag_ok(d):
            w("- %s: **not met** (vpmm_default %s)" % (t, "failed" if not d.get("ok") else "n/a"))
            continue
        dr = d["ratio"]
        why = []
        if dr > FRAG_TARGET:
            why.append("%.3f > %.2f" % (dr, FRAG_TARGET))
        if pg is None or not frag_ok(pg):
            w("- %s: %s (vpmm_default %.3f; vpmm_page_handles %s)" % (
                t, "n/a" if not why else "**not met**", dr,
                "absent" if pg is None else "failed"))
            continue
        pr = pg["ratio"]
        if dr > pr + FRAG_PAGE_SLACK + 1e-9:
            why.append("%.3f above page handles" % (dr - pr))
        w("- %s: %s (vpmm_default %.3f, vpmm_page_handles %.3f%s)" % (
            t, "**not met**" if why else "met", dr, pr, "; " + ", ".join(why) if why else ""))
    if not judged:
        w("- n/a (no vpmm_default rows)")
    w("")
    w("The walkthrough_X rows replay the seed's walkthrough with PAGES = 11 + X pages mapped up "
      "front (page handles), as in cases A-D; their peak physical includes the preallocation "
      "by construction.")
    w("")

    # ---------------------------------------------------------------- growth
    gr = growth_rows(rows)
    growth_section(gr, w)

    # ------------------------------------------------------------ multistream
    ms_rows = [r for r in rows if r["bench"] == "multistream"]
    w("## 4. Multi-stream: 4 threads, 4 streams, concurrent alloc/free")
    w("")
    w("Each thread: warm-up, then N iterations of malloc (log-uniform 4 KiB-32 MiB) + a 256-byte "
      "cudaMemsetAsync on its stream, keeping 16 live and freeing the oldest. Latency of every "
      "malloc and free call measured on the CPU.")
    w("")
    w("| allocator | iters/thread | wall ms | calls | p50 us (malloc / free) | p99 us | max us | calls > 1 ms (malloc / free) | stream waits | events recorded | cross-stream reuse | defrag | grow | peak mapped / peak live |")
    w("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in ms_rows:
        def g(k, f="%.0f"):
            v = r.get(k)
            return "n/a" if v is None else f % v
        ratio = ("%.3f" % (r["peak_mapped"] / r["peak_live"])) if r.get("peak_live") else "n/a"
        w("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            r["alloc"], g("iters"), g("wall_ms", "%.1f"), g("calls"),
            "%s (%s / %s)" % (g("p50_us", "%.2f"), g("p50_malloc_us", "%.2f"), g("p50_free_us", "%.2f")),
            g("p99_us", "%.2f"), g("max_us", "%.0f"),
            "%s (%s / %s)" % (g("over_1ms"), g("over_1ms_malloc"), g("over_1ms_free")), g("n_stream_waits"),
            g("n_events_recorded"), g("n_cross_stream_reuse"), g("n_defrag"), g("n_grow"), ratio))
    w("")
    hs = next((r for r in rows if r["bench"] == "hotpath_stats"), None)
    if hs:
        w("libvpmm pool counters after the hot-path runs: %s" % hs.get("extra", ""))
        w("")
    pause_section(load_pause(a.logs), w)
    if a.clients or a.replays:
        clients, exits = load_clients(a.clients)
        replays = load_replays(a.replays)
        try:
            real_section(clients, exits, replays, gr, w)
        except Exception as e:  # noqa: BLE001 - a malformed line must not cost the whole report
            w("(the real-workloads section could not be built: %s: %s)" % (type(e).__name__, e))
            w("")
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
