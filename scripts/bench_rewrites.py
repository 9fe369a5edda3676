#!/usr/bin/env python
"""Each GPU rewrite against the original it replaces, side by side: LiteRT CPU and GPU latency, MACs.

    python scripts/bench_rewrites.py                    # prints the table, writes artifacts/bench_rewrites.json
    python scripts/bench_rewrites.py --record           # writes docs/data/bench_rewrites.json, then: gen_docs.py
    python scripts/bench_rewrites.py --quick            # tiny sizes, two cases (smoke test)

Transposed conv: native TRANSPOSE_CONV vs zero-stuffed vs polyphase, 1-D and 2-D, stride 2 and 4,
kernel 2*stride (padding stride/2, which the converter can lower natively; dense upsamplers use the
phase-major polyphase form, the depthwise one the depthwise form). Then one row per other
rewrite whose original converts. Latency = median of --repeats runs of one compiled model in a
child process (CPU: LiteRT CPU / XNNPACK; GPU: strict GPU-only, fp16). "rejected" = the original
does not compile GPU-only. Ratios are original / rewrite (above 1: the rewrite is faster).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "utilities"))

import torch
import torch.nn.functional as F
from torch import nn

from litert_gpu_toolkit.lowering.export import export_tflite, signature_inputs
from litert_gpu_toolkit.rewrites.transpose_conv import (
    ConvTSpec,
    PolyphaseConvT1d,
    PolyphaseConvT2d,
    ZeroStuffConvT1d,
    ZeroStuffConvT2d,
    conv_transpose_macs,
    patch_conv_transpose,
)
from litert_gpu_toolkit.rewrites.select import arith_where, patch_select
from litert_gpu_toolkit.rewrites.amax import channel_max
from litert_gpu_toolkit.rewrites.relu_0_to_1 import clamp01
from litert_gpu_toolkit.rewrites.broadcast_to import expand_by_cat, repeat_kv_cat
from litert_gpu_toolkit.runtime.compiled import compile_and_run

sys.path.insert(0, str(ROOT / "scripts"))
from gen_docs import render_bench

RECORD = ROOT / "docs" / "data" / "bench_rewrites.json"


class Fn(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *args):
        return self.fn(*args)


def conv_cases(quick: bool):
    """(label, {form: module}, inputs, {form: MACs})."""
    cases = []
    strides = (2,) if quick else (2, 4)
    for ndim in ((2,) if quick else (1, 2)):
        for s in strides:
            k, p = 2 * s, s // 2
            if ndim == 1:
                c, size = (8, 16) if quick else (64, 256)
                native = nn.ConvTranspose1d(c, c, k, stride=s, padding=p)
                x = torch.randn(1, c, size)
                forms = {"native": native, "zerostuff": ZeroStuffConvT1d.from_conv_transpose(native),
                         "polyphase": PolyphaseConvT1d.from_conv_transpose(native)}
                shape = f"{c}x{size}"
            else:
                c, size = (8, 8) if quick else (32, 32)
                native = nn.ConvTranspose2d(c, c, k, stride=s, padding=p)
                x = torch.randn(1, c, size, size)
                forms = {"native": native, "zerostuff": ZeroStuffConvT2d.from_conv_transpose(native),
                         "polyphase": PolyphaseConvT2d.from_conv_transpose(native)}
                shape = f"{c}x{size}x{size}"
            spec = ConvTSpec.of(native)
            macs = {f: conv_transpose_macs(spec, tuple(x.shape[2:]), f) for f in forms}
            cases.append((f"ConvTranspose{ndim}d s={s} k={k}, in {shape}", forms, (x,), macs))
    if not quick:                                  # a depthwise upsampler (the converter splits it per channel)
        dw = nn.ConvTranspose2d(32, 32, 4, stride=2, padding=1, groups=32)
        spec = ConvTSpec.of(dw)
        patched = nn.Sequential(nn.ConvTranspose2d(32, 32, 4, stride=2, padding=1, groups=32))
        patched[0].load_state_dict(dw.state_dict())
        patch_conv_transpose(patched)
        x = torch.randn(1, 32, 32, 32)
        cases.append(("ConvTranspose2d depthwise s=2 k=4, in 32x32x32",
                      {"native": dw, "zerostuff": ZeroStuffConvT2d.from_conv_transpose(dw), "polyphase": patched},
                      (x,), {f: conv_transpose_macs(spec, (32, 32), f) for f in ("native", "zerostuff", "polyphase")}))
    return cases


def other_cases(quick: bool):
    """(rewrite, original module, rewritten module, inputs)."""
    n = 8 if quick else 64
    x = torch.randn(1, n, 32, 32)
    elu = nn.Sequential(nn.ELU())
    elu_rw = nn.Sequential(nn.ELU())
    patch_select(elu_rw, functional=False)
    kv = torch.randn(1, 4, 128 if not quick else 8, 64)
    cases = [
        ("patch_select: ELU", elu, elu_rw, (x,)),
        ("patch_select: where(x > 0, x, 0.1x), inf-safe form", Fn(lambda t: torch.where(t > 0, t, 0.1 * t)),
         Fn(lambda t: arith_where(t > 0, t, 0.1 * t)), (x,)),
        ("arith_where(..., nonfinite='finite'): plain blend", Fn(lambda t: torch.where(t > 0, t, 0.1 * t)),
         Fn(lambda t: arith_where(t > 0, t, 0.1 * t, nonfinite="finite")), (x,)),
        ("patch_repeat_kv: GQA 4 -> 16 heads", Fn(lambda t: t[:, :, None].expand(1, 4, 4, *t.shape[2:])
                                                 .reshape(1, 16, *t.shape[2:]) * 2),
         Fn(lambda t: repeat_kv_cat(t, 4) * 2), (kv,)),
        ("patch_broadcast_to: [1,1,H,W] -> [1,C,H,W]", Fn(lambda t: t.expand(1, n, 32, 32) * 2),
         Fn(lambda t: expand_by_cat(t, (1, n, 32, 32)) * 2), (x[:, :1],)),
        ("patch_hardsigmoid: Hardtanh(0, 1)", nn.Hardtanh(0.0, 1.0), Fn(clamp01), (x,)),
        ("patch_amax: channel max", Fn(lambda t: t - t.amax(1, keepdim=True)),
         Fn(lambda t: t - channel_max(t, 1, True)), (x,)),
        ("patch_chunk: chunk(2)", Fn(lambda t: (lambda a, b: a * torch.sigmoid(b))(*t.chunk(2, 1))),
         Fn(lambda t: t[:, : n // 2] * torch.sigmoid(t[:, n // 2:])), (x,)),
        ("patch_degenerate_softmax: x / x", Fn(lambda t: torch.sigmoid(t / t * t)),
         Fn(lambda t: torch.sigmoid(torch.ones_like(t) * t)), (x.abs() + 1,)),
    ]
    return cases[:2] if quick else cases


def kernel_cases():
    """Where polyphase's GPU time goes: the native op vs the polyphase conv alone vs a 1x1 conv (MACs, GPU ms)."""
    c, h = 32, 32
    x = torch.randn(1, c, h, h)
    w2, w1 = torch.randn(4 * c, c, 2, 2), torch.randn(4 * c, c, 1, 1)
    return [("TRANSPOSE_CONV k=4 s=2, 32 -> 32 ch (native)", nn.ConvTranspose2d(c, c, 4, 2, 1), (x,),
             c * c * 16 * h * h),
            ("CONV_2D 2x2, 32 -> 128 ch (the polyphase conv, no interleave)",
             Fn(lambda t: F.conv2d(t, w2, padding=1)), (x,), 4 * c * c * 4 * (h + 1) ** 2),
            ("CONV_2D 1x1, 32 -> 128 ch", Fn(lambda t: F.conv2d(t, w1)), (x,), 4 * c * c * h * h)]


def measure(module, args, path: Path, accelerator: str, repeats: int) -> dict:
    key = "serving_default"
    run = compile_and_run(path, {key: signature_inputs(args)}, accelerator=accelerator, repeats=repeats)
    if not run.ok:
        status = "rejected" if run.status == "ops_rejected" else run.status
        return {"status": status, "ms": None, "adapter": run.gpu.adapter}
    return {"status": "ok", "ms": 1000.0 * run.run_s[key], "adapter": run.gpu.adapter}


def convert(module, args, path: Path) -> str | None:
    try:
        export_tflite(module.eval(), args, path)
        return None
    except Exception as e:  # noqa: BLE001 - the original may not convert: that is a result
        return f"{type(e).__name__}"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="tiny sizes, few cases (smoke test)")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--record", action="store_true",
                        help=f"write the JSON to {RECORD.relative_to(ROOT)}, from which scripts/gen_docs.py "
                             "generates the toolkit reference's benchmark block")
    parser.add_argument("--json", type=Path, default=ROOT / "artifacts" / "bench_rewrites.json")
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    records, adapter = [], None
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for label, forms, inputs, macs in conv_cases(args.quick):
            res = {}
            for form, module in forms.items():
                path = tmp / f"{len(records)}_{form}.tflite"
                err = convert(module, inputs, path)
                res[form] = {"cpu": measure(module, inputs, path, "cpu", args.repeats) if not err else
                             {"status": err, "ms": None},
                             "gpu": measure(module, inputs, path, "gpu", args.repeats) if not err else
                             {"status": err, "ms": None}}
                adapter = adapter or res[form]["gpu"].get("adapter")
            records.append({"kind": "conv", "case": label, "macs": macs, "results": res})
        for label, orig, rewritten, inputs in other_cases(args.quick):
            res = {}
            for form, module in (("original", orig), ("rewrite", rewritten)):
                path = tmp / f"{len(records)}_{form}.tflite"
                err = convert(module, inputs, path)
                res[form] = {
                    acc: (
                        measure(module, inputs, path, acc, args.repeats)
                        if not err
                        else {"status": f"no convert ({err})", "ms": None}
                    )
                    for acc in ("cpu", "gpu")
                }
            records.append({"kind": "other", "case": label, "results": res})
        for i, (label, module, inputs, macs) in enumerate([] if args.quick else kernel_cases()):
            path = tmp / f"kernel_{i}.tflite"
            err = convert(module, inputs, path)
            r = measure(module, inputs, path, "gpu", args.repeats) if not err else {"status": err, "ms": None}
            records.append({"kind": "kernel", "case": label, "macs": macs, "results": {"gpu": r}})
    import ai_edge_litert  # noqa: F401  (version for the label)
    from importlib.metadata import version

    machine = (
        f"GPU: {adapter or 'none'} (software Vulkan), ai-edge-litert {version('ai-edge-litert')}; "
        f"CPU: {os.cpu_count()}-core {platform.machine()}; load average at the end "
        f"{os.getloadavg()[0]:.1f}; median of {args.repeats} runs"
    )
    data = {"command": "python scripts/bench_rewrites.py" + (" --quick" if args.quick else ""), "machine": machine,
            "cases": records}
    print(render_bench(data))
    out = RECORD if args.record else args.json
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data, indent=1, default=str) + "\n")
    print(f"wrote {out}" + (" (python scripts/gen_docs.py refreshes the toolkit reference)" if args.record else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
