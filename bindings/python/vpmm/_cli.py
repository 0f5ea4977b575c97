"""The `vpmm` command (info, replay, plot) from Python: the executable that
``pip install .`` puts inside this package (bin/vpmm, which finds the
package's libvpmm.so.1 through its RUNPATH), else $VPMM_TOOL, else the
source checkout's build directories. The console script `vpmm` runs it."""
from __future__ import annotations

import os
import sys
from typing import List, Optional

from ._library import _BUILD_DIRS


def candidate_paths() -> List[str]:
    """Where :func:`tool_path` looks, in order."""
    here = os.path.dirname(os.path.abspath(__file__))
    out = []
    env = os.environ.get("VPMM_TOOL")
    if env:
        out.append(env)
    out.append(os.path.join(here, "bin", "vpmm"))
    root = os.path.normpath(os.path.join(here, "..", "..", ".."))
    out.extend(os.path.join(root, b, "tools", "vpmm") for b in _BUILD_DIRS)
    return out


def tool_path() -> Optional[str]:
    """The `vpmm` executable, or None. PATH is not searched: there `vpmm` is
    usually this package's own console script."""
    for p in candidate_paths():
        if os.path.isfile(p) and os.access(p, os.X_OK):
            return p
    return None


def main(argv: Optional[List[str]] = None) -> int:
    """Runs the vpmm command with `argv` (default: sys.argv[1:]) in place of
    this process; returns 2 when there is none."""
    args = sys.argv[1:] if argv is None else argv
    tool = tool_path()
    if tool is None:
        print("vpmm: the vpmm executable is not installed with this package and no build "
              "directory has one (tried " + ", ".join(candidate_paths()) + "); install with "
              "`pip install .` at the root of the libvpmm source tree or set VPMM_TOOL",
              file=sys.stderr)
        return 2
    os.execv(tool, [tool] + list(args))
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())
