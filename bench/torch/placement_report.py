"""Reads the JSON lines that hard_client.py, train_client.py and serve_client.py print (one per
process, labelled "rN NAME" by scripts/gpu-placement.sh) and prints, for each
client, every round's figures per allocator and the comparison the placement
issue asks for:

  - median step (ms) of each process, peak / live, the steady driver time
    share and the bytes remapped over the measured steps (libvpmm only),
    and the driver's calls and time per step by kind of call where the
    client reported them (steady_driver_by_kind);
  - per round, libvpmm's median step over the fastest of PyTorch native,
    expandable_segments and cudaMallocAsync in the same round, and the
    geometric mean of that ratio over the rounds (target <= 1.00), for the
    default chain (vpmm) and the other chains run (vpmm-exact, vpmm-views,
    vpmm-pending); the serving client's time per generated token counts as
    its step (lower is faster: a ratio <= 1 is tokens/s >= the fastest);
  - where pluggable-async ran (cudaMallocAsync behind PyTorch's pluggable
    path, the path libvpmm's use_as_allocator() takes), its ratio likewise
    and libvpmm's median step over its own, per round and by geometric mean.

  python3 bench/torch/placement_report.py hard.jsonl [train.jsonl ...]

Rounds where an allocator's process failed (no JSON line) are reported as
such and left out of the geometric mean."""
import json
import math
import statistics
import sys

TORCH = ("native", "expandable", "cudamallocasync")
LIBVPMM = ("vpmm", "vpmm-exact", "vpmm-views", "vpmm-pending", "vpmm-never", "vpmm-base")
FLOOR = "pluggable-async"  # the pluggable path's own cost, with the driver's pool behind it
COMPARED = (FLOOR, FLOOR + "-nodeps") + LIBVPMM
ORDER = TORCH + COMPARED


def geomean(qs):
    return math.exp(sum(math.log(q) for q in qs) / len(qs))


def step_ms(r):
    """The process's median step, or the serving client's median time per token."""
    return r.get("step_ms_median") or r.get("ms_per_token_median")


def load(path):
    rows = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line.startswith("{"):
                continue
            try:
                rows.append(json.loads(line))
            except ValueError:
                continue
    return rows


def peak_over_live(r):
    if r.get("peak_over_live"):
        return r["peak_over_live"]
    live = r.get("live_peak_gib")
    return round(r["peak_gib"] / live, 4) if live else None


def report(path):
    rows = load(path)
    if not rows:
        print(f"{path}: no results")
        return
    client = rows[0].get("client", "?")
    rounds = {}
    for r in rows:
        label = r.get("label", "")
        rnd, _, name = label.partition(" ")
        rounds.setdefault(rnd, {})[name or r["alloc"]] = r
    print(f"== {client} client ({path}): {len(rows)} processes, {len(rounds)} rounds")
    print(f"  {'round':6s} {'allocator':16s} {'step ms':>8s} {'peak/live':>9s} {'peak GiB':>9s} "
          f"{'driver share':>12s} {'remapped MB':>11s}")
    ratios = {v: [] for v in COMPARED}
    over_floor = []
    for rnd in sorted(rounds, key=lambda k: int(k[1:]) if k[1:].isdigit() else 0):
        got = rounds[rnd]
        for name in [n for n in ORDER if any(n in g for g in rounds.values())]:
            r = got.get(name)
            if r is None:
                print(f"  {rnd:6s} {name:16s} {'(no result)':>8s}")
                continue
            share = r.get("steady_driver_share")
            remapped = r.get("steady_remapped_bytes")
            print(f"  {rnd:6s} {name:16s} {step_ms(r) or 0:8.1f} {peak_over_live(r) or 0:9.4f} "
                  f"{r.get('peak_gib', 0):9.2f} "
                  f"{'' if share is None else f'{100 * share:11.2f}%':>12s} "
                  f"{'' if remapped is None else f'{remapped / 1e6:11.0f}':>11s}")
        fastest = [step_ms(got[n]) for n in TORCH if n in got and step_ms(got[n])]
        if not fastest:
            continue
        best = min(fastest)
        line = f"  {rnd:6s} fastest PyTorch {best:.1f} ms"
        for v in ratios:
            if v in got and step_ms(got[v]):
                q = step_ms(got[v]) / best
                ratios[v].append(q)
                line += f"; {v} / fastest {q:.3f}"
        if all(n in got and step_ms(got[n]) for n in ("vpmm", FLOOR)):
            over_floor.append(step_ms(got["vpmm"]) / step_ms(got[FLOOR]))
            line += f"; vpmm / {FLOOR} {over_floor[-1]:.3f}"
        print(line)
    for v, qs in ratios.items():
        if qs:
            print(f"  {client}: {v} median step / fastest PyTorch allocator, geometric mean over "
                  f"{len(qs)} rounds: {geomean(qs):.3f} (target <= 1.00)")
    if over_floor:
        print(f"  {client}: vpmm median step / {FLOOR}'s, geometric mean over {len(over_floor)} rounds: "
              f"{geomean(over_floor):.3f}")
    for v in LIBVPMM:
        rs = [got[v] for got in rounds.values() if v in got]
        if not rs:
            continue
        pl = [peak_over_live(r) for r in rs if peak_over_live(r)]
        sh = [r["steady_driver_share"] for r in rs if r.get("steady_driver_share") is not None]
        rb = [r["steady_remapped_bytes"] for r in rs if r.get("steady_remapped_bytes") is not None]
        print(f"  {client}: {v} peak/live {min(pl):.4f}-{max(pl):.4f} (target <= 1.03)"
              + (f", steady driver share {100 * min(sh):.2f}-{100 * max(sh):.2f}% (target <= 1%)" if sh else "")
              + (f", remapped {min(rb) / 1e6:.0f}-{max(rb) / 1e6:.0f} MB over the measured steps" if rb else ""))
        by_kind = [r["steady_driver_by_kind"] for r in rs if r.get("steady_driver_by_kind")]
        if by_kind:  # the median process's calls and ms per step, by kind, the costliest first
            kinds = sorted(by_kind[0], key=lambda k: -statistics.median(b[k][1] for b in by_kind))
            print(f"  {client}: {v} driver per step by kind (calls, ms; median over {len(by_kind)} processes): "
                  + ", ".join(f"{k} {statistics.median(b[k][0] for b in by_kind):.0f}, "
                              f"{statistics.median(b[k][1] for b in by_kind):.2f}" for k in kinds))


if __name__ == "__main__":
    for p in sys.argv[1:]:
        report(p)
