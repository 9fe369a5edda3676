"""The zoo's command: `python zoo/run.py --help` (see litert_zoo/cli.py)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from litert_zoo.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
