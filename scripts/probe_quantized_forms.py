#!/usr/bin/env python
"""Which quantized weight forms does the GPU compile and compute right? Tiny graphs, every form, one table.

    .venv/bin/python scripts/probe_quantized_forms.py              # print the table
    .venv/bin/python scripts/probe_quantized_forms.py --record     # also write docs/data/quantized_forms.json

Each case is one weight-carrying op in the spelling models produce (a Linear at rank 2 and 3, the transformer's
residual `x + Linear(x)` (as written, with a reshape to rank 2 in torch -- which litert-torch folds back -- and with
the file-level `fc_rank2` rewrite), an embedding table, a conv, a depthwise conv). It is
converted plainly with litert-torch, its weights are written in each form (`quantize.forms`), and the file is
checked strictly GPU-only: the GPU against LiteRT's CPU on the SAME quantized file (does the GPU compute this form
right?) and the CPU against torch (what the form itself costs). The device is whatever the checker finds
(llvmpipe, software Vulkan, on the project's machines); the table records it.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "utilities")]

OUT = ROOT / "docs" / "data" / "quantized_forms.json"


def cases():
    import torch
    from torch import nn

    torch.manual_seed(0)

    class Residual(nn.Module):
        def __init__(self, rank2: bool = False):
            super().__init__()
            self.fc, self.rank2 = nn.Linear(64, 64), rank2

        def forward(self, x):
            y = self.fc(x.reshape(-1, x.shape[-1])).reshape(x.shape) if self.rank2 else self.fc(x)
            return x + y

    class Embed(nn.Module):
        def __init__(self):
            super().__init__()
            self.table = nn.Embedding(256, 64)

        def forward(self, ids):
            return self.table(ids) * 2.0

    x2, x3 = torch.randn(8, 64), torch.randn(1, 8, 64)
    img = torch.randn(1, 16, 16, 16)
    return {
        "linear rank 2": (nn.Linear(64, 64), (x2,), "FULLY_CONNECTED"),
        "linear rank 3": (nn.Linear(64, 64), (x3,), "FULLY_CONNECTED"),
        "x + linear(x), rank 3": (Residual(), (x3,), "FULLY_CONNECTED"),
        "x + linear(x), torch reshape to rank 2": (Residual(rank2=True), (x3,), "FULLY_CONNECTED"),
        "x + linear(x), fc_rank2": (Residual(), (x3,), "FULLY_CONNECTED"),
        "embedding": (Embed(), (torch.randint(0, 256, (1, 8), dtype=torch.int32),), "EMBEDDING_LOOKUP"),
        "conv 3x3": (nn.Conv2d(16, 32, 3, padding=1), (img,), "CONV_2D"),
        "depthwise conv 3x3": (nn.Conv2d(16, 16, 3, padding=1, groups=16), (img,), "DEPTHWISE_CONV_2D"),
        "transposed conv 4x4 stride 2": (nn.ConvTranspose2d(16, 8, 4, stride=2, padding=1), (img,), "TRANSPOSE_CONV"),
    }


def _corr(a, b) -> float | None:
    import numpy as np

    a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    if not (np.isfinite(a).all() and a.std() > 0 and b.std() > 0):
        return None
    return round(float(np.corrcoef(a, b)[0, 1]), 6)


def probe(name, model, inputs, op, form, work: Path) -> dict:
    import numpy as np
    import torch

    from litert_gpu_toolkit.check.checker import check_gpu_compatibility
    from litert_gpu_toolkit.quantize.forms import quantize_tflite

    float_path = work / f"{abs(hash(name))}.tflite"
    if not float_path.exists():
        import litert_torch

        litert_torch.convert(model.eval(), inputs).export(str(float_path))
    row = {"case": name, "op": op, "form": form}
    data = float_path.read_bytes()
    if name.endswith("fc_rank2"):                   # the file-level rewrite quantize_for_gpu applies first
        from litert_gpu_toolkit.quantize.fc_rank2 import fc_rank2

        data, _ = fc_rank2(data)
    try:
        data = data if form == "float" else quantize_tflite(data, {op: form})
    except Exception as e:                          # noqa: BLE001 - the quantizer refusing a form is a result
        return {**row, "verdict": "QUANTIZER_ERROR", "why": f"{type(e).__name__}: {e}"[:200]}
    path = work / f"{abs(hash(name))}-{form}.tflite"
    path.write_bytes(data)
    with torch.no_grad():
        ref = model(*inputs).numpy()
    feeds = {f"args_{i}": t.numpy() for i, t in enumerate(inputs)}
    report = check_gpu_compatibility(path, inputs=feeds, precisions=("fp16", "fp32"), timeout=120)
    row.update(verdict=report.verdict, size=len(data), residency=(report.residency or {}).get("line"),
               why=report.summary if not report.ok else "", adapter=report.environment.get("gpu_adapter"))
    outs = report.outputs or {}
    for label, sigs in outs.items():
        arrays = [a for sig in sigs.values() for a in sig.values()]
        if arrays:
            row[f"corr_{label}_vs_torch"] = _corr(arrays[0], ref)
    cpu = [a for sig in outs.get("cpu", {}).values() for a in sig.values()]
    for label in ("gpu_fp16", "gpu_fp32"):
        got = [a for sig in outs.get(label, {}).values() for a in sig.values()]
        if got and cpu:
            row[f"corr_{label}_vs_cpu"] = _corr(got[0], cpu[0])
            row[f"maxrel_{label}_vs_cpu"] = round(float(np.abs(got[0] - cpu[0]).max() /
                                                        (np.abs(cpu[0]).max() or 1)), 6)
    return row


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--record", action="store_true", help=f"write {OUT.relative_to(ROOT)}")
    parser.add_argument("--forms", default="float,fp16,int8,int8-deq,int4,int4-b32,int4-deq")
    parser.add_argument("--only", default="", help="comma-separated case names (substring match)")
    args = parser.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, (model, inputs, op) in cases().items():
            if args.only and not any(s in name for s in args.only.split(",")):
                continue
            for form in args.forms.split(","):
                row = probe(name, model, inputs, op, form, Path(tmp))
                rows.append(row)
                print(f"{name:32s} {form:9s} {row['verdict']:15s} gpu16~cpu {row.get('corr_gpu_fp16_vs_cpu')} "
                      f"cpu~torch {row.get('corr_cpu_vs_torch')}  {row.get('why', '')[:120]}", flush=True)
    if args.record:
        import importlib.metadata as md

        versions = {p: md.version(p) for p in ("ai-edge-litert", "litert-quantizer", "litert-torch", "torch")}
        adapters = sorted({r["adapter"] for r in rows if r.get("adapter")})
        OUT.write_text(json.dumps({"command": "python scripts/probe_quantized_forms.py --record",
                                   "device": adapters, "versions": versions, "rows": rows}, indent=1) + "\n")
        print(f"wrote {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
