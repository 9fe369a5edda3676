"""Fill in each zoo row's input share (`litert_gpu_toolkit/convert/sensitivity.py`) without converting anything again.

The share depends only on how the zoo builds the row's model and inputs, not on the toolkit, so rows run before
the measure existed get it from this script; a row run by `zoo/run.py` measures it itself. Writes the field into
the mode's results.json (nothing else in a row changes), regenerates its README, and prints the weak rows.

    .venv-zoo/bin/python zoo/input_share.py [--activations trained] [--only a,b]
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "zoo"), str(ROOT / "utilities")]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--activations", choices=("o1", "trained"), default="o1", help="which mode's rows (default o1)")
    p.add_argument("--only", default="", help="comma-separated row names (default: every row with a result)")
    args = p.parse_args(argv)
    os.environ["LITERT_ZOO_ACTIVATIONS"] = args.activations
    for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "YOLO_OFFLINE"):
        os.environ.setdefault(k, "1")
    os.environ.setdefault("YOLO_CONFIG_DIR", tempfile.mkdtemp(prefix="zoo-yolo-"))
    from litert_zoo.models import ZOO
    from litert_zoo.rows import load_results, save_results
    from litert_gpu_toolkit.convert.sensitivity import input_share, is_weak
    from litert_zoo.table import write_readme

    folder = ROOT / "zoo" / ("trained" if args.activations == "trained" else "")
    results = folder / "results.json"
    rows = load_results(results)
    if not rows:
        p.error(f"no results in {results.relative_to(ROOT)}; run the zoo first")
    names = [n for n in args.only.split(",") if n] or list(rows)
    unknown = [n for n in names if n not in rows or n not in ZOO]
    if unknown:
        p.error(f"no such row with a result: {', '.join(unknown)}")
    import json

    env = json.loads(results.read_text()).get("environment", {})
    for i, name in enumerate(names, 1):
        try:
            model, inputs = ZOO[name].build()
            rows[name].input_share = input_share(model, inputs)
        except Exception as e:                            # noqa: BLE001 - one row's build failing is reported
            rows[name].input_share = None
            print(f"[{i}/{len(names)}] {name}: not measured ({type(e).__name__}: {e})"[:200], flush=True)
            continue
        share = rows[name].input_share
        flag = "  <- weak check" if rows[name].passed and is_weak(share) else ""
        print(f"[{i}/{len(names)}] {name}: {share}{flag}", flush=True)
        save_results(results, rows, env, list(ZOO))
    write_readme(folder, rows, env)
    return 0


if __name__ == "__main__":
    sys.exit(main())
