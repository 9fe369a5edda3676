"""Mixed precision as a plan: cut a model at module boundaries into graphs, each strictly on the GPU, run the
fp16-sensitive ones in fp32, chain them at run time, and measure what the chain costs.

When fp16 loses too much and no exact rewrite wins it back (HiFi-GAN's high-rate stages, where a small
waveform is made of large partial sums), the usual answer is "compile the whole model fp32", which on a
phone doubles memory traffic everywhere. A plan keeps fp16 where it is harmless:

    plan = plan_precision(model, (mel,), cuts=["ups.2"], fp32=[1], out_dir="artifacts/split")
    result = plan.run({"args_0": mel.numpy()})          # graph 0 in fp16 -> graph 1 in fp32
    print(plan.measure((mel,)).summary())              # corr vs torch and latency: chain vs fp16 vs fp32

A cut is a module path. Graph k computes the model from the output of cut k-1 (fed as its first input)
to the output of cut k (returned); the model's own inputs are fed to every graph too, so a graph that needs
a tensor from before its cut (a skip connection) recomputes it from them -- still exact, but that work is
done twice (`PlanGraph.ops` shows it): cut where one tensor carries everything (conv_pre -> stages ->
head). `plan_precision` checks in torch that the chained pieces reproduce the model bit for bit (the same
ops on the same values) and refuses a plan that does not. Each graph is its own strict GPU compile:
a plan is several GPU dispatches with a host round trip between them, which `measure` reports as it is.
Opt-in; nothing in `convert_for_gpu` makes a plan by itself.
"""
from __future__ import annotations

import json
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np

from ..core.metrics import Comparison, compare
from ..runtime.compiled import compile_and_run


class CutError(ValueError):
    """The cuts do not split the model into a chain (the message says which and why)."""


def _piece(model, start: str | None, end: str | None):
    """The model from the output of module `start` (its first input; None: the model's inputs) to the output
    of module `end` (None: the model's first output tensor)."""
    import torch

    from ..core.outputs import flat_tensors

    class Piece(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, *args):
            handles, captured = [], []
            if start is not None:
                fed, args = args[0], args[1:]
                handles.append(model.get_submodule(start).register_forward_hook(lambda *_: fed))
            if end is not None:
                def grab(_m, _i, out) -> None:
                    if not captured:
                        captured.append(flat_tensors(out)[0])
                handles.append(model.get_submodule(end).register_forward_hook(grab))
            try:
                out = self.model(*args)
            finally:
                for h in handles:
                    h.remove()
            return captured[0] if end is not None else flat_tensors(out)[0]

    return Piece().eval()


@dataclass
class PlanGraph:
    path: str                   # the .tflite
    start: str | None           # cut it starts from (None: the model's inputs)
    end: str | None             # cut it ends at (None: the model's output)
    fp32: bool                  # compiled with enforce_f32
    ops: int = 0


@dataclass
class PlanMeasurement:
    corr_chain: float
    snr_chain_db: float
    corr_fp16: float
    corr_fp32: float
    ms_chain: float                       # sum of the graphs' median run times
    ms_graphs: list[float] = field(default_factory=list)
    ms_fp16: float = float("nan")         # the whole model as one graph, fp16
    ms_fp32: float = float("nan")         # the whole model as one graph, fp32
    device: str = ""

    def summary(self) -> str:
        return (f"plan: corr {self.corr_chain:.6f} (SNR {self.snr_chain_db:.1f} dB) vs torch; whole model fp16 corr "
                f"{self.corr_fp16:.6f}, fp32 corr {self.corr_fp32:.6f}\n"
                f"latency (median run, {self.device}): chain {self.ms_chain:.1f} ms "
                f"({' + '.join(f'{m:.1f}' for m in self.ms_graphs)}), one graph fp16 {self.ms_fp16:.1f} ms, "
                f"fp32 {self.ms_fp32:.1f} ms; chain / fp16 = {self.ms_chain / self.ms_fp16:.2f}x, "
                f"chain / fp32 = {self.ms_chain / self.ms_fp32:.2f}x")


@dataclass
class PrecisionPlan:
    graphs: list[PlanGraph]
    whole: str | None = None              # the whole model as one graph (for `measure`)

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.write_text(json.dumps({"graphs": [asdict(g) for g in self.graphs], "whole": self.whole}, indent=1))
        return path

    @classmethod
    def load(cls, path: str | Path) -> "PrecisionPlan":
        """A saved plan; graph paths that are relative are read from the plan file's folder (a plan moves with it)."""
        path = Path(path)
        data = json.loads(path.read_text())
        graphs = [PlanGraph(**g) for g in data["graphs"]]
        for g in graphs:
            g.path = str(path.parent / g.path) if not Path(g.path).is_absolute() else g.path
        whole = data.get("whole")
        return cls(graphs, str(path.parent / whole) if whole and not Path(whole).is_absolute() else whole)

    def run(self, inputs: dict[str, np.ndarray], *, repeats: int = 1, timeout: float = 600.0):
        """Run the chain: each graph strictly on the GPU in its precision, its output fed to the next.
        Returns (output, [RunResult per graph]); raises RuntimeError naming the graph that failed."""
        runs, fed = [], None
        for i, g in enumerate(self.graphs):
            feed = dict(inputs) if fed is None else {"args_0": fed, **{f"args_{j + 1}": inputs[f"args_{j}"]
                                                                       for j in range(len(inputs))}}
            run = compile_and_run(g.path, {"serving_default": feed}, accelerator="gpu", enforce_f32=g.fp32,
                                  repeats=repeats, timeout=timeout)
            if not run.ok:
                raise RuntimeError(f"graph {i} ({Path(g.path).name}, {'fp32' if g.fp32 else 'fp16'}): {run.status}: "
                                   f"{(run.error or '')[:300]}")
            runs.append(run)
            fed = next(iter(run.outputs["serving_default"].values()))
        return fed, runs

    def measure(self, example_inputs: Sequence, model=None, *, repeats: int = 5) -> PlanMeasurement:
        """Side by side in one call: the chain, and the whole model as one graph in fp16 and in fp32 -- corr vs
        torch (from `model`, else the fp32 whole graph) and median run latency of each."""
        import torch

        from ..lowering.export import signature_inputs

        feed = signature_inputs(example_inputs)
        out, runs = self.run(feed, repeats=repeats)
        whole = {}
        for f32 in (False, True):
            r = compile_and_run(self.whole, {"serving_default": feed}, accelerator="gpu", enforce_f32=f32,
                                repeats=repeats)
            if not r.ok:
                raise RuntimeError(f"the whole graph ({'fp32' if f32 else 'fp16'}): {r.status}")
            whole[f32] = r
        if model is not None:
            with torch.no_grad():
                from ..core.outputs import flat_tensors

                ref = flat_tensors(model(*example_inputs))[0].float().numpy()
        else:
            ref = next(iter(whole[True].outputs["serving_default"].values()))
        chain: Comparison = compare(out, ref)
        one = {f32: compare(next(iter(r.outputs["serving_default"].values())), ref) for f32, r in whole.items()}
        ms = [1e3 * statistics.median(r.run_s.values()) for r in runs]
        adapter = (runs[0].gpu.adapter or "GPU").split(" (")[0]
        return PlanMeasurement(chain.corr, chain.snr_db, one[False].corr, one[True].corr, sum(ms), ms,
                               1e3 * statistics.median(whole[False].run_s.values()),
                               1e3 * statistics.median(whole[True].run_s.values()), adapter)


def plan_precision(model, example_inputs: Sequence, cuts: Sequence[str], fp32: Sequence[int],
                   out_dir: str | Path, *, export_whole: bool = True) -> PrecisionPlan:
    """Cut `model` after each module in `cuts` (in execution order) into len(cuts) + 1 graphs under `out_dir`;
    graph k is compiled fp32 when k is in `fp32`. Checks in torch that the chain equals the model bit for bit
    (CutError otherwise, e.g. a model whose forward is not deterministic)."""
    import torch

    from ..lowering.export import export_tflite
    from ..core.model_info import read_model_info
    from ..core.outputs import flat_tensors

    model = model.eval()
    example_inputs = tuple(example_inputs)
    for c in cuts:
        try:
            model.get_submodule(c)
        except AttributeError:
            raise CutError(f"no module {c!r} in the model") from None
    bad = [k for k in fp32 if not 0 <= k <= len(cuts)]
    if bad:
        raise CutError(f"fp32 graph numbers {bad} out of range 0..{len(cuts)}")
    bounds = [None, *cuts, None]
    pieces = [_piece(model, a, b) for a, b in zip(bounds, bounds[1:])]
    with torch.no_grad():
        expected = flat_tensors(model(*example_inputs))[0]
        fed, feeds = None, []
        for p in pieces:
            args = example_inputs if fed is None else (fed, *example_inputs)
            feeds.append(args)
            fed = p(*args)
    if not torch.equal(fed, expected):
        gap = float((fed - expected).abs().max())
        raise CutError(f"the chained pieces differ from the model (max |diff| {gap:.3g}); a plan needs a model "
                       "whose forward gives the same output for the same inputs")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    graphs = []
    for i, (p, args) in enumerate(zip(pieces, feeds)):
        path = export_tflite(p, args, out_dir / f"part{i}.tflite")
        graphs.append(PlanGraph(str(path), bounds[i], bounds[i + 1], i in set(fp32),
                                read_model_info(path).num_ops))
    whole = str(export_tflite(_piece(model, None, None), example_inputs, out_dir / "whole.tflite")) \
        if export_whole else None
    return PrecisionPlan(graphs, whole)
