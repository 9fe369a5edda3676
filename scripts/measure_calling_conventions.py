#!/usr/bin/env python3
"""The most common call of a text encoder -- `model(input_ids=..., attention_mask=...)`, token types left to the
model's default -- through `convert_for_gpu`'s defaults, with the graph pass (include=("legalize",)) and without.

Tiny random-weight configs of each encoder family in tests/hf_tiny.py (never downloaded), batch 1 and batch 2 (the
second row padded). Prints one markdown row per case and writes docs/data/calling_conventions.json (--record).

    python scripts/measure_calling_conventions.py [--record] [--arch bert roberta ...]
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "utilities"), str(ROOT / "tests")]
OUT = ROOT / "docs" / "data" / "calling_conventions.json"


def one(model, ids, mask, with_pass: bool, folder: Path) -> dict:
    from litert_gpu_toolkit import convert_for_gpu

    r = convert_for_gpu(model, {"input_ids": ids, "attention_mask": mask}, folder / "m.tflite",
                        include=("legalize",) if with_pass else None, diagnose_budget_s=0)
    return {"verdict": r.summary().split(":", 1)[0], "line": r.summary().splitlines()[1].strip()[:160]}


def main(argv=None) -> int:
    import hf_tiny

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--arch", nargs="*", default=list(hf_tiny.ENCODERS), choices=hf_tiny.ENCODERS)
    p.add_argument("--record", action="store_true", help=f"write {OUT.relative_to(ROOT)}")
    args = p.parse_args(argv)
    rows = []
    print("| encoder | batch | with the pass | without it |\n|---|---|---|---|")
    for arch in args.arch:
        model, inputs = hf_tiny.text_encoder(arch)
        ids, mask = inputs[0], inputs[1]
        for batch in (1, 2):
            i, m = (ids[-1:], mask[-1:]) if batch == 1 else (ids, mask)   # batch 1: the padded row
            with tempfile.TemporaryDirectory() as tmp:
                with_pass = one(model.model, i, m, True, Path(tmp))   # the HF model itself, keywords
                without = one(model.model, i, m, False, Path(tmp))
            rows.append({"arch": arch, "batch": batch, "with": with_pass, "without": without})
            print(f"| {arch} | {batch} | {with_pass['verdict']} | {without['verdict']} |", flush=True)
    passed = sum(r["with"]["verdict"] == "PASS" for r in rows)
    before = sum(r["without"]["verdict"] == "PASS" for r in rows)
    print(f"\nPASS with the pass: {passed}/{len(rows)}; without it: {before}/{len(rows)}")
    if args.record:
        import platform
        from importlib.metadata import version

        env = {"device": "the GPU accelerator of this machine (llvmpipe software Vulkan in this repository's runs)",
               **{pkg: version(pkg) for pkg in ("torch", "litert-torch", "ai-edge-litert", "transformers")},
               "python": platform.python_version()}
        OUT.write_text(json.dumps({"environment": env, "rows": rows}, indent=2) + "\n")
        print(f"wrote {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
