"""What the trained mode planted in each zoo row: the stream writers it scaled, the token tables, the free
parameters and the BatchNorms (`litert_zoo.weights.apply_trained_ranges`). A plant rule change is audited by diffing
this report before and after it, and re-running the rows whose line changed.

    .venv-zoo/bin/python zoo/planted.py [--only vit,llama] [--held-out]

Builds each row once (random weights, nothing downloaded) and prints one markdown row per zoo row.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1] / "utilities")]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--only", help="comma-separated row names (default: every zoo row)")
    p.add_argument("--held-out", action="store_true", help="the held-out rows instead of the zoo's")
    args = p.parse_args(argv)
    os.environ["LITERT_ZOO_ACTIVATIONS"] = "trained"
    from litert_zoo.build import install_torchvision_placeholders

    install_torchvision_placeholders()
    from litert_zoo.models import HELD_OUT, ZOO

    rows = HELD_OUT if args.held_out else ZOO
    names = args.only.split(",") if args.only else list(rows)
    unknown = [n for n in names if n not in rows]
    if unknown:
        p.error(f"unknown row(s): {', '.join(unknown)}")
    print("| row | stream writers scaled | token tables | free parameters | BatchNorms |")
    print("|---|---|---:|---|---:|")
    for name in names:
        try:
            wrapped, _ = rows[name].build()
            got = wrapped.planted
            cells = [", ".join(got["writers"]) or "-", str(got["embeddings"]), ", ".join(got["free"]) or "-",
                     str(got["batch_norms"])]
        except Exception as e:                       # noqa: BLE001 - one row's failure is reported, not fatal
            cells = [f"build failed: {type(e).__name__}: {str(e)[:120]}", "-", "-", "-"]
        print(f"| {name} | " + " | ".join(cells) + " |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
