#!/usr/bin/env python
"""The known runtime walls as a suite: one tiny graph per wall, run under every ai-edge-litert version given.

    .venv/bin/python scripts/runtime_walls.py --runtime 2.1.3 --runtime 2.1.5 --runtime 2.2.0   # print the table
    .venv/bin/python scripts/runtime_walls.py --runtime all --record                # + the data file and the doc
    .venv/bin/python scripts/runtime_walls.py --only relu_0_to_1,broadcast_to --runtime 2.1.4

Each wall is a few lines of torch converted plain (litert-torch, no rewrite) or, where today's converter no longer
emits the op (a runtime BROADCAST_TO, a bare RELU_0_TO_1), a one-op flatbuffer. Per version (each in its side
environment, `runtime.versions`) the graph is compiled on the CPU and strictly GPU-only, run on the same seeded
inputs, and classed:
  accepted   strict GPU compile, fp16 output within corr 0.999 of that version's CPU (an output of fewer than 8
             values: within 1% of its largest magnitude);
  wrong      strict GPU compile, fp16 output outside it (or non-finite where the CPU is finite);
  rejected   the strict compile refused an op (the delegate's reason is kept);
  error      anything else (a crash, a failed CPU run).
--record merges into utilities/litert_gpu_toolkit/lint/runtime_walls.json (the lint reads it: `lint --runtime V`)
and regenerates docs/runtime-walls.md from it (scripts/gen_docs.py). Device: whatever GPU the runtime finds --
llvmpipe (software Vulkan) here, a proxy for a phone GPU: a wall marked "phone only" in the spec's table can show
here as accepted.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "utilities"))

from litert_gpu_toolkit.core.atomic_file import write_text_atomic  # noqa: E402
from litert_gpu_toolkit.lint.runtime_walls import DATA as RECORD  # noqa: E402

DOC = ROOT / "docs" / "runtime-walls.md"
SHAPE = (1, 8, 8, 4)


@dataclass(frozen=True)
class Wall:
    name: str
    symptom: str          # the spec table's symptom id
    upstream: str         # the runtime's tracker, where there is a reproducer ("" when none)
    what: str             # the graph, in words
    build: Callable[[Path], Path]     # writes the .tflite under the folder given, returns its path


def _one_op(op: str, inputs, outputs, **kw) -> Callable[[Path], Path]:
    def build(folder: Path) -> Path:
        from litert_gpu_toolkit.runtime.tiny_models import single_op_model_bytes

        path = folder / f"{op.lower()}.tflite"
        path.write_bytes(single_op_model_bytes(op, inputs, outputs, **kw))
        return path
    return build


def _torch(make_module, *shapes) -> Callable[[Path], Path]:
    def build(folder: Path) -> Path:
        import torch

        from litert_gpu_toolkit.lowering.export import export_tflite

        torch.manual_seed(0)
        module = make_module().eval()
        path = folder / f"{type(module).__name__.lower()}.tflite"
        return export_tflite(module, tuple(torch.randn(*s) for s in shapes), path)
    return build


def _modules():
    """The torch walls' modules, defined on first use (this script imports torch only when it builds)."""
    import torch

    class Square(torch.nn.Module):            # MUL(x, x): one tensor as both inputs
        def forward(self, x):
            return x * x

    class Rank5Add(torch.nn.Module):          # an elementwise op on rank-5 tensors
        def forward(self, x):
            return x.reshape(1, 2, 4, 8, 4) + 1.0

    class WhereMask(torch.nn.Module):         # GREATER -> bool -> SELECT_V2
        def forward(self, x):
            return torch.where(x > 0, x, torch.zeros_like(x))

    class CumSum(torch.nn.Module):
        def forward(self, x):
            return torch.cumsum(x, dim=-1)

    class Flip(torch.nn.Module):              # REVERSE_V2
        def forward(self, x):
            return torch.flip(x, dims=[-1])

    class GatherRows(torch.nn.Module):        # rows picked by indices computed at run time
        def forward(self, x):
            ids = (x[0, 0, 0, :3] * 0).to(torch.int32) + torch.tensor([0, 2, 5], dtype=torch.int32)
            return x[0, ids]

    class Pad3(torch.nn.Module):              # a rank-3 PAD (LiteRT 9272: rows shifted on some runtimes)
        def forward(self, x):
            return torch.nn.functional.pad(x.reshape(1, 64, 4), (0, 0, 1, 2))

    class StateAdd(torch.nn.Module):          # an ADD result returned and consumed further (LiteRT 8599)
        def forward(self, x):
            s = x + x.flip(-1)
            return s, s * 0.5 + 1.0

    class ReturnedFc(torch.nn.Module):        # a FULLY_CONNECTED result returned and fed to a constant op
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(4, 4)

        def forward(self, x):
            y = self.fc(x.reshape(1, 64, 4))
            return y, y * 2.0

    class SumRows(torch.nn.Module):           # a long SUM (LiteRT 9249 reports a NaN on phones)
        def forward(self, x):
            return x.reshape(1, 256).sum(dim=-1, keepdim=True)

    return {m.__name__: m for m in (Square, Rank5Add, WhereMask, CumSum, Flip, GatherRows, Pad3, StateAdd, ReturnedFc,
                                    SumRows)}


def _t(name: str, *shapes):
    return _torch(lambda: _modules()[name](), *shapes)


WALLS: tuple[Wall, ...] = (
    Wall("relu_0_to_1", "relu_0_to_1", "google-ai-edge/LiteRT#8598", "a bare RELU_0_TO_1 (hard-sigmoid's op)",
         _one_op("RELU_0_TO_1", [("x", SHAPE, None)], [("y", SHAPE)])),
    Wall("broadcast_to", "broadcast_to", "google-ai-edge/LiteRT#9191", "BROADCAST_TO of a runtime [1,1,8,4] to "
         "[1,8,8,4]", _one_op("BROADCAST_TO", [("x", (1, 1, 8, 4), None), ("shape", (4,), np.array(SHAPE, np.int32))],
                              [("y", SHAPE)], op_version=2)),
    Wall("identical_inputs", "identical_or_constant_inputs", "google-ai-edge/LiteRT#9192", "MUL(x, x)",
         _t("Square", SHAPE)),
    Wall("rank5_elementwise", "rank_gt_4", "", "ADD on a rank-5 tensor", _t("Rank5Add", SHAPE)),
    Wall("select_v2_bool", "select", "", "torch.where on a bool mask (GREATER, SELECT_V2)", _t("WhereMask", SHAPE)),
    Wall("cumsum", "cumsum", "", "CUMSUM along the last axis", _t("CumSum", SHAPE)),
    Wall("reverse_v2", "reverse_v2", "", "REVERSE_V2 (torch.flip) on the last axis", _t("Flip", SHAPE)),
    Wall("gather", "gather_nd", "", "rows gathered by runtime indices", _t("GatherRows", SHAPE)),
    Wall("pad_rank3", "constant_operand", "google-ai-edge/LiteRT#9272", "PAD of a rank-3 tensor on its middle axis",
         _t("Pad3", SHAPE)),
    Wall("output_aliasing", "output_aliasing", "google-ai-edge/LiteRT#8599", "ADD returned and consumed further",
         _t("StateAdd", SHAPE)),
    Wall("returned_fc", "output_aliasing", "", "FULLY_CONNECTED returned and fed to MUL by a constant",
         _t("ReturnedFc", SHAPE)),
    Wall("long_sum", "long_reduction", "google-ai-edge/LiteRT#9249", "SUM over 256 values", _t("SumRows", SHAPE)),
)


def _feeds(path: Path) -> dict:
    from litert_gpu_toolkit.core.inputs import make_inputs
    from litert_gpu_toolkit.core.model_info import read_model_info

    return make_inputs(read_model_info(path), seed=0)[0]


def measure(wall: Wall, path: Path, version: str) -> dict:
    """One wall under one version: its class, the delegate's reason or the fp16 corr, and the fp32 run's."""
    from litert_gpu_toolkit.runtime.compiled import compile_and_run

    feeds = _feeds(path)
    cpu = compile_and_run(path, feeds, accelerator="cpu", runtime=version)
    gpu = compile_and_run(path, feeds, accelerator="gpu", runtime=version)
    entry = {"adapter": gpu.gpu.adapter}
    if not cpu.ok:
        return {**entry, "class": "error", "why": f"CPU: {cpu.error}"[:200]}
    if gpu.status == "ops_rejected":
        return {**entry, "class": "rejected",
                "why": "; ".join(f"{r.op}: {r.reason}" for r in gpu.gpu.rejected)[:200] or (gpu.error or "")[:200]}
    if not gpu.ok:
        return {**entry, "class": "error", "why": f"GPU {gpu.status}: {gpu.error}"[:200]}
    worst, why = 1.0, []
    for sig, outs in cpu.outputs.items():
        for name, want in outs.items():
            got, want = np.asarray(gpu.outputs[sig][name], np.float64), np.asarray(want, np.float64)
            ok, text = _agrees(got, want)
            why.append(f"{name}: {text}")
            worst = min(worst, 1.0 if ok else 0.0)
    return {**entry, "class": "accepted" if worst == 1.0 else "wrong", "why": "; ".join(why)[:200]}


def _agrees(got: np.ndarray, want: np.ndarray) -> tuple[bool, str]:
    """fp16 GPU output vs the CPU: corr >= 0.999 for an output of 8 values or more; below that (a corr of one
    value means nothing) every value within 1% of the largest reference magnitude. Non-finite values where the CPU
    is finite, or an all-zero output where it is not, fail."""
    if not np.isfinite(got[np.isfinite(want)]).all():
        return False, "non-finite where the CPU is finite"
    if not got.any() and want.any():
        return False, "all zeros"
    if got.size < 8:
        err = float(np.max(np.abs(got - want))) / max(float(np.max(np.abs(want))), 1e-12)
        return err <= 0.01, f"max error {err:.2%} of the largest value"
    corr = float(np.corrcoef(got.ravel(), want.ravel())[0, 1]) if got.std() > 0 and want.std() > 0 else float("nan")
    return bool(corr >= 0.999), f"fp16 corr vs CPU {corr:.4f}"


def run(walls, versions: list[str]) -> dict:
    from litert_gpu_toolkit.runtime.versions import installed_version

    results: dict = {}
    with tempfile.TemporaryDirectory(prefix="runtime-walls-") as tmp:
        for wall in walls:
            folder = Path(tmp) / wall.name
            folder.mkdir()
            try:
                path = wall.build(folder)
            except Exception as e:                     # noqa: BLE001 - a wall that no longer builds is a result
                why = f"build: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:200]
                results[wall.name] = {v: {"class": "error", "why": why} for v in versions}
                print(f"  {wall.name:18s} {why}", flush=True)
                continue
            results[wall.name] = {}
            for v in versions:
                results[wall.name][v] = measure(wall, path, None if v == installed_version() else v)
                print(f"  {wall.name:18s} {v:8s} {results[wall.name][v]['class']:9s} {results[wall.name][v]['why']}",
                      flush=True)
    return results


def _commit() -> str:
    """HEAD, "+dirty" when a tracked file differs from it (this run's own outputs aside)."""
    def git(*a):
        return subprocess.run(["git", *a], cwd=ROOT, capture_output=True, text=True, timeout=60).stdout.strip()

    own = {RECORD.relative_to(ROOT).as_posix(), DOC.relative_to(ROOT).as_posix()}
    dirty = [ln[3:] for ln in git("status", "--porcelain", "--untracked-files=no").splitlines() if ln[3:] not in own]
    return git("rev-parse", "--short", "HEAD") + ("+dirty" if dirty else "")


def main(argv=None) -> int:
    from litert_gpu_toolkit.runtime.versions import RuntimeVersionError, installed_version, prepare, resolve

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runtime", action="append", default=[], metavar="VERSION",
                   help="a version to run under (repeatable; 'all'); the installed one always runs")
    p.add_argument("--only", default="", help="comma-separated wall names (default: every wall)")
    p.add_argument("--record", action="store_true", help=f"write {RECORD.relative_to(ROOT)} and "
                                                        f"{DOC.relative_to(ROOT)}")
    args = p.parse_args(argv)
    names = [n for n in args.only.split(",") if n]
    unknown = sorted(set(names) - {w.name for w in WALLS})
    if unknown:
        p.error(f"unknown walls: {', '.join(unknown)}; known: {', '.join(w.name for w in WALLS)}")
    walls = [w for w in WALLS if not names or w.name in names]
    try:
        requested = resolve(args.runtime)
    except RuntimeVersionError as e:
        p.error(str(e))
    versions, skipped = [installed_version()], {}
    for v in requested:
        if v in versions:
            continue
        try:
            prepare(v, print)
            versions.append(v)
        except RuntimeVersionError as e:
            if "all" not in args.runtime:
                p.error(str(e))
            skipped[v] = str(e)
    from litert_gpu_toolkit.runtime.versions import parse_version

    versions.sort(key=parse_version)
    results = run(walls, versions)
    if not args.record:
        return 0
    adapters = sorted({e.get("adapter") for r in results.values() for e in r.values() if e.get("adapter")})
    old = json.loads(RECORD.read_text()) if RECORD.exists() else {"walls": {}}
    data = {"versions": sorted(set(old.get("versions", [])) | set(versions), key=parse_version),
            "device": f"{', '.join(adapters) or 'no GPU'} (software Vulkan where llvmpipe)",
            "date": f"{dt.datetime.now(dt.timezone.utc):%Y-%m-%d}", "toolkit_commit": _commit(),
            "command": "scripts/runtime_walls.py " + " ".join(argv if argv is not None else sys.argv[1:]),
            "skipped": {**old.get("skipped", {}), **skipped},
            "walls": old.get("walls", {})}
    for wall in walls:
        merged = {**(data["walls"].get(wall.name, {}).get("results") or {}), **results[wall.name]}
        data["walls"][wall.name] = {"symptom": wall.symptom, "upstream": wall.upstream, "what": wall.what,
                                    "results": merged}
    write_text_atomic(RECORD, json.dumps(data, indent=1, sort_keys=True) + "\n")
    subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_docs.py")], check=True)   # docs/runtime-walls.md
    print(f"wrote {RECORD.relative_to(ROOT)} and {DOC.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
