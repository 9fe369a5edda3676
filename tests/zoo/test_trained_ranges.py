"""The zoo's `trained` weight mode (litert_zoo/weights.py): it plants the ranges trained networks reach -- outlier
channels in residual streams, large BatchNorm channels, tiny layer scales -- deterministically, and those ranges
are the ones that break fp16 (a stock norm's x*x overflows); the GPU test runs two rows end to end in that mode."""
import pytest
import torch
from torch import nn

from litert_zoo.rows import load_results
from litert_zoo.weights import (BN_EVERY, BN_OUTLIER, LAYER_SCALE_RANGE, activations_mode,
                                apply_trained_ranges, outlier_channels, redraw_weights)

from test_zoo import _zoo, zoo_python


class PreNormLM(nn.Module):
    """Token table -> two pre-norm residual blocks -> norm -> head: the shape of a decoder's stream."""

    def __init__(self, width=48):
        super().__init__()
        self.embed = nn.Embedding(100, width)
        self.norms = nn.ModuleList(nn.LayerNorm(width) for _ in range(2))
        self.mlps = nn.ModuleList(nn.Linear(width, width) for _ in range(2))
        self.layer_scale = nn.Parameter(torch.zeros(width))      # tiny by default: a layer scale
        self.final = nn.LayerNorm(width)
        self.head = nn.Linear(width, 100)

    def forward(self, ids):
        x = self.embed(ids)
        for norm, mlp in zip(self.norms, self.mlps):
            x = x + self.layer_scale * mlp(norm(x))
        self.stream = x
        return self.head(self.final(x))


class PatchViT(nn.Module):
    """A vision stream with no token table: a patch conv starts it, a class token and a position table join it."""

    def __init__(self, width=32):
        super().__init__()
        self.patch = nn.Conv2d(3, width, 8, 8)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, width))
        self.pos_embed = nn.Parameter(torch.zeros(1, 17, width))
        self.norm = nn.LayerNorm(width)
        self.proj = nn.Linear(width, width)      # runs after the patch conv: not where the stream starts

    def forward(self, x):
        t = self.patch(x).flatten(2).transpose(1, 2)
        t = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), t], 1) + self.pos_embed
        self.stream = t
        return self.proj(self.norm(t))


def _trained(model, *inputs):
    redraw_weights(model, activations="trained")
    return apply_trained_ranges(model, lambda: model(*inputs))


def test_stream_outliers_overflow_a_stock_norm_in_fp16():
    model, ids = PreNormLM().eval(), torch.randint(0, 100, (1, 16))
    changed = _trained(model, ids)
    assert changed["embeddings"] == 1 and not changed["writers"]
    with torch.no_grad():
        model(ids)
    peak = model.stream.abs().amax((0, 1))
    hot = outlier_channels(48)
    cold = [c for c in range(48) if c not in hot]
    assert float(peak[hot].min()) > 100 * float(peak[cold].median())           # x100 or more
    assert float(peak.max()) ** 2 > 65504                                       # x*x leaves fp16's range
    assert not torch.isfinite(model.stream.half() * model.stream.half()).all()
    lo, hi = LAYER_SCALE_RANGE
    assert lo <= float(model.layer_scale.detach().min()) and float(model.layer_scale.detach().max()) <= hi


def test_a_stream_with_no_token_table_starts_at_the_first_writer():
    model, x = PatchViT().eval(), torch.randn(1, 3, 32, 32)
    changed = _trained(model, x)
    assert changed["writers"] == ["patch"] and sorted(changed["free"]) == ["cls_token", "pos_embed"]
    with torch.no_grad():
        model(x)
    hot = outlier_channels(32)
    peak = model.stream.abs().amax((0, 1))
    assert float(peak[hot].min()) > 50 * float(peak[[c for c in range(32) if c not in hot]].median())


class TwoStages(nn.Module):
    """A hierarchical net: stage 1's MLP widens to 64 channels, which is also stage 2's stream width. The stage-2
    stream starts at the downsampling conv; the stage-1 hidden layer only shares its width (at 4x the positions)."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 16, 2, 2)
        self.norm1 = nn.GroupNorm(1, 16)
        self.fc1, self.fc2 = nn.Conv2d(16, 64, 1), nn.Conv2d(64, 16, 1)
        self.down_norm = nn.LayerNorm(16)
        self.down = nn.Conv2d(16, 64, 2, 2)
        self.norm2 = nn.LayerNorm(64)
        self.mlp2 = nn.Linear(64, 64)

    def forward(self, x):
        x = self.stem(x)
        x = x + self.fc2(torch.relu(self.fc1(self.norm1(x))) ** 2)
        x = self.down(self.down_norm(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)).flatten(2).transpose(1, 2)
        return x + self.mlp2(self.norm2(x))


def test_a_stream_starts_where_its_norms_read_as_many_positions():
    model, x = TwoStages().eval(), torch.randn(1, 3, 16, 16)
    changed = _trained(model, x)
    assert changed["writers"] == ["stem", "down"], changed["writers"]      # not fc1: 64 wide, 4x the positions
    assert float(model.fc1.weight.abs().max()) < 10


class PooledStages(nn.Module):
    """A stage transition with no norm in front. groups=8 is PiT's: a depthwise conv with two outputs per channel
    (c -> 2c, 2c + 1), so a stream-8 outlier channel (2) feeds a stream-16 outlier channel (5); groups=1 is
    VOLO's: a dense conv, so every stream-16 channel carries the stream-8 outliers."""

    def __init__(self, groups):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 2, 2)
        self.norm8 = nn.LayerNorm(8)
        self.pool = nn.Conv2d(8, 16, 1, groups=groups)
        self.norm16 = nn.LayerNorm(16)

    def forward(self, x):
        self.first = x = self.stem(x)
        x = x + self.norm8(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)
        self.stream = self.pool(x)
        return self.norm16(self.stream.permute(0, 2, 3, 1))


@pytest.mark.parametrize("groups", [8, 1])
def test_stage_outliers_do_not_compound(groups):
    model, x = PooledStages(groups).eval(), torch.randn(1, 3, 16, 16)
    assert outlier_channels(8)[0] * 2 + 1 == outlier_channels(16)[0]       # the PiT case
    assert _trained(model, x)["writers"] == ["stem", "pool"]
    with torch.no_grad():
        model(x)
    first = model.first.abs().amax((0, 2, 3))
    typical = float(first[[c for c in range(8) if c not in outlier_channels(8)]].median())
    assert 100 * typical < float(first.max()) < 1000 * typical                # the first stream: x400
    assert float(model.stream.abs().max()) < 1000 * typical, (model.stream.abs().max(), typical)  # not x400^2


def test_batch_norm_channels_are_planted_and_the_mode_is_deterministic():
    def build():
        torch.manual_seed(0)
        return nn.Sequential(nn.Conv2d(3, 32, 3), nn.BatchNorm2d(32), nn.ReLU(), nn.AdaptiveAvgPool2d(1)).eval()

    x = torch.randn(1, 3, 16, 16)
    a, b = build(), build()
    assert _trained(a, x)["batch_norms"] == 1
    _trained(b, x)
    assert all(torch.equal(p, q) for p, q in zip(a.state_dict().values(), b.state_dict().values()))
    bn = a[1]
    planted = list(range(5, 32, BN_EVERY))
    assert torch.all(bn.bias[planted] == BN_OUTLIER[1])
    others = [c for c in range(32) if c not in planted]
    assert float(bn.weight[planted].abs().min()) >= BN_OUTLIER[0] * float(bn.weight[others].abs().max()) * 0.999


def test_the_mode_comes_from_the_environment(monkeypatch):
    monkeypatch.delenv("LITERT_ZOO_ACTIVATIONS", raising=False)
    assert activations_mode() == "o1"
    monkeypatch.setenv("LITERT_ZOO_ACTIVATIONS", "trained")
    assert activations_mode() == "trained"
    monkeypatch.setenv("LITERT_ZOO_ACTIVATIONS", "huge")
    with pytest.raises(ValueError, match="expected one of"):
        activations_mode()
    out = _zoo("--activations", "huge", "--list")
    assert out.returncode == 2 and "invalid choice" in out.stderr


@pytest.mark.gpu
def test_the_norm_wall_fires_only_under_trained_ranges(gpu, tmp_path, monkeypatch):
    """The zoo's Llama row without the RMSNorm rewrite (and without the never-worse fallback, so the verdict is that
    file's own): right with O(1) weights, wrong in fp16 once the stream carries trained outliers (llvmpipe fp16).
    That the defaults PASS in the trained mode is the next test's."""
    from litert_gpu_toolkit import convert_for_gpu
    from litert_zoo.models import ZOO

    verdicts = {}
    for mode in ("o1", "trained"):
        monkeypatch.setenv("LITERT_ZOO_ACTIVATIONS", mode)
        model, inputs = ZOO["llama"].build()
        res = convert_for_gpu(model, inputs, tmp_path / f"{mode}.tflite", exclude=["patch_rmsnorm"],
                              diagnose_budget_s=0, fallback=False)
        verdicts[mode] = (res.verdict, res.attempts[-1:])
    assert verdicts["o1"][0] == "PASS" and verdicts["trained"][0] == "NUMERICS_FAIL", verdicts


@pytest.mark.gpu
def test_trained_rows_pass_through_the_zoo_command(gpu, tmp_path):
    """`zoo/run.py --activations trained` end to end: the Llama row (outliers through RMSNorm) with the defaults."""
    out = _zoo("--activations", "trained", "--only", "llama", "--out", str(tmp_path), timeout=900,
               python=zoo_python())
    got = load_results(tmp_path / "results.json")
    assert set(got) == {"llama"}, out.stdout[-2000:] + out.stderr[-2000:]
    row = got["llama"]
    assert row.passed and row.gpu.corr_fp16 >= 0.999 and "strict GPU" in row.gpu.residency, row
    readme = (tmp_path / "README.md").read_text()
    assert "with trained ranges planted" in readme and "--activations trained" in readme
    assert out.returncode == 0, out.stderr[-2000:]


@pytest.mark.slow
def test_compare_ranges_sets_both_modes_beside_real_weights():
    """zoo/compare_ranges.py: real ImageNet MobileNetV2 and EfficientNet-Lite0 on a photo next to their zoo rows in
    both modes. The trained mode's BatchNorm plant makes its loudest tenth of layers louder than the loudest real
    BatchNorm layer and its median layer louder than the O(1) mode's (what the plant is measured against); per
    MobileNetV2 block the trained mode's loudest channel
    stands out further than the O(1) mode's; the real networks keep their values in fp16 storage."""
    import re
    import subprocess
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([zoo_python(), str(root / "zoo" / "compare_ranges.py")], cwd=root,
                         capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-2000:]
    nums = lambda line: [float(v) for v in re.findall(r"(?<![\w.])(\d+\.\d+)", line)]  # noqa: E731
    sections = out.stdout.split("## ")[1:]
    assert [s.split(":")[0] for s in sections] == ["mobilenet_v2", "efficientnet_lite0"], out.stdout
    for section in sections:
        lines = section.splitlines()
        real = nums(next(line for line in lines if line.startswith("| real |")))
        o1 = nums(next(line for line in lines if line.startswith("| zoo o1 |")))
        trained = nums(next(line for line in lines if line.startswith("| zoo trained |")))
        assert len(real) == len(o1) == len(trained) == 3 and real[0] >= 1, section
        assert trained[1] > real[2] and trained[0] > o1[0], section
        real16 = float(re.search(r"torch16 of the output: real ([\d.]+)", section).group(1))
        assert real16 > 0.9999, section
    rows = [line for line in sections[0].splitlines() if line.startswith("| features.")]
    assert len(rows) == 19, out.stdout
    for line in rows:
        real_peak, real_ratio, o1_peak, o1_ratio, tr_peak, tr_ratio = nums(line)
        assert real_peak > 0 and real_ratio >= 1 and tr_ratio > o1_ratio, line
    stored = [line for line in sections[0].splitlines() if line.startswith("| after ")]
    assert len(stored) == 19, out.stdout
    for line in stored:
        real16, o1_16, tr16 = nums(line)
        assert real16 > 0.9999 and o1_16 > 0.9999 and 0 < tr16 <= 1, line


def test_planted_reports_what_the_trained_mode_scaled_per_row():
    """zoo/planted.py: the audit trail of a plant rule: one line per row with its scaled stream writers, free
    parameters and BatchNorms; an unknown row is refused."""
    import subprocess
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    script = [zoo_python(), str(root / "zoo" / "planted.py")]
    out = subprocess.run(script + ["--only", "vit,tv_mobilenet_v2"], cwd=root, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = {line.split(" | ")[0][2:]: line.split(" | ")[1:] for line in out.stdout.splitlines()
             if line.startswith("| vit ") or line.startswith("| tv_mobilenet_v2 ")}
    assert lines["vit"][0] == "embeddings.patch_embeddings.projection" and "cls_token" in lines["vit"][2]
    assert lines["tv_mobilenet_v2"][0] == "-" and int(lines["tv_mobilenet_v2"][3].strip(" |")) > 0
    bad = subprocess.run(script + ["--only", "no_such_row"], cwd=root, capture_output=True, text=True, timeout=600)
    assert bad.returncode == 2 and "unknown row" in bad.stderr


@pytest.mark.gpu
def test_real_imagenet_cnns_pass_with_the_defaults(gpu, tmp_path):
    """What the trained mode's BatchNorm plant stands for, run for real: torchvision MobileNetV2 and EfficientNet-Lite0
    with their ImageNet weights (folded gains up to x117 over the median channel: more than the zoo plants, see
    compare_ranges) convert with the defaults and PASS strict GPU-only."""
    import subprocess
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([zoo_python(), str(root / "zoo" / "compare_ranges.py"), "--photos", "chelsea",
                          "--convert", str(tmp_path)], cwd=root, capture_output=True, text=True, timeout=1500)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert out.stdout.count("PASS: ") == 2 and "strict GPU" in out.stdout, out.stdout[-3000:]
