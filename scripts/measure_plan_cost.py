#!/usr/bin/env python
"""What a precision plan costs: its chain's latency beside the whole graph's in fp16 and in fp32, in one run.

    .venv/bin/python scripts/measure_plan_cost.py \
        --plan models/vision/xfeat/converted/artifacts/matcher_n512_layers2-5-fp32/plan.json \
        --whole models/vision/xfeat/converted/artifacts/matcher_n512.tflite --record
    .venv/bin/python scripts/measure_plan_cost.py --plan PLAN.json --whole WHOLE.tflite --device host-native

A plan (a recipe's `export_* --fp32-until MODULE` / `--fp32-from LAYER`) runs part of a model with fp32
arithmetic so that the fp16 gates pass; on a phone that part costs what fp32 costs. Each round runs, in turn and
on the same seeded random samples: the whole graph in fp16 (`--device`), the whole graph in fp32 (its fp32 twin),
and the chain (`recipe.plans.plan_cost`). The table gives medians per sample over the rounds and the chain's ratio
to each whole graph. --record merges the row into docs/data/plan_cost.json and regenerates the block in
docs/performance.md. Device: llvmpipe (software Vulkan) here, where fp32 arithmetic is not slower than fp16 the way
it is on a phone GPU -- the ratios say what this machine does, and the same command on a phone (`--device PHONE`
is not wired: the chain feeds outputs between parts) is what a user should trust.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "utilities"))

from litert_gpu_toolkit.core.atomic_file import write_text_atomic  # noqa: E402

RECORD = ROOT / "docs" / "data" / "plan_cost.json"


def _name(path: Path) -> str:
    path = Path(path).resolve()
    return path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else path.name


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--plan", type=Path, required=True, help="the plan's plan.json")
    p.add_argument("--whole", type=Path, required=True, help="the same model as one graph (the recipe's export)")
    p.add_argument("--device", choices=("host-gpu", "host-native"), default="host-gpu",
                   help="where the fp16 graph and the plan's fp16 parts run (default host-gpu)")
    p.add_argument("--samples", type=int, default=2, help="seeded random samples per run (default 2)")
    p.add_argument("--rounds", type=int, default=3, help="rounds, each running the three in turn (default 3)")
    p.add_argument("--record", action="store_true", help=f"merge into {RECORD.relative_to(ROOT)} and the docs")
    args = p.parse_args(argv)
    for flag, path in (("--plan", args.plan), ("--whole", args.whole)):
        if not path.is_file():
            p.error(f"{flag} {path}: no such file")
    if args.samples < 1 or args.rounds < 1:
        p.error("--samples and --rounds must be >= 1")

    from litert_gpu_toolkit.core.inputs import make_inputs
    from litert_gpu_toolkit.core.model_info import read_model_info
    from litert_gpu_toolkit.recipe.plans import plan_cost

    info = read_model_info(args.whole)
    key = info.signatures[0].key
    samples = [tuple(make_inputs(info, None, seed=i)[0][key].values()) for i in range(args.samples)]
    row = plan_cost(args.plan, args.whole, samples, args.device, rounds=args.rounds, how="the recipe's export")
    ms = row["ms_per_sample"]
    print(f"{_name(args.plan)}: per sample, medians over {args.rounds} rounds on {args.device}: whole fp16 "
          f"{ms['fp16']} ms, whole fp32 {ms['fp32']} ms, chain {ms['chain']} ms; chain / fp16 "
          f"{row['chain_over_fp16']}x, chain / fp32 {row['chain_over_fp32']}x"
          + (f"; failed: {row['failed']}" if row["failed"] else ""))
    if args.record:
        data = json.loads(RECORD.read_text()) if RECORD.exists() else {"plans": {}}
        from litert_gpu_toolkit.runtime.residency import runtime_version

        data["plans"][f"{_name(args.plan)}@{args.device}"] = {
            **row, "whole": _name(args.whole), "date": f"{dt.datetime.now(dt.timezone.utc):%Y-%m-%d}",
            "runtime_version": runtime_version(),
            "command": "scripts/measure_plan_cost.py " + " ".join(
                a if not Path(a).is_absolute() else _name(Path(a)) for a in (argv or sys.argv[1:]))}
        write_text_atomic(RECORD, json.dumps(data, indent=1, sort_keys=True) + "\n")
        subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_docs.py")], check=True)
    return 0 if not row["failed"] else 1


if __name__ == "__main__":
    sys.exit(main())
