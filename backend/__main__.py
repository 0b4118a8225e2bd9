"""``python -m backend``: the same as ``conformant backend``."""

from __future__ import annotations

import sys

from conformance.cli import main

if __name__ == "__main__":
    sys.exit(main(["backend", *sys.argv[1:]]))
