"""`python3 -m vpmm info|replay|plot ...`: the vpmm command (see _cli.py)."""
import sys

from ._cli import main

sys.exit(main())
