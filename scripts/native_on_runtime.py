#!/usr/bin/env python
"""Recipe graphs through the native runner (LiteRT's C API) linked against another ai-edge-litert version.

    .venv/bin/python scripts/native_on_runtime.py --runtime 2.2.0 --repeat 3 \
        models/vision/mobilenet_v2/converted/artifacts/classifier.tflite

The Python API of some older versions fails to read an output buffer after a GPU run that completed
(docs/runtime-walls.md). This asks whether a C / C++ app on that version meets the same: the runner is built
against the version's libLiteRt.so (`build_host_runner(runtime=...)`), each graph runs `--repeat` times strictly
GPU-only on seeded random inputs, and each run is compared with the same runner on that version's CPU. One line
per run: status, residency, the lowest output correlation, the error. Device: the GPU the runtime finds
(llvmpipe, software Vulkan, here).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "utilities"))


def lowest_corr(run, ref, key: str) -> float | None:
    """The lowest output correlation of `run` against `ref` (core.metrics.compare), None unless both ran."""
    from litert_gpu_toolkit.core.metrics import compare

    if not (run.ok and ref.ok):
        return None
    return min(compare(got, ref.outputs[key][name]).corr for name, got in run.outputs[key].items())


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("graphs", nargs="+", type=Path, help="the .tflite files")
    p.add_argument("--runtime", action="append", required=True, metavar="VERSION",
                   help="ai-edge-litert version to link the runner against (repeatable)")
    p.add_argument("--repeat", type=int, default=3, help="GPU runs per graph and version, each its own process "
                                                         "(default 3: the failure this looks for is intermittent)")
    p.add_argument("--timeout", type=float, default=900.0, help="seconds per run (default 900)")
    args = p.parse_args()
    missing = [str(g) for g in args.graphs if not g.is_file()]
    if missing or args.repeat < 1:
        p.error(f"no such file: {', '.join(missing)}" if missing else "--repeat must be >= 1")

    from litert_gpu_toolkit.core.inputs import make_inputs
    from litert_gpu_toolkit.core.model_info import read_model_info
    from litert_gpu_toolkit.phone.native import NativeRunnerError, build_host_runner, run_native
    from litert_gpu_toolkit.runtime.residency import residency
    from litert_gpu_toolkit.runtime.versions import RuntimeVersionError

    for version in args.runtime:
        try:
            runner = build_host_runner(runtime=version)
        except (NativeRunnerError, RuntimeVersionError) as exc:
            print(f"{version}: cannot build the runner: {exc}")
            continue
        for graph in args.graphs:
            info = read_model_info(graph)
            feeds = make_inputs(info, None, seed=0)[0]
            key = next(iter(feeds))
            ref = run_native(graph, {key: feeds[key]}, accelerator="cpu", runner=runner, timeout=args.timeout)
            ok = 0
            for i in range(args.repeat):
                run = run_native(graph, {key: feeds[key]}, runner=runner, timeout=args.timeout)
                ok += run.ok
                corr = lowest_corr(run, ref, key)
                print(f"{version} {graph.name} run {i + 1}: {run.status}; {residency(info, run).line}; "
                      f"lowest corr vs its CPU {'-' if corr is None else f'{corr:.6f}'}"
                      + (f"; {run.error[:160]}" if run.error else ""), flush=True)
            print(f"{version} {graph.name}: {ok}/{args.repeat} GPU runs completed", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
