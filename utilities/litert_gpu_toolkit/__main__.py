"""Command line: `python -m litert_gpu_toolkit <command> ...` (see `--help`; the commands live in `cli.py`)."""
from __future__ import annotations

import sys

from .cli import COMMANDS, main  # noqa: F401  (COMMANDS: re-exported for callers that list the commands)

if __name__ == "__main__":
    sys.exit(main())
