#!/usr/bin/env python3
"""Docs that cannot drift from the tree.

citations: every file path and every `Type::member` that README.md and
  docs/*.md cite in backticks names something that exists:
  - a path (`src/core/pool.cpp`, `pause/stores/pinned_cache.*`, `tests/gpu/`)
    is a tracked file or directory, or the tail of one (docs often cite
    `state/regions.hpp` for src/core/state/regions.hpp; `*` matches within a
    name), a file the build generates from a tracked `NAME.in`, or lies in a
    place that is not the tree (build directories, $OUT, an install prefix);
  - `Type::member` (C++ `Pool::malloc`, Rust `Config::builder`) has a source
    file that declares `Type` (class, struct, enum, union, namespace, impl,
    type) and names `member`, or defines `Type::member`.
machine-paths: no tracked file (nor a new one git does not ignore) names a path on a developer's machine
  (/home/..., /root/..., /work/...), nor a file in a scratch directory under
  /tmp (`/tmp/DIR/FILE`); mkstemp/mkdtemp templates (`/tmp/NAME-XXXXXX`)
  and single names under /tmp in usage examples are allowed. Compressed
  files (the recorded snapshots) are read decompressed.

Usage: check_docs_citations.py SOURCE_DIR citations|machine-paths"""
import fnmatch
import gzip
import os
import re
import subprocess
import sys

src = os.path.abspath(sys.argv[1])
mode = sys.argv[2] if len(sys.argv) > 2 else "citations"


def tracked_files():
    try:
        # Tracked files and the new ones not yet added (not the ignored: builds).
        out = subprocess.run(["git", "-C", src, "ls-files", "-z", "-co", "--exclude-standard"],
                             capture_output=True, check=True).stdout
        files = [f for f in out.decode().split("\0") if f and os.path.exists(os.path.join(src, f))]
        if files:
            return files
    except (OSError, subprocess.CalledProcessError):
        pass
    files = []  # not a git checkout (an unpacked tarball): every file but build outputs
    for root, dirs, names in os.walk(src):
        dirs[:] = [d for d in dirs if not d.startswith(("build", ".", "target"))]
        files += [os.path.relpath(os.path.join(root, n), src) for n in names]
    return files


FILES = tracked_files()
# Files of other projects the docs cite, each with the project it is in.
EXTERNAL = {
    "cuda.h": "the CUDA toolkit",
    "src/enqueue.cc": "NCCL",
    "src/transport/p2p.cc": "NCCL",
    "torch/csrc/cuda/CUDAPluggableAllocator.cpp": "PyTorch",
    "test/test_examples.py": "torch_memory_saver",
}
problems = []


def check_citations():
    dirs = set()
    for f in FILES:
        parts = f.split("/")
        for i in range(1, len(parts)):
            dirs.add("/".join(parts[:i]))
    entries = set(FILES) | dirs
    generated = {f[:-3] for f in FILES if f.endswith(".in")}
    entries |= generated
    top = {e.split("/")[0] for e in entries}

    def exists(path):
        path = path.rstrip("/")
        if "*" not in path and path in entries:
            return True
        want = path.split("/")
        for e in entries:
            have = e.split("/")
            if len(have) >= len(want) and all(fnmatch.fnmatchcase(h, w) for h, w in zip(have[-len(want):], want)):
                return True
        return False

    # Not places in the tree: build outputs, installs, the user's own files.
    elsewhere = re.compile(r"^(build[^/]*|\.mesonpy[^/]*|target|rust-target|DIR|PREFIX|prefix|out|\$[A-Z_]+)(/|$)")
    source_ext = (".cpp", ".hpp", ".h", ".c", ".cu", ".py", ".sh", ".md", ".rs", ".go", ".toml", ".build",
                  ".txt", ".trace", ".gz", ".pickle", ".map", ".json", ".in")
    # A path-like word: no spaces, no options, no URLs.
    path_re = re.compile(r"^[A-Za-z0-9_.*+-]+(/[A-Za-z0-9_.*+-]+)*/?$")
    member_re = re.compile(r"\b([A-Z][A-Za-z0-9_]*)::(~?[A-Za-z_][A-Za-z0-9_]*)")
    sources = [f for f in FILES if f.endswith((".hpp", ".h", ".cpp", ".c", ".cu", ".rs", ".go", ".py"))]
    texts = {}

    def text(f):
        if f not in texts:
            try:
                texts[f] = open(os.path.join(src, f), encoding="utf-8", errors="replace").read()
            except OSError:
                texts[f] = ""
        return texts[f]

    members_ok = {}

    def member_exists(typ, member):
        key = (typ, member)
        if key in members_ok:
            return members_ok[key]
        decl = re.compile(r"\b(class|struct|enum|union|namespace|impl|type|trait)\s+(class\s+|struct\s+)?" + re.escape(typ) + r"\b")
        word = re.compile(r"\b" + re.escape(member.lstrip("~")) + r"\b")
        defined = typ + "::" + member
        ok = any(defined in text(f) or (decl.search(text(f)) and word.search(text(f))) for f in sources)
        members_ok[key] = ok
        return ok

    docs = ["README.md"] + sorted("docs/" + f for f in os.listdir(os.path.join(src, "docs")) if f.endswith(".md"))
    cited = 0
    for doc in docs:
        body = open(os.path.join(src, doc), encoding="utf-8").read()
        # Fenced blocks are programs and output, not citations.
        body = re.sub(r"^```.*?^```", "", body, flags=re.S | re.M)
        for code in re.findall(r"`([^`\n]+)`", body):
            for typ, member in member_re.findall(code):
                cited += 1
                if not member_exists(typ, member):
                    problems.append(f"{doc}: `{typ}::{member}`: no source declares {typ} with a member {member}")
            token = code.strip()
            if token.startswith(("./", "../")):
                token = os.path.normpath(os.path.join(os.path.dirname(doc), token))
            if not path_re.match(token) or elsewhere.match(token) or token.startswith(("-", ".")):
                continue
            if token in EXTERNAL:
                continue
            # A glob names files where it has a directory or an extension
            # (`pause/stores/pinned_cache.*`); `VPMM_*`, `do_*` are names.
            if "*" in token and "/" not in token and "." not in token:
                continue
            named_file = token.endswith(source_ext) or "*" in token
            if "/" not in token.rstrip("/"):
                if not named_file:
                    continue  # a word, not a file (`malloc`, `vpmm`)
            elif not (named_file or token.endswith("/") or token.split("/")[0] in top):
                continue  # words with slashes: `malloc/free`, `pause/resume`
            cited += 1
            if not exists(token):
                problems.append(f"{doc}: `{code}`: no such file or directory in the tree")
    print(f"docs citations: {cited} checked in {len(docs)} pages")


def check_machine_paths():
    bad = re.compile(rb"(?<![A-Za-z0-9_.~$-])/(?:home|root|work)/[A-Za-z0-9_.-]+"
                     rb"|(?<![A-Za-z0-9_.~$-])/tmp/[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]")
    this = os.path.relpath(os.path.abspath(__file__), src)
    for f in FILES:
        if f == this:
            continue
        path = os.path.join(src, f)
        try:
            with open(path, "rb") as fh:
                data = fh.read()
            if data[:2] == b"\x1f\x8b":
                data = gzip.decompress(data)
        except (OSError, EOFError, gzip.BadGzipFile):
            continue
        if not any(d in data for d in (b"/home/", b"/root/", b"/work/", b"/tmp/")):
            continue  # the common case, without a regex over the bytes
        for m in bad.finditer(data):
            line = data.count(b"\n", 0, m.start()) + 1
            problems.append(f"{f}:{line}: machine path {m.group(0).decode('latin-1')!r}")
    print(f"machine paths: {len(FILES)} files read")


{"citations": check_citations, "machine-paths": check_machine_paths}[mode]()
for p in problems:
    print("FAIL:", p)
print(f"{mode}: {len(problems)} problem(s)")
sys.exit(1 if problems else 0)
