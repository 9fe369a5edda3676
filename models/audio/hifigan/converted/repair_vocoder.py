"""Can the fp16 waveform be repaired? Exact split-K rewrites and fp16/fp32 precision plans, side by side.

`precision_vocoder.py` shows where fp16 loses the waveform (the two high-rate stages; fp32 is exact). This script
tries the toolkit's two answers on the same window of real speech and records what each buys and costs:

* **split-K** (`litert_gpu_toolkit.rewrites.fp16_degraded.patch_split_k`, exact up to the order of fp32 additions):
  every conv reducing at least `min_dot` products per output is computed as partial convs over channel slices of at
  most `max_dot` products, summed. One graph, all fp16.
* **a precision plan** (`litert_gpu_toolkit.plan_precision`): the generator cut after one upsampler into two graphs,
  each strictly on the GPU, chained at run time: `plan:CUT` runs the graph after the cut in fp32 (the high-rate
  stages, where the precision study sees the SNR fall), `plan:CUT:first` the graph before it (the low-rate stages,
  whose fp16 rounding the later stages amplify).

Each variant: the fp16 GPU output vs torch in fp32 (correlation, SNR), the op count, and the median GPU run time
measured in the same run as the plain graph's (the ratio is what to read; this GPU is software). Writes
repair.json row by row (a re-run skips rows already there; --fresh starts over).

    python repair_vocoder.py                       # 32 mel frames from frame 100, every variant
    python repair_vocoder.py --variants plain plan:ups.1:first   # repair.json's rows, one at a time
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

# the plans first (each ~10 minutes on a 2-core machine with the software GPU); split-K last: its graphs hold many
# more convs (split_k:1025:256: 1229 ops, about 5 minutes; one GPU run of split_k:129:128 did not finish in 50
# minutes on that machine)
VARIANTS = ("plain", "plan:ups.3", "plan:ups.2", "plan:ups.0:first", "plan:ups.1:first", "plan:ups.2:first",
            "plan:ups.3:first", "split_k:1025:256", "split_k:513:128", "split_k:129:128", "split_k:33:32")


def _median_ms(run) -> float:
    return 1e3 * statistics.median(run.run_s.values())


def _one_graph(generator, x, ref, path: Path, repeats: int) -> dict:
    from litert_gpu_toolkit.lowering.export import gpu_vs_torch
    from litert_gpu_toolkit.core.metrics import compare
    from litert_gpu_toolkit.runtime.compiled import compile_and_run

    result = gpu_vs_torch(generator, (x,), path)
    if not result.ok:
        return {"status": result.run.status, "error": result.summary()[:300]}
    # timed on its own: the first run above includes the fp32 reference work of gpu_vs_torch
    feed = {"serving_default": {"args_0": x.numpy()}}
    timed = compile_and_run(path, feed, accelerator="gpu", repeats=repeats)
    out = next(iter(result.run.outputs["serving_default"].values())).reshape(ref.shape)
    c = compare(out, ref)
    return {"status": "ok", "corr": c.corr, "snr_db": c.snr_db, "ops": result.info.num_ops,
            "ms": _median_ms(timed) if timed.ok else None, "device": result.run.gpu.adapter}


def _plain_side_by_side(x, ref, rewritten: Path, tmp: Path, repeats: int) -> dict:
    """The plain fp16 graph's corr, and both graphs' median GPU ms over `repeats` alternating rounds."""
    from export_vocoder import rewrite_upsamplers
    from hifigan import load_generator
    from litert_gpu_toolkit.lowering.export import export_tflite
    from litert_gpu_toolkit.core.metrics import compare
    from litert_gpu_toolkit.runtime.compiled import compile_and_run

    plain = load_generator()
    rewrite_upsamplers(plain, "polyphase")
    path = export_tflite(plain.eval(), (x,), tmp / "plain_side.tflite")
    feed = {"serving_default": {"args_0": x.numpy()}}
    ms: dict[str, list[float]] = {"plain": [], "rewritten": []}
    corr = None
    for _ in range(repeats):
        for label, p in (("plain", path), ("rewritten", rewritten)):
            run = compile_and_run(p, feed, accelerator="gpu", repeats=1)
            if not run.ok:
                return {"status": run.status}
            ms[label].append(_median_ms(run))
            if label == "plain" and corr is None:
                out = next(iter(run.outputs["serving_default"].values())).reshape(ref.shape)
                corr = compare(out, ref).corr
    ratios = [r / p for p, r in zip(ms["plain"], ms["rewritten"])]
    return {"corr": corr, "ms": statistics.median(ms["plain"]), "ms_rewritten": statistics.median(ms["rewritten"]),
            "ratio": statistics.median(ratios)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS),
                        help="plain | split_k:MIN_DOT:MAX_DOT | plan:CUT (cut after that module; the rest fp32) "
                             "| plan:CUT:first (the part up to the cut fp32, the rest fp16)")
    parser.add_argument("--frames", type=int, default=32, help="mel frames per graph")
    parser.add_argument("--start", type=int, default=100, help="first mel frame of the window (speech, not silence)")
    parser.add_argument("--repeats", type=int, default=3, help="GPU runs per graph for the median latency")
    parser.add_argument("--ref", type=Path, default=HERE / "artifacts" / "reference.npz",
                        help="the reference from dump_vocoder_ref.py (default: artifacts/reference.npz)")
    parser.add_argument("--out", type=Path, default=HERE / "repair.json",
                        help="rows written here (default: repair.json beside this script)")
    parser.add_argument("--fresh", action="store_true", help="ignore rows already in --out")
    args = parser.parse_args(argv)
    for v in args.variants:
        kind = v.split(":")[0]
        if kind not in ("plain", "split_k", "plan") or (kind == "split_k" and len(v.split(":")) != 3) or \
                (kind == "plan" and (len(v.split(":")) not in (2, 3) or v.split(":")[2:] not in ([], ["first"]))):
            parser.error(f"unknown variant {v!r} (plain, split_k:MIN_DOT:MAX_DOT, plan:CUT or plan:CUT:first)")
    if not args.ref.is_file():
        parser.error(f"no reference at {args.ref}: run dump_vocoder_ref.py first")

    import numpy as np
    import torch

    from export_vocoder import rewrite_upsamplers
    from hifigan import load_generator
    from litert_gpu_toolkit import plan_precision
    from litert_gpu_toolkit.rewrites.fp16_degraded import patch_split_k

    mel = np.load(args.ref)["mel"][:, args.start:args.start + args.frames]
    if mel.shape[1] != args.frames:
        parser.error(f"the reference mel has no {args.frames} frames from frame {args.start}")
    x = torch.from_numpy(np.ascontiguousarray(mel))[None]
    done = {} if args.fresh or not args.out.is_file() else json.loads(args.out.read_text()).get("rows", {})
    header = {"frames": args.frames, "start_frame": args.start, "repeats": args.repeats,
              "command": " ".join(["repair_vocoder.py", *(argv if argv is not None else sys.argv[1:])])}
    with tempfile.TemporaryDirectory(prefix="hifigan-repair-") as tmp:
        for v in args.variants:
            if v in done:
                print(f"{v}: already in {args.out.name}")
                continue
            generator = load_generator()
            rewrite_upsamplers(generator, "polyphase")
            generator.eval()
            with torch.no_grad():
                ref = generator(x).numpy()
            start = time.perf_counter()
            kind, *params = v.split(":")
            if kind == "plain":
                row = _one_graph(generator, x, ref, Path(tmp) / "plain.tflite", args.repeats)
            elif kind == "split_k":
                changes = patch_split_k(generator, min_dot=int(params[0]), max_dot=int(params[1]))
                with torch.no_grad():   # exactness in torch: only the order of fp32 additions changed
                    torch_gap = float(np.abs(generator(x).numpy() - ref).max())
                path = Path(tmp) / f"{kind}_{params[1]}.tflite"
                row = _one_graph(generator, x, ref, path, args.repeats)
                row.update(layers_split=len(changes), torch_max_abs_diff=torch_gap)
                if row["status"] == "ok":        # the plain fp16 graph timed in this run, alternating with it
                    row["whole_fp16"] = _plain_side_by_side(x, ref, path, Path(tmp), args.repeats)
            else:
                plan = plan_precision(generator, (x,), cuts=[params[0]], fp32=[0] if params[1:] == ["first"] else [1],
                                      out_dir=Path(tmp) / v.replace(":", "_"))
                m = plan.measure((x,), generator, repeats=args.repeats)
                row = {"status": "ok", "corr": m.corr_chain, "snr_db": m.snr_chain_db, "ms": m.ms_chain,
                       "ms_graphs": m.ms_graphs, "ops": [g.ops for g in plan.graphs],
                       "whole_fp16": {"corr": m.corr_fp16, "ms": m.ms_fp16},
                       "whole_fp32": {"corr": m.corr_fp32, "ms": m.ms_fp32}, "device": m.device,
                       "fp32_graphs": [i for i, g in enumerate(plan.graphs) if g.fp32]}
            row["seconds"] = round(time.perf_counter() - start, 1)
            print(v, json.dumps(row), flush=True)
            done[v] = row
            args.out.write_text(json.dumps({**header, "rows": done}, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
