#!/usr/bin/env python3
"""What the `vpmm` command prints, held against golden files.

Each case runs the command from the source directory (so the paths it prints
are the relative ones in the goldens) and compares stdout, stderr, the exit
status and any file it writes (a --timeline CSV, a plot's SVG) with
tests/data/golden/CASE.txt. Times vary from run to run and are masked
("12.3 ms" reads "N ms"); everything else must be byte-identical.

This is how a change to the tool is checked: a refactoring must leave every
golden as it is, and a change of wording shows up as a diff of the goldens
in the same commit. After a deliberate change:
    check_tool_golden.py VPMM_TOOL SOURCE_DIR --update
rewrites them (review the diff).

Usage: check_tool_golden.py VPMM_TOOL SOURCE_DIR [--update]
"""
import difflib
import gzip
import os
import re
import subprocess
import sys
import tempfile

WALK = ["--backend", "host", "--check", "--page-size", "64K", "--va-size", "64p"]

# name -> (argv after the tool, files the command writes, relative to the work dir)
CASES = {
    "replay_walkthrough_a": (["replay"] + WALK + ["--pages", "23", "traces/walkthrough_a.trace"], []),
    "replay_walkthrough_c_verbose": (["replay"] + WALK + ["--pages", "15", "--verbose", "--dump",
                                                          "traces/walkthrough_c.trace"], []),
    "replay_header_flags_dump": (["replay", "--backend", "host", "--dump", "traces/walkthrough_c.trace"], []),
    "replay_training_trace": (["replay", "--backend", "host", "--check", "--release-all",
                               "traces/training.trace"], []),
    "replay_multistream_remaps": (["replay", "--backend", "host", "--log-remaps",
                                   "traces/multistream.trace"], []),
    "replay_growth_timeline": (["replay", "--backend", "host", "--page-size", "64K", "--va-size", "256p",
                                "--timeline", "@WORK/growth.csv", "traces/growth.trace"], ["growth.csv"]),
    "replay_synthetic_snapshot": (["replay", "--backend", "host", "--check",
                                   "tests/data/synthetic_snapshot.pickle.gz"], []),
    "replay_training_snapshot": (["replay", "--backend", "host", "traces/training.pickle.gz"], []),
    "replay_summary_two": (["replay", "--backend", "host", "--summary", "traces/inference.pickle.gz",
                            "traces/walkthrough_b.trace"], []),
    "replay_expectation_fails": (["replay"] + WALK + ["--pages", "23", "--expect-layout", "[1]",
                                                      "--expect-mapped-pages", "1",
                                                      "traces/walkthrough_a.trace"], []),
    "plot_snapshot": (["replay", "--backend", "host", "--quiet", "--timeline", "@WORK/t.csv",
                       "tests/data/synthetic_snapshot.pickle.gz", "@PLOT", "@WORK/t.csv", "-o",
                       "@WORK/t.svg"], ["t.csv", "t.svg"]),
    "plot_two_traces": (["replay", "--backend", "host", "--quiet", "--timeline", "@WORK/t.csv",
                         "traces/walkthrough_b.trace", "traces/growth.trace", "@PLOT", "@WORK/t.csv", "-o",
                         "@WORK/t.svg"], ["t.svg"]),
    # A libvpmm memory history (vpmm.torch's snapshot after use_as_allocator(),
    # made by bindings/python/vpmm/_snapshot.py on the host backend): no
    # PyTorch reservation, the mapped peak the run recorded instead.
    "replay_vpmm_history": (["replay", "--backend", "host", "--check", "--timeline", "@WORK/h.csv",
                             "tests/data/vpmm_history_snapshot.pickle", "@PLOT", "@WORK/h.csv", "-o",
                             "@WORK/h.svg"], []),
    "replay_text_named_pickle": (["replay", "--backend", "host", "@WORK/junk.pickle.gz"], []),
    "replay_gzipped_text": (["replay", "--backend", "host", "@WORK/text.pickle.gz"], []),
    # --lag: the hard client's 97 side-stream gathers, completed 52 events
    # after their free, held pending on host streams that long, under three
    # chains (docs/trace-format.md). The views chain runs first: its layout
    # line lists VA chunks in address order, and a pool made before it in the
    # same process moved where its views' VA landed (an ASan build differed).
    "replay_moe_lag_policies": (["replay", "--backend", "host", "--lag", "--policy", "views,default,exact",
                                 "traces/moe_training.pickle.gz"], []),
    # --gpu-lag: every stream's work completes only every 40 ops (and at
    # syncs), as behind a GPU: other streams' frees stay pending meanwhile.
    "replay_multistream_gpu_lag": (["replay", "--backend", "host", "--gpu-lag", "40", "--check",
                                    "traces/multistream.trace"], []),
    "replay_help": (["replay", "--help"], []),
    # What `vpmm ledger NAME` lists, and what its ordinal and identity columns mean.
    "ledger_help": (["ledger", "--help"], []),
    "help": (["help"], []),
}

MASKS = [
    (re.compile(r"\b\d+(\.\d+)? ms\b"), "N ms"),
]


def prepare(work):
    """Inputs made at run time: bad files a newcomer may hand to replay."""
    with open(os.path.join(work, "junk.pickle.gz"), "w") as f:
        f.write("this is a note, not a snapshot\nsaved with the wrong name\n")
    with gzip.open(os.path.join(work, "text.pickle.gz"), "wb") as f:
        f.write(b"not a pickle either\n")


def run_case(tool, src, work, argv, outputs):
    text = []
    # "@PLOT" splits a case into two commands run in sequence.
    commands, cur = [], []
    for a in argv:
        if a == "@PLOT":
            commands.append(cur)
            cur = ["plot"]
        else:
            cur.append(a.replace("@WORK", work))
    commands.append(cur)
    for cmd in commands:
        env = dict(os.environ)
        for k in list(env):
            if k.startswith("VPMM_"):
                del env[k]
        p = subprocess.run([tool] + cmd, cwd=src, env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=300)
        shown = " ".join(c.replace(work, "WORK") for c in cmd)
        text.append(f"$ vpmm {shown}\n")
        text.append(f"-- exit {p.returncode}\n")
        text.append("-- stdout\n" + p.stdout.decode("utf-8", "replace"))
        text.append("-- stderr\n" + p.stderr.decode("utf-8", "replace"))
    for name in outputs:
        path = os.path.join(work, name)
        body = open(path, encoding="utf-8").read() if os.path.exists(path) else "(not written)\n"
        text.append(f"-- file {name}\n" + body)
    out = "".join(text).replace(work, "WORK")
    for pat, rep in MASKS:
        out = pat.sub(rep, out)
    return out


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        return 2
    tool = os.path.abspath(sys.argv[1])
    src = os.path.abspath(sys.argv[2])
    update = "--update" in sys.argv[3:]
    only = [a for a in sys.argv[3:] if not a.startswith("--")]
    golden_dir = os.path.join(src, "tests", "data", "golden")
    failed = []
    for name, (argv, outputs) in CASES.items():
        if only and name not in only:
            continue
        with tempfile.TemporaryDirectory() as work:
            prepare(work)
            got = run_case(tool, src, work, argv, outputs)
        path = os.path.join(golden_dir, name + ".txt")
        if update:
            os.makedirs(golden_dir, exist_ok=True)
            with open(path, "w", encoding="utf-8") as f:
                f.write(got)
            print(f"wrote {os.path.relpath(path, src)}")
            continue
        want = open(path, encoding="utf-8").read() if os.path.exists(path) else ""
        if got == want:
            print(f"ok   {name}")
            continue
        failed.append(name)
        print(f"FAIL {name}: output differs from {os.path.relpath(path, src)}:")
        sys.stdout.writelines(list(difflib.unified_diff(want.splitlines(True), got.splitlines(True),
                                                        "golden", "now", n=1))[:80])
    if failed:
        print(f"{len(failed)} case(s) differ: {', '.join(failed)} (after a deliberate change: "
              f"{os.path.basename(sys.argv[0])} VPMM_TOOL SOURCE_DIR --update, and review the diff)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
