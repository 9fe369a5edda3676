"""When the numbers are wrong at full residency, convert_for_gpu bisects by itself, says what it measured,
applies the matching rewrite and keeps it only when the file is better; bisect covers every block and tells
a GPU miscompute and a conversion error from fp16 loss."""
import numpy as np
import pytest
import torch
import torch.nn as nn

from litert_gpu_toolkit import convert_for_gpu
from litert_gpu_toolkit.diagnose.bisect import BoundaryResult, _diagnose, auto_boundaries, matching_rewrites
from litert_gpu_toolkit.convert.result import ConvertResult
from litert_gpu_toolkit.core.metrics import compare
from litert_gpu_toolkit.rewrites.registry import Change

from torch_helpers import Cancel  # tests/torch_helpers.py


class Bottleneck(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.conv1, self.bn, self.conv2 = nn.Conv2d(c, c, 1), nn.BatchNorm2d(c), nn.Conv2d(c, c, 3, padding=1)
        self.down = nn.Sequential(nn.Conv2d(c, c, 1), nn.BatchNorm2d(c))

    def forward(self, x):
        return torch.relu(self.conv2(torch.relu(self.bn(self.conv1(x)))) + self.down(x))


class ResNetish(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        self.layer1 = nn.Sequential(Bottleneck(8), Bottleneck(8))
        self.layer2 = nn.Sequential(Bottleneck(8), Bottleneck(8))
        self.head = nn.Linear(8, 4)

    def forward(self, x):
        return self.head(self.layer2(self.layer1(self.stem(x))).mean((2, 3)))


class Encoder(nn.Module):
    """Blocks in a ModuleList below a wrapper, defined in another order than they run."""

    def __init__(self):
        super().__init__()
        self.late = nn.ModuleList([nn.Sequential(nn.Linear(8, 8), nn.GELU()) for _ in range(2)])
        self.early = nn.ModuleList([nn.Sequential(nn.Linear(8, 8), nn.ReLU()) for _ in range(2)])

    def forward(self, x):
        for b in list(self.early) + list(self.late):
            x = x + b(x)
        return x


def test_auto_boundaries_cover_every_block_in_execution_order():
    x = torch.randn(1, 3, 8, 8)
    assert auto_boundaries(ResNetish(), (x,)) == ["stem", "layer1.0", "layer1.1", "layer2.0", "layer2.1", ""]
    names = auto_boundaries(Encoder(), (torch.randn(1, 8),))
    assert names == ["early.0", "early.1", "late.0", "late.1", ""], names
    spread = auto_boundaries(ResNetish(), (x,), max_boundaries=3)
    assert spread[-1] == "" and len(spread) == 3


def _row(name, f16, f32=1.0, cpu=1.0):
    ref = np.linspace(-1, 1, 200)
    noise = np.sin(np.arange(200) * 7.0)
    cmp = {c: compare(ref * c + (1 - c) * noise, ref) for c in {f16, f32, cpu}}
    return BoundaryResult(name, cmp[f16], cmp[f32], "ok", cpu=cmp[cpu])


def test_classes_come_from_the_cpu_and_fp32_runs():
    rows = [_row("a", 1.0), _row("b", 0.95, f32=0.95, cpu=1.0), _row("c", 0.9, f32=0.9)]
    assert _diagnose(rows, 0.999)[:2] == ("b", "miscompute")
    rows = [_row("a", 1.0), _row("b", 0.95, f32=0.95, cpu=0.95)]
    assert _diagnose(rows, 0.999)[:2] == ("b", "conversion_error")
    rows = [_row("a", 1.0), _row("b", 0.95)]
    no_range = {"overflow_possible": False, "peak": 40.0, "peak_square_sum": 0.0, "longest_dot": 2816}
    kind, why = _diagnose(rows, 0.999, lambda _b: no_range)[1:]
    assert kind == "degraded" and "2816 products" in why
    assert _diagnose(rows, 0.999, lambda _b: {**no_range, "overflow_possible": True})[1] == "overflow"
    facts = {"classes": {"Conv2d"}, "longest_dot": 2816, "grouped_conv": True}
    assert matching_rewrites("degraded", facts) == ["patch_split_k"]
    assert matching_rewrites("miscompute", facts) == ["patch_grouped_conv"]
    assert matching_rewrites("conversion_error", facts) == []


def test_a_failed_conversion_keeps_no_rewrites(tmp_path):
    change = Change("a", "x -> y", "patch_split_k", True)
    failed = ConvertResult(None, [change], error="boom")
    assert failed.kept == [] and failed.applied == ["patch_split_k"]
    assert "rewrites tried (no file was written): patch_split_k" in failed.summary()
    gone = ConvertResult(tmp_path / "missing.tflite", [change])
    assert gone.kept == []
    (tmp_path / "here.tflite").write_bytes(b"x")
    assert ConvertResult(tmp_path / "here.tflite", [change]).kept == ["patch_split_k"]


@pytest.mark.gpu
def test_convert_for_gpu_bisects_and_repairs_fp16_loss(gpu, tmp_path, measured):
    torch.manual_seed(0)
    model = Cancel().eval()
    x = torch.randn(1, 256, 256) * 4
    off = convert_for_gpu(model, (x,), tmp_path / "off.tflite", diagnose_budget_s=0)
    assert off.verdict == "NUMERICS_FAIL" and off.diagnosis is None, off.summary()
    result = convert_for_gpu(model, (x,), tmp_path / "m.tflite", diagnose_budget_s=600)
    report = result.diagnosis
    assert report is not None, result.summary()
    # measured, not guessed: fp32 and the CPU runtime are right, nothing comes near fp16's range
    assert report.diagnosis == "degraded", report.summary()
    out = report.boundaries[-1]
    assert out.fp32.corr > 0.9999 and out.cpu.corr > 0.9999 and out.fp16.corr < 0.999
    assert "patch_split_k" in report.rewrites and result.repaired == ["patch_split_k"]
    # fp16 storage keeps it (torch with fp16 tensors): the loss is the GPU's accumulation, which split-K answers
    assert report.storage_bound is False and out.torch16.corr > 0.9999, report.summary()
    assert result.ok and "patch_split_k" in result.kept, result.summary()
    measured("split_k", "repair", text=f"{off.verdict} (fp16 corr {out.fp16.corr:.6f}, SNR {out.fp16.snr_db:.1f} dB; "
             f"fp32 corr {out.fp32.corr:.6f}, CPU corr {out.cpu.corr:.6f}) -> bisect: {report.diagnosis} -> "
             f"{', '.join(result.repaired)} -> {result.verdict}")
    assert "diagnosis (bisect" in result.summary() and "SNR fp16" in result.summary()
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".")], "scratch files left behind"


def test_by_position_calls_the_module_by_keyword():
    from litert_gpu_toolkit.convert.repair import by_position

    class Kw(torch.nn.Module):
        def forward(self, a, *, scale, shift):
            return a * scale + shift

    a, scale, shift = torch.randn(3), torch.randn(3), torch.randn(3)
    wrapped = by_position(Kw(), 1, ("scale", "shift"))
    assert torch.equal(wrapped(a, scale, shift), a * scale + shift)


@pytest.mark.gpu
@pytest.mark.slow
def test_a_model_called_by_keyword_is_diagnosed_too(gpu, tmp_path):
    """The same fp16 loss as above, the model called `model(x=...)` as users call HF models: bisect runs (it feeds
    its taps positionally, through `by_position`) and the repair is found."""
    torch.manual_seed(0)
    x = torch.randn(1, 256, 256) * 4
    result = convert_for_gpu(Cancel().eval(), {"x": x}, tmp_path / "m.tflite", diagnose_budget_s=600)
    assert result.diagnosis is not None, result.summary()
    assert result.diagnosis.diagnosis == "degraded" and result.repaired == ["patch_split_k"], result.summary()


class _FakeJob:
    """convert._Job's surface that `_attempts` uses: canned results per attempt label."""

    def __init__(self, results, exclude=()):
        from types import SimpleNamespace

        self.results, self.labels, self.log = results, [], []
        # the ConvertOptions fields `_attempts` reads (a fake rewrite name would not pass ConvertOptions' check)
        self.opts = SimpleNamespace(patches=True, exclude=tuple(exclude), inplace=False, falls_back=True,
                                    diagnose_budget_s=60.0)

    def attempt(self, path, exclude, label, *, copy_model, dropped=None):
        self.labels.append(label)
        return self.results[label]

    def finish(self, result, path, dropped=None):
        result.dropped = dict(dropped or {})
        return result


@pytest.mark.parametrize("repair_wins", [False, True])
def test_a_wrong_full_gpu_file_is_diagnosed_even_when_the_fallback_wins(monkeypatch, tmp_path, repair_wins):
    """The rewritten file runs fully on the GPU with wrong numbers and plain conversion (part on the CPU, right
    numbers) ranks higher: the rewritten file is still bisected; its repair is taken only when it beats the
    fallback, else the fallback carries the diagnosis, labelled as the rewritten file's."""
    from types import SimpleNamespace

    from litert_gpu_toolkit.convert import pipeline as convert

    score = {"rewritten": 2, "plain": 3, "repaired": 5 if repair_wins else 2.5, "without patch_x": 1}
    made = {k: ConvertResult(tmp_path / f"{k}.tflite", [], report=SimpleNamespace(verdict=v, ok=v == "PASS"))
            for k, v in (("rewritten", "NUMERICS_FAIL"), ("plain", "FALLBACK"),
                         ("repaired", "PASS" if repair_wins else "NUMERICS_FAIL"),
                                   ("without patch_x", "COMPILE_FAIL"))}
    made["rewritten"].changes = [Change("a", "x -> y", "patch_x", True)]
    from litert_gpu_toolkit.convert import repair

    for module in (convert, repair):
        monkeypatch.setattr(module, "quality", lambda r: (score[r.path.stem],))
        monkeypatch.setattr(module, "describe", lambda r: r.path.stem)
    made["without patch_x"].path = tmp_path / "without patch_x.tflite"
    seen = []

    def fake_repair(job, best, path, try_path, excluded, dropped, budget_s, plain_result=None):
        seen.append((best.path.stem, set(excluded)))
        out = made["repaired"]
        from litert_gpu_toolkit.diagnose.bisect import BisectReport

        out.diagnosis = best.diagnosis = BisectReport([], "blocks.0", "underflow", "why", 0.999)
        return out

    monkeypatch.setattr(repair, "diagnose_and_repair", fake_repair)
    job = _FakeJob(made, exclude=["patch_never"])
    got = convert._attempts(job, tmp_path / "out.tflite", [tmp_path / f"t{i}" for i in range(5)])
    assert seen == [("rewritten", {"patch_never"})]          # the rewritten file, with its own rewrite set
    if repair_wins:
        assert got is made["repaired"]
    else:
        assert got is made["plain"] and got.diagnosis is not None
        assert got.diagnosis_of.startswith("the rewritten file")
        header = ConvertResult(None, [], error="x", diagnosis=got.diagnosis, diagnosis_of=got.diagnosis_of).summary()
        assert "diagnosis (bisect of the rewritten file" in header


def test_a_storage_bound_diagnosis_says_so_and_tries_nothing(monkeypatch, tmp_path):
    """bisect finds the output needs more than fp16 (torch16 wrong too): the log says so, no rewrite is tried."""
    from types import SimpleNamespace

    from litert_gpu_toolkit.diagnose import bisect as bisect_module
    from litert_gpu_toolkit.diagnose.bisect import BisectReport
    from litert_gpu_toolkit.convert.repair import diagnose_and_repair

    report = BisectReport([], "blocks.3", "compounding", "why", 0.9, storage_bound=True)
    monkeypatch.setattr(bisect_module, "bisect", lambda *a, **k: report)
    job = SimpleNamespace(parsed={"serving_default": ((torch.zeros(1),), {})}, _copy=lambda: nn.Identity(), log=[],
                          include=None, attempt=lambda *a, **k: pytest.fail("nothing to try"))
    best = ConvertResult(tmp_path / "m.tflite", [])
    assert diagnose_and_repair(job, best, tmp_path / "m.tflite", None, set(), {}, 60.0) is best
    assert best.diagnosis is report and "needs more than fp16" in job.log[-1], job.log


class Embedded(nn.Module):
    """An embedding stage beside the encoder (as in Hugging Face models: model.embeddings, model.encoder.layer.N)."""

    def __init__(self):
        super().__init__()
        self.embeddings = nn.Sequential(nn.Linear(4, 8), nn.LayerNorm(8))
        self.encoder = nn.Module()
        self.encoder.layer = nn.ModuleList([nn.Sequential(nn.Linear(8, 8), nn.GELU()) for _ in range(2)])

    def forward(self, x):
        x = self.embeddings(x)
        for b in self.encoder.layer:
            x = x + b(x)
        return x


def test_what_feeds_the_first_block_is_tapped_first():
    assert auto_boundaries(Embedded(), (torch.randn(1, 4),)) == ["embeddings", "encoder.layer.0", "encoder.layer.1", ""]


def _diagnosed(monkeypatch, tmp_path, report, candidate=None):
    """diagnose_and_repair with bisect stubbed to `report`; `candidate` is what re-converting gives (None: no try)."""
    from types import SimpleNamespace

    from litert_gpu_toolkit.diagnose import bisect as bisect_module
    from litert_gpu_toolkit.convert.repair import diagnose_and_repair

    monkeypatch.setattr(bisect_module, "bisect", lambda *a, **k: report)
    opts = SimpleNamespace(include=None, with_overrides=lambda **k: SimpleNamespace(include=k["include"]))
    job = SimpleNamespace(parsed={"serving_default": ((torch.zeros(1),), {})}, _copy=lambda: nn.Identity(), log=[],
                          opts=opts, attempt=lambda *a, **k: candidate or pytest.fail("nothing to try"))
    best = ConvertResult(tmp_path / "m.tflite", [])
    out = diagnose_and_repair(job, best, tmp_path / "m.tflite", lambda: tmp_path / "t.tflite", set(), {}, 60.0)
    return out, out.summary()


def test_a_diagnosis_that_finds_nothing_says_so_in_one_line(monkeypatch, tmp_path):
    from litert_gpu_toolkit.diagnose.bisect import BisectReport

    report = BisectReport([], None, "clean", "every boundary has correlation >= 0.999 in fp16", 0.999,
                          not_run=["blocks.4"])
    out, text = _diagnosed(monkeypatch, tmp_path, report)
    lines = [line for line in text.splitlines() if "diagnosis found no fix" in line]
    assert len(lines) == 1, text
    assert "no block diverges" in lines[0] and "a bisect over 0 boundaries (1 left out for time)" in lines[0]
    assert "no rewrite matches" in lines[0]


def test_a_matching_rewrite_that_did_not_help_is_named_as_tried(monkeypatch, tmp_path):
    from litert_gpu_toolkit.diagnose.bisect import BisectReport

    report = BisectReport([], "blocks.1", "degraded", "why", 0.999, module="blocks.1.mlp",
                          rewrites=["patch_split_k"])
    worse = ConvertResult(None, [], error="converter refused it")
    out, text = _diagnosed(monkeypatch, tmp_path, report, candidate=worse)
    assert not out.repaired
    line = next(line for line in text.splitlines() if "diagnosis found no fix" in line)
    assert "degraded at blocks.1.mlp" in line and "patch_split_k (not better)" in line, line


def test_a_repaired_file_has_no_no_fix_line(tmp_path):
    from litert_gpu_toolkit.diagnose.bisect import BisectReport

    report = BisectReport([], "blocks.1", "degraded", "why", 0.999, rewrites=["patch_split_k"])
    result = ConvertResult(tmp_path / "m.tflite", [], diagnosis=report, repaired=["patch_split_k"])
    assert result.unresolved() == "" and "no fix" not in result.summary()
