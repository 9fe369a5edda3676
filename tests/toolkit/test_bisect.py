"""bisect finds a planted fp16 overflow block, and tells precision compounding apart."""
import json
import subprocess
import sys
import textwrap

import torch
import torch.nn as nn
import torch.nn.functional as F

from litert_gpu_toolkit.diagnose.bisect import _diagnose, auto_boundaries, bisect, BoundaryResult
from litert_gpu_toolkit.core.metrics import compare


class SumSquaresNorm(nn.Module):
    """An RMSNorm written out by hand (a reduction the GPU runs in fp16)."""

    def forward(self, x):
        return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + 1e-6)


class Block(nn.Module):
    def __init__(self, d, scale=1.0):
        super().__init__()
        self.fc = nn.Linear(d, d)
        self.norm = SumSquaresNorm()
        self.scale = scale

    def forward(self, x):
        return self.norm(self.fc(x) * self.scale)


class Planted(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([Block(64), Block(64), Block(64, 300.0), Block(64)])

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        return x


class Logistic(nn.Module):
    """x -> 3.9 x (1 - x): chaotic, so fp16 rounding error grows by a similar factor every block."""

    def forward(self, x):
        return 3.9 * x * (1 - x)


class Deep(nn.Module):
    def __init__(self, depth=10):
        super().__init__()
        self.layers = nn.Sequential(*[Logistic() for _ in range(depth)])

    def forward(self, x):
        return self.layers(x)


class PaddedCosine(nn.Module):
    """Cosine attention over a window whose last keys are padding (all zero), as Swin-V2 pads its windows."""

    def forward(self, x):
        k = x * (torch.arange(x.shape[1]) < 10).to(x.dtype)[:, None]
        scores = F.normalize(x, dim=-1) @ F.normalize(k, dim=-1).transpose(-2, -1) * 10.0
        return scores.softmax(-1) @ x


class PaddedWindows(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([nn.Sequential(nn.Linear(32, 32), nn.GELU()), PaddedCosine(),
                                     nn.Sequential(nn.Linear(32, 32), nn.GELU())])

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        return x


class PositionOneHot(nn.Module):
    """column - row - position over a constant [S, C] table: the GPU's known elementwise miscompute."""

    def forward(self, pos, x):
        offsets = torch.arange(x.shape[1], dtype=torch.float32)[None, :] - torch.arange(x.shape[0],
                                                                                      dtype=torch.float32)[:, None]
        return (1.0 - torch.clamp(torch.abs(offsets - pos.to(torch.float32)), max=1.0)) * x


class PositionBlocks(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([nn.Sequential(nn.Linear(64, 64), nn.GELU()), PositionOneHot(),
                                     nn.Sequential(nn.Linear(64, 64), nn.GELU())])

    def forward(self, pos, x):
        return self.blocks[2](self.blocks[1](pos, self.blocks[0](x)))


def test_auto_boundaries_pick_the_repeated_blocks():
    assert auto_boundaries(Planted()) == ["blocks.0", "blocks.1", "blocks.2", "blocks.3"]
    assert auto_boundaries(Deep(3)) == ["layers.0", "layers.1", "layers.2"]


def test_blocks_kept_as_lists_of_layers_are_tapped_at_the_layers():
    """Funnel's encoder: a ModuleList of blocks, each a ModuleList of layers the model loops over. A ModuleList
    never runs itself, so the taps are its layers (before, bisect found no boundary at all)."""
    class Nested(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = torch.nn.Linear(8, 16)
            self.blocks = torch.nn.ModuleList(
                torch.nn.ModuleList(torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.GELU()) for _ in range(n))
                for n in (2, 1))

        def forward(self, x):
            x = self.embed(x)
            for block in self.blocks:
                for layer in block:
                    x = x + layer(x)
            return x

    names = auto_boundaries(Nested(), (torch.randn(2, 8),))
    assert names == ["embed", "blocks.0.0", "blocks.0.1", "blocks.1.0", ""], names


def test_a_flat_graph_behind_a_wrapper_is_tapped_at_its_layers():
    """A torch.fx GraphModule (what onnx2torch and symbolic tracing give: no ModuleList / Sequential left) wrapped
    in a single-child module, as GpuRewriteWrapper wraps a model: the taps are its layers, in execution order."""
    flat = torch.fx.symbolic_trace(torch.nn.Sequential(torch.nn.Conv1d(4, 8, 3), torch.nn.ReLU(),
                                                       torch.nn.Conv1d(8, 8, 3), torch.nn.Tanh()))

    class Wrapper(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = flat

        def forward(self, x):
            return self.model(x) * 2

    names = auto_boundaries(Wrapper(), (torch.randn(1, 4, 16),))
    assert names == ["model.0", "model.1", "model.2", "model.3", ""], names


def test_a_model_without_blocks_is_one_boundary_its_output():
    """A bare arithmetic module or a single layer has no block to tap: its output is the one boundary (before,
    bisect ended in a ValueError traceback, "no boundaries", for a builder returning such a model)."""
    class Bare(torch.nn.Module):
        def forward(self, x):
            return x * 2 + 1

    assert auto_boundaries(Bare(), [torch.randn(1, 4)]) == [""]
    assert auto_boundaries(torch.nn.Linear(4, 4), (torch.randn(1, 4),)) == [""]


def test_cli_on_a_model_without_blocks(gpu, tmp_path):
    script = tmp_path / "bare.py"
    script.write_text("import torch\n"
                      "class M(torch.nn.Module):\n"
                      "    def forward(self, x):\n"
                      "        return x * 2 + 1\n"
                      "def build():\n"
                      "    return M(), [torch.randn(1, 4)]\n")
    out = subprocess.run([sys.executable, "-m", "litert_gpu_toolkit", "bisect", f"{script}:build", "--no-fp32"],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert "Traceback" not in out.stderr and "<output>" in out.stdout and "diagnosis: clean" in out.stdout


def test_planted_overflow_block_is_found(gpu):
    torch.manual_seed(0)
    report = bisect(Planted(), (torch.randn(1, 16, 64),), progress=False)
    assert report.first_divergent == "blocks.2", report.summary()
    assert report.diagnosis == "overflow", report.summary()
    first = report.boundaries[2]
    assert first.fp16.all_zero or first.fp16.nonfinite or first.fp16.corr < 0.99
    assert first.fp32.corr > 0.999  # fp32 attribution: the same graph is fine without fp16
    assert all(b.fp16.corr > 0.999 for b in report.boundaries[:2])
    assert report.module == "blocks.2.norm" and "MEAN" in report.ops, report.summary()
    assert "patch_rmsnorm" in report.rewrites


def test_an_fp16_underflow_is_named_down_to_the_op(gpu):
    """F.normalize of an all-zero key: eps = 1e-12 is 0 in fp16, 0 / 0 on the GPU. Bisect finds the block, torch
    with fp16 tensors names the op and says its fp32 result is in range: underflow, answered by l2_normalize."""
    torch.manual_seed(0)
    report = bisect(PaddedWindows().eval(), (torch.randn(1, 16, 32),), progress=False)
    assert report.first_divergent == "blocks.1", report.summary()
    assert report.diagnosis == "underflow", report.summary()
    assert report.boundaries[1].fp32.corr > 0.999
    assert (report.fp16_fault.op, report.fp16_fault.module) == ("normalize", "blocks.1"), report.summary()
    assert report.rewrites[0] == "l2_normalize" and "normalize in blocks.1" in report.explanation
    assert report.to_dict()["fp16_fault"]["kind"] == "underflow"


def test_a_known_miscompute_is_routed_to_its_rewrite(gpu):
    """fp32 as wrong as fp16, LiteRT's CPU right: miscompute; the block's graph has an elementwise op on a rank-2
    constant, so the report names those nodes and puts patch_constant_operand_rank4 first."""
    torch.manual_seed(0)
    report = bisect(PositionBlocks().eval(), (torch.tensor([3]), torch.randn(8, 64)), progress=False)
    assert report.first_divergent == "blocks.1" and report.diagnosis == "miscompute", report.summary()
    assert report.boundaries[1].cpu.corr > 0.999 and report.boundaries[1].fp32.corr < 0.99
    assert report.rewrites[0] == "patch_constant_operand_rank4", report.summary()
    assert "known elementwise miscompute" in report.explanation and "SUB [1, 1] x [8, 64]" in report.explanation


def test_deep_chaotic_stack_is_diagnosed_as_compounding(gpu):
    torch.manual_seed(0)
    report = bisect(Deep(10), (torch.rand(1, 64, 64) * 0.8 + 0.1,), progress=False, fp32=False)
    assert report.diagnosis == "compounding", report.summary()
    corrs = [b.fp16.corr for b in report.boundaries]
    assert corrs[0] > 0.9999 and corrs[-1] < corrs[0]
    # a chaotic map amplifies any rounding: torch with fp16 tensors is as wrong, so no fp16 rewrite can help
    assert report.storage_bound is True and "patch_split_k" not in report.rewrites, report.summary()
    assert report.boundaries[-1].torch16.corr < 0.999 and "torch16" in report.summary()


def _row(name, corr, nonfinite=0):
    import numpy as np

    ref = np.linspace(-1, 1, 100)
    out = ref * corr + (1 - corr) * np.sin(np.arange(100) * 7.0)
    if nonfinite:
        out[:nonfinite] = np.inf
    return BoundaryResult(name, compare(out, ref), compare(ref, ref), "ok")


def test_diagnosis_rules_without_a_gpu():
    first, kind, _ = _diagnose([_row("a", 1.0), _row("b", 1.0, nonfinite=3), _row("c", 1.0)], 0.999)
    assert (first, kind) == ("b", "overflow")
    first, kind, _ = _diagnose([_row("a", 1.0), _row("b", 0.9999)], 0.999)
    assert kind == "clean" and first is None


def test_cli(gpu, tmp_path):
    script = tmp_path / "build.py"
    script.write_text(textwrap.dedent("""
        import torch, torch.nn as nn
        class M(nn.Module):
            def __init__(self):
                super().__init__()
                self.layers = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 8))
            def forward(self, x):
                return self.layers(x)
        def build():
            torch.manual_seed(0)
            return M(), (torch.randn(1, 4, 8),)
    """))
    out_json = tmp_path / "b.json"
    out = subprocess.run([sys.executable, "-m", "litert_gpu_toolkit", "bisect", f"{script}:build", "--no-fp32",
                          "--json", str(out_json)], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert "diagnosis: clean" in out.stdout
    assert len(json.loads(out_json.read_text())["boundaries"]) == 3


def test_the_miscompute_detector_flags_only_the_measured_forms(tmp_path):
    """Flagged: a rank-2 constant filling the first axis, a lower-rank runtime operand at rank 3, a rank-4 batch
    broadcast. Not flagged: a [1, 64, 16] constant on a [1, 64, 16] runtime tensor (right on the GPU: CoAtNet's
    position bias) or a [1, 256] row on [8, 256]."""
    from litert_gpu_toolkit.diagnose.classify import constant_operand_nodes
    from litert_gpu_toolkit.lowering.export import export_tflite

    class Add(nn.Module):
        def __init__(self, shape):
            super().__init__()
            self.register_buffer("c", torch.rand(*shape) + 1)

        def forward(self, x):
            return x + self.c

    cases = {((8, 64), (8, 64)): True, ((8, 8), (4, 8, 8)): True, ((1, 1, 1, 1), (8, 64, 1, 1)): True,
             ((1, 64, 16), (1, 64, 16)): False, ((8, 256), (1, 256)): False}
    for (x_shape, c_shape), flagged in cases.items():
        path = export_tflite(Add(c_shape).eval(), (torch.rand(*x_shape),), tmp_path / "m.tflite")
        assert bool(constant_operand_nodes(path)) == flagged, (x_shape, c_shape, constant_operand_nodes(path))


def _with_storage(row, corr):
    row.torch16 = _row(row.name, corr).fp16
    return row


def test_storage_note_tells_gpu_arithmetic_from_fp16_itself():
    from litert_gpu_toolkit.diagnose.bisect import storage_note

    # the GPU loses at b, torch with fp16 tensors does not: the GPU's own arithmetic
    rows = [_with_storage(_row("a", 1.0), 1.0), _with_storage(_row("b", 0.99), 1.0), _with_storage(_row("", 0.98), 1.0)]
    bound, note = storage_note(rows, "b", "degraded", 0.999)
    assert bound is False and "split-K" in note
    # fp16 itself loses at c: a plan cut at the latest boundary whose fp16 prefix the output survives
    rows = [_with_storage(_row(n, 1.0 if n < "c" else 0.99), 1.0 if n < "c" else 0.98) for n in "abcd"]
    rows.append(_with_storage(_row("", 0.97), 0.96))
    asked = []

    def until(name):
        asked.append(name)
        return _row(name, 1.0 if name in "ab" else 0.98).fp16

    bound, note = storage_note(rows, "c", "compounding", 0.999, until)
    assert bound is True and "cuts=['b']" in note and "no exact fp16 rewrite" in note, note
    assert set(asked) <= {"a", "b"}          # only cuts before the first loss are worth measuring
    bound, note = storage_note(rows, "c", "compounding", 0.999, lambda name: _row(name, 0.9).fp16)
    assert bound is True and "Not even a precision plan" in note and "enforce_f32" in note
    # a range fault is a rewrite's job: no storage verdict
    assert storage_note(rows, "c", "overflow", 0.999, until) == (None, "")


def test_a_value_that_fp16_cannot_store_gets_a_precision_plan_not_a_rewrite(gpu):
    from test_fp16_emulation import Buried

    torch.manual_seed(0)
    report = bisect(Buried().eval(), (torch.randn(32, 16) * 2,), boundaries=["blocks.0", "blocks.1", "blocks.2", ""],
                    progress=False)
    assert report.first_divergent == "blocks.1" and report.diagnosis == "degraded", report.summary()
    row = report.boundaries[1]
    assert row.fp32.corr > 0.9999 and row.torch16.corr < 0.99      # fp16 itself, measured in torch
    assert report.storage_bound is True and "patch_split_k" not in report.rewrites
    assert "cuts=['blocks.0']" in report.explanation, report.explanation
