#!/usr/bin/env python3
"""The README's code blocks that say how they are tested:

  ```python tested    run as written with the python3 running this test, on
                      the host backend, the package from bindings/python and
                      the library just built (VPMM_LIBRARY): it must exit 0
                      and print no error
  ```LANG file=PATH   identical to PATH in the tree, which the binding's own
                      test builds (Rust: bindings/rust/vpmm/examples/, built
                      by `cargo test` in 'rust_binding'; Go:
                      bindings/go/examples/, vetted by 'go_binding')
  ```c tested         compiled and run by check_readme_c.sh ('readme_c_snippet')

Blocks of the other paths (PyTorch, torch_memory_saver, JAX) need a GPU
framework and carry no mark. The README must keep at least one block of
each kind above, so that dropping a mark cannot pass silently.
Usage: check_readme_snippets.py SOURCE_DIR LIBVPMM_SO"""
import os
import re
import subprocess
import sys
import tempfile

src, lib = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
readme = open(os.path.join(src, "README.md"), encoding="utf-8").read()
blocks = re.findall(r"^```([^\n]*)\n(.*?)^```$", readme, flags=re.S | re.M)
problems = []
seen = {"python tested": 0, "file=": 0, "c tested": 0}

for info, code in blocks:
    info = info.strip()
    if info == "c tested":
        seen["c tested"] += 1
    elif info == "python tested":
        seen["python tested"] += 1
        env = {k: v for k, v in os.environ.items() if not k.startswith("VPMM_")}
        env.update(VPMM_BACKEND="host", VPMM_LIBRARY=lib,
                   PYTHONPATH=os.path.join(src, "bindings", "python") + os.pathsep + env.get("PYTHONPATH", ""))
        with tempfile.TemporaryDirectory() as cwd:
            r = subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True,
                               timeout=120)
        print(f"python block: exit {r.returncode}; stdout: {r.stdout.strip()}")
        if r.returncode != 0 or r.stderr.strip():
            problems.append(f"the README's Python block failed (exit {r.returncode}):\n{code}\n{r.stderr}")
    elif "file=" in info:
        seen["file="] += 1
        path = info.split("file=", 1)[1].split()[0]
        try:
            have = open(os.path.join(src, path), encoding="utf-8").read()
        except OSError:
            problems.append(f"README block `{info}`: {path} does not exist")
            continue
        if have != code:
            problems.append(f"README block `{info}` differs from {path} (the file its binding's test builds)")
        else:
            print(f"{path}: the README's block, as built by its binding's test")
for kind, n in seen.items():
    if n == 0:
        problems.append(f"README.md has no ```{kind}... block: its snippets must stay tested")
for p in problems:
    print("FAIL:", p)
print(f"readme snippets: {len(problems)} problem(s)")
sys.exit(1 if problems else 0)
