"""How much does a full `check_gpu_compatibility` cost next to one bare strict-GPU compile + run?

Builds a ~21 MB BERT-style encoder (hidden 256, 4 layers, 4 heads, seq 128, vocab 8000, random
weights from a transformers BertConfig, embeddings + encoder without an attention mask so it is
fully GPU-resident), converts it once to artifacts/checker_overhead/bert_256x4.tflite, then
alternates `--rounds` times: a bare strict GPU fp16 compile+run (one child process) and a full check
(CPU + GPU fp16 + GPU fp32). Prints the medians, the ratio and the check's per-step timings.

    .venv/bin/python scripts/checker_overhead.py [--rounds 3] [--record]

--record writes the figures to docs/data/checker_cost.json, from which scripts/gen_docs.py renders the
"Cost" block of the toolkit's REFERENCE.md (the machine's load average is recorded beside them: on a
shared machine the absolute times are inflated, the ratio much less).
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "utilities"))

from litert_gpu_toolkit.core.atomic_file import write_text_atomic
from litert_gpu_toolkit.check.checker import check_gpu_compatibility
from litert_gpu_toolkit.core.inputs import make_inputs
from litert_gpu_toolkit.core.model_info import read_model_info
from litert_gpu_toolkit.recipe.results import git_commit
from litert_gpu_toolkit.runtime.residency import gpu_label
from litert_gpu_toolkit.runtime.compiled import compile_and_run


def build(path: Path) -> None:
    import torch
    from transformers import BertConfig, BertModel

    from litert_gpu_toolkit.lowering.export import export_tflite

    torch.manual_seed(0)
    cfg = BertConfig(hidden_size=256, num_hidden_layers=4, num_attention_heads=4, intermediate_size=1024,
                     vocab_size=8000, max_position_embeddings=128)
    bert = BertModel(cfg).eval()

    class Encoder(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, ids):
            return self.m.encoder(self.m.embeddings(input_ids=ids)).last_hidden_state

    export_tflite(Encoder(bert), (torch.randint(0, 8000, (1, 128)),), path)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3, help="bare runs and full checks, alternated (default 3)")
    parser.add_argument("--record", action="store_true", help="write the figures to docs/data/checker_cost.json")
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    path = ROOT / "artifacts" / "checker_overhead" / "bert_256x4.tflite"
    if not path.exists():
        build(path)
    feeds, _, _ = make_inputs(read_model_info(path))
    bare, full, report = [], [], None
    for _ in range(args.rounds):
        r = compile_and_run(path, feeds, accelerator="gpu")
        if not r.ok:
            print(f"bare strict GPU run failed: {r.status} {r.error}")
            return 1
        bare.append(r.wall_s)
        report = check_gpu_compatibility(path)
        full.append(report.timings["total"])
    b, f = statistics.median(bare), statistics.median(full)
    print(f"model: {path.name}, {path.stat().st_size / 1e6:.1f} MB, verdict {report.verdict}: {report.summary}")
    print(f"device: {report.environment.get('gpu_adapter')} via {report.environment.get('gpu_backend')}, "
          f"ai-edge-litert {report.environment.get('ai_edge_litert')}")
    print(f"bare strict GPU fp16 compile+run (child wall): median {b:.2f} s of {[round(x, 2) for x in bare]}")
    print(f"full check: median {f:.2f} s of {[round(x, 2) for x in full]}")
    print(f"ratio full / bare: {f / b:.2f}")
    print("last check's steps: " + ", ".join(f"{k} {v:.2f} s" for k, v in report.timings.items()))
    if args.record:
        record(path, report, bare, full, args.rounds)
    return 0


def record(path: Path, report, bare: list[float], full: list[float], rounds: int) -> None:
    env = report.environment
    data = {
        "device": gpu_label(env.get("gpu_adapter"), env.get("software_gpu"), env.get("gpu_backend"),
                            version=env.get("ai_edge_litert")),
        "command": f"python scripts/checker_overhead.py --rounds {rounds} --record",
        "date": datetime.date.today().isoformat(), "git_commit": git_commit(ROOT),
        "cpu_cores": os.cpu_count(), "load_average_1min": round(os.getloadavg()[0], 2),
        "model": "BERT-style encoder, hidden 256 x 4 layers, seq 128, random weights",
        "model_mb": round(path.stat().st_size / 1e6, 1), "verdict": report.verdict, "summary": report.summary,
        "bare_median_s": statistics.median(bare), "full_median_s": statistics.median(full),
        "ratio": statistics.median(full) / statistics.median(bare), "steps_s": dict(report.timings),
    }
    out = ROOT / "docs" / "data" / "checker_cost.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out, json.dumps(data, indent=1) + "\n")
    print(f"recorded in {out.relative_to(ROOT)}; now run python scripts/gen_docs.py")


if __name__ == "__main__":
    sys.exit(main())
