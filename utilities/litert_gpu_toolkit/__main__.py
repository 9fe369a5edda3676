"""`python -m litert_gpu_toolkit <command> ...` (see `--help`; the commands are listed in `cli.main.COMMANDS`)."""
from __future__ import annotations

import sys

from .cli.main import main

if __name__ == "__main__":
    sys.exit(main())
