"""Calls on constants and elementwise ops on a constant operand (llvmpipe, software Vulkan, ai-edge-litert 2.3.0).

* `patch_fold_constants`: a Swin-v2-style position-bias MLP run on a coordinate buffer and indexed by a buffer
  of ids converts to CONV_2D / GATHER_ND nodes with no runtime input, which the GPU rejects; folded, the result
  is one constant: bit-identical in torch, the ops gone, GPU-only and right (with `patch_attention_bias_add`:
  the folded bias is then a constant ADDed onto the scores, which the GPU computes right only at rank 3).
* `patch_constant_operand_rank4`: MUL / ADD of a runtime tensor and a constant at rank 2 or 3 is miscomputed
  in fp16 and fp32 (asserted below, so the day the GPU gets it right a test says so); at rank 4 it is right.
"""
import pytest
import torch
import torch.nn as nn

from litert_gpu_toolkit import convert_for_gpu
from litert_gpu_toolkit.core.model_info import read_model_info
from litert_gpu_toolkit.rewrites.functional import GpuRewriteWrapper


class PositionBias(nn.Module):
    """softmax(q k^T + MLP(coords)[index]) @ v, the position bias computed from buffers only."""

    def __init__(self, window=4, heads=2):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        n = 2 * window - 1
        coords = torch.stack(torch.meshgrid(torch.arange(n), torch.arange(n), indexing="ij"), -1).float() / window
        self.register_buffer("coords", coords)                               # [n, n, 2]
        idx = torch.randint(0, n * n, (window * window, window * window), generator=g)
        self.register_buffer("index", idx)
        self.mlp = nn.Sequential(nn.Linear(2, 32), nn.ReLU(), nn.Linear(32, heads))
        self.heads = heads

    def bias(self):
        table = self.mlp(self.coords).reshape(-1, self.heads)                # [n*n, heads]
        return 16 * torch.sigmoid(table[self.index.reshape(-1)].reshape(*self.index.shape, self.heads)
                                  .permute(2, 0, 1)).unsqueeze(0)            # [1, heads, N, N]

    def forward(self, q, k, v):
        return torch.softmax(q @ k.transpose(-1, -2) + self.bias(), dim=-1) @ v


def _qkv():
    g = torch.Generator().manual_seed(1)
    return tuple(torch.randn(1, 2, 16, 8, generator=g) for _ in range(3))


def test_fold_constants_is_bit_exact_in_torch():
    model = PositionBias().eval()
    with torch.no_grad():
        assert torch.equal(GpuRewriteWrapper(model, include=["patch_fold_constants"])(*_qkv()), model(*_qkv()))


class GatedTable(nn.Module):
    """WavLM's gate: runtime [G, T, 1] * constant table [G, T, T], and a [1, S, D] table added at rank 3."""

    def __init__(self):
        super().__init__()
        g = torch.Generator().manual_seed(2)
        self.register_buffer("table", torch.randn(4, 8, 8, generator=g))
        self.register_buffer("pos", torch.randn(1, 8, 16, generator=g))

    def forward(self, gate, x):
        return (gate * self.table).sum(-1, keepdim=True) + (x + self.pos)[..., :1]


def _gate_inputs():
    g = torch.Generator().manual_seed(3)
    return torch.randn(4, 8, 1, generator=g), torch.randn(8, 16, generator=g)


def test_rank4_is_exact_in_torch():
    model = GatedTable().eval()
    wrapped = GpuRewriteWrapper(model, include=["patch_fold_constants", "patch_constant_operand_rank4"])
    assert torch.equal(wrapped(*_gate_inputs()), model(*_gate_inputs()))


@pytest.mark.gpu
def test_fold_constants_on_the_gpu(gpu, tmp_path):
    plain = convert_for_gpu(PositionBias(), _qkv(), tmp_path / "plain.tflite", patches=False)
    assert plain.verdict == "FALLBACK", plain.summary()
    fixed = convert_for_gpu(PositionBias(), _qkv(), tmp_path / "fixed.tflite",
                            only=["patch_fold_constants", "patch_attention_bias_add", "patch_safe_softmax"])
    assert fixed.ok, fixed.summary()
    info = read_model_info(fixed.path)
    ops = info.op_histogram()
    assert "GATHER_ND" not in ops and "GATHER" not in ops and "LOGISTIC" not in ops, ops
    for op in info.ops:                     # every op takes a runtime input
        assert any(i >= 0 and not info.tensor(i).is_constant for i in op.inputs), (op.op, ops)


def _constant_operand_ops(path):
    info = read_model_info(path)
    found = []
    for op in info.ops:
        if op.op in ("MUL", "ADD"):
            shapes = [info.tensor(i).shape for i in op.inputs if i >= 0 and info.tensor(i).is_constant]
            found += [(op.op, len(info.tensor(op.outputs[0]).shape), s) for s in shapes if len(s) >= 2]
    return found


@pytest.mark.gpu
def test_constant_operand_on_the_gpu(gpu, tmp_path):
    plain = convert_for_gpu(GatedTable(), _gate_inputs(), tmp_path / "plain.tflite", patches=False)
    assert plain.verdict == "NUMERICS_FAIL", plain.summary()        # wrong at full residency, fp32 too
    assert any(rank in (2, 3) for _, rank, _ in _constant_operand_ops(plain.path))
    fixed = convert_for_gpu(GatedTable(), _gate_inputs(), tmp_path / "fixed.tflite",
                            only=["patch_fold_constants", "patch_constant_operand_rank4"])
    assert fixed.ok, fixed.summary()
    assert all(rank == 4 for _, rank, _ in _constant_operand_ops(fixed.path)), _constant_operand_ops(fixed.path)


class LayerScale(nn.Module):
    """EdgeNeXt's layer scale: a linear layer on [1, S, D] (FULLY_CONNECTED with a rank-2 output in the graph),
    dropout, then * gamma [D]: in the graph a rank-2 runtime operand broadcast against a [1, 1, D] constant."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(4)
        self.proj, self.drop = nn.Linear(16, 16), nn.Dropout(0.1)
        self.gamma = nn.Parameter(torch.rand(16) + 0.5)

    def forward(self, x):
        return x + self.gamma * self.drop(self.proj(x))


def _layer_scale_case(model, x, tmp_path):
    """Bit-identical in torch; plain NUMERICS_FAIL on the GPU, rewritten PASS. Returns both results."""
    rules = ["patch_fold_constants", "patch_constant_operand_rank4"]
    with torch.no_grad():
        assert torch.equal(GpuRewriteWrapper(model, include=rules)(x), model(x))
    plain = convert_for_gpu(model, (x,), tmp_path / "plain.tflite", patches=False)
    assert plain.verdict == "NUMERICS_FAIL", plain.summary()
    fixed = convert_for_gpu(model, (x,), tmp_path / "fixed.tflite", only=rules)
    assert fixed.ok, fixed.summary()
    return plain, fixed


@pytest.mark.gpu
def test_layer_scale_after_a_linear_on_the_gpu(gpu, tmp_path):
    _layer_scale_case(LayerScale().eval(), torch.randn(1, 32, 16, generator=torch.Generator().manual_seed(5)),
                      tmp_path)


class TokenMixing(nn.Module):
    """ResMLP's token-mixing branch: a linear layer across the tokens (on the transposed [1, D, S]), transposed
    back, times a layer scale. The converter moves the MUL across the TRANSPOSE onto the rank-2 FULLY_CONNECTED
    result: runtime [D, S] * constant [1, D, 1], the miscomputed case, although torch multiplies at rank 3."""

    def __init__(self, tokens=16, dim=384):
        super().__init__()
        g = torch.Generator().manual_seed(8)
        self.mix = nn.Linear(tokens, tokens)
        self.ls = nn.Parameter(torch.rand(dim, generator=g) + 0.5)

    def forward(self, x):
        return x + self.ls * self.mix(x.transpose(1, 2)).transpose(1, 2)


@pytest.mark.gpu
def test_layer_scale_after_a_transposed_linear_on_the_gpu(gpu, tmp_path):
    plain, fixed = _layer_scale_case(TokenMixing().eval(),
                                     torch.randn(1, 16, 384, generator=torch.Generator().manual_seed(9)), tmp_path)
    info = read_model_info(plain.path)
    assert [(384, 16), (1, 384, 1)] in [[info.tensor(i).shape for i in op.inputs] for op in info.ops
                                        if op.op == "MUL"]
    info = read_model_info(fixed.path)
    assert all(info.tensor(i).rank == 4 for op in info.ops if op.op == "MUL" for i in op.inputs)


class PositionOneHot(nn.Module):
    """A decoder's cache-write one-hot from a runtime position: constant offsets [S, C] (column - row) minus the
    position [1]. At rank 4 with trailing axes the constant is [S, C, 1, 1] against a runtime [1, 1, 1, 1]: the
    runtime operand broadcast over the batch axis, which the GPU gets wrong too; [1, S, C, 1] is right."""

    def __init__(self, steps=8, capacity=256):
        super().__init__()
        self.register_buffer("columns", torch.arange(capacity, dtype=torch.float32))
        self.steps = steps

    def forward(self, input_pos, x):
        offsets = self.columns[None, :] - torch.arange(self.steps, dtype=torch.float32)[:, None]
        diff = offsets - input_pos[:1].to(torch.float32)
        return (1.0 - torch.clamp(torch.abs(diff), max=1.0)) * x


@pytest.mark.gpu
def test_a_runtime_scalar_against_a_constant_table_on_the_gpu(gpu, tmp_path):
    inputs = (torch.tensor([5], dtype=torch.int32), torch.rand(8, 256, generator=torch.Generator().manual_seed(7)))
    model = PositionOneHot().eval()
    rules = ["patch_fold_index_math", "patch_fold_constants", "patch_constant_operand_rank4"]
    with torch.no_grad():
        assert torch.equal(GpuRewriteWrapper(model, include=rules)(*inputs), model(*inputs))
    plain = convert_for_gpu(model, inputs, tmp_path / "plain.tflite", patches=False)
    assert plain.verdict == "NUMERICS_FAIL", plain.summary()        # fp32 as wrong as fp16
    fixed = convert_for_gpu(model, inputs, tmp_path / "fixed.tflite", only=rules)
    assert fixed.ok, fixed.summary()
    info = read_model_info(fixed.path)
    subs = [[info.tensor(i).shape for i in op.inputs] for op in info.ops if op.op == "SUB"]
    assert [(1, 8, 256, 1), (1, 1, 1, 1)] in subs, subs                  # batch axis 1 on both operands


class ZeroedSlice(nn.Module):
    """torchvision's Swin-v2: a clone of a bias with a slice of it zeroed in place, through a view."""

    def __init__(self):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(12, generator=torch.Generator().manual_seed(6)))

    def forward(self, x):
        b = self.bias.clone()
        b[4:8].zero_()
        return x + b


def test_in_place_change_through_a_view_of_a_constant():
    model = ZeroedSlice().eval()
    before = model.bias.detach().clone()
    x = torch.randn(2, 12)
    with torch.no_grad():
        got = GpuRewriteWrapper(model, include=["patch_fold_constants"])(x)
    assert torch.equal(got, model(x))
    assert torch.equal(model.bias.detach(), before)                 # the model's own parameter is never written


class PadFromBuffers(nn.Module):
    """EnCodec's padding: amounts computed from integer buffers, compared in Python and passed to F.pad as tensors
    (data-dependent for torch.export unless the constants' numbers are known)."""

    def __init__(self):
        super().__init__()
        self.register_buffer("stride", torch.tensor(2))
        self.register_buffer("kernel", torch.tensor(5))

    def forward(self, x):
        total = self.kernel - self.stride
        frames = torch.ceil((x.shape[-1] - self.kernel + total) / self.stride + 1).to(torch.int64) - 1
        extra = frames * self.stride + self.kernel - total - x.shape[-1]
        right = max(total // 2, extra)
        if x.shape[-1] <= right:
            x = x * 2
        return torch.nn.functional.pad(x, (total - total // 2, right))


def test_constant_numbers_make_python_branches_plain(tmp_path):
    x = torch.randn(1, 2, 9)
    model = PadFromBuffers().eval()
    plain = convert_for_gpu(model, (x,), tmp_path / "plain.tflite", patches=False, check=False)
    assert plain.error and "data-dependent" in plain.error, plain.summary()
    fixed = convert_for_gpu(model, (x,), tmp_path / "fixed.tflite", only=["patch_fold_constants"], check=False)
    assert fixed.error is None, fixed.summary()
    with torch.no_grad():
        assert torch.equal(GpuRewriteWrapper(model, include=["patch_fold_constants"])(x), model(x))


class KernelByAssignment(nn.Module):
    """diffusers' Upsample1d: a transposed-conv weight built in forward by index assignment into zeros."""

    def __init__(self):
        super().__init__()
        self.register_buffer("kernel", torch.tensor([0.25, 0.75, 0.75, 0.25]))

    def forward(self, x):
        weight = x.new_zeros([x.shape[1], x.shape[1], self.kernel.shape[0]])
        idx = torch.arange(x.shape[1])
        weight[idx, idx] = self.kernel.to(weight)
        return torch.nn.functional.conv_transpose1d(x, weight, stride=2, padding=1)


@pytest.mark.gpu
def test_assignment_into_a_constant_is_a_constant(gpu, tmp_path):
    x = torch.randn(1, 4, 16, generator=torch.Generator().manual_seed(7))
    with torch.no_grad():
        assert torch.equal(GpuRewriteWrapper(KernelByAssignment(), include=["patch_fold_index_math",
                                                                           "patch_fold_constants"])(x),
                           KernelByAssignment()(x))
    fixed = convert_for_gpu(KernelByAssignment(), (x,), tmp_path / "fixed.tflite")
    assert fixed.ok, fixed.summary()
    ops = read_model_info(fixed.path).op_histogram()
    assert not any("SCATTER" in op for op in ops) and "BROADCAST_TO" not in ops, ops


class SinusoidGather(nn.Module):
    """Funnel's relative position table: sin / cos of an arange (through eval-mode dropout), rows gathered by an
    expanded index -- no input in it, so one constant (plain, an unfolded BROADCAST_TO and a one-hot matmul)."""

    def __init__(self, d=16):
        super().__init__()
        self.d, self.drop = d, nn.Dropout(0.1)

    def forward(self, x):                                                  # [B, S, d]
        s = x.shape[1]
        inv_freq = 1 / (10000 ** (torch.arange(0, self.d // 2, dtype=torch.int64).to(x.dtype) / (self.d // 2)))
        sinusoid = torch.arange(-2 * s, 2 * s, dtype=torch.int64).to(x.dtype)[:, None] * inv_freq[None]
        table = torch.cat([self.drop(torch.sin(sinusoid)), self.drop(torch.cos(sinusoid))], -1)
        rel = (torch.arange(s)[:, None] + 2 * s).expand(s, self.d)
        return x + torch.gather(table, 0, rel)


@pytest.mark.gpu
def test_a_sinusoid_table_gathered_is_a_constant(gpu, tmp_path):
    x = torch.randn(2, 8, 16, generator=torch.Generator().manual_seed(8))
    model = SinusoidGather().eval()
    with torch.no_grad():
        assert torch.equal(GpuRewriteWrapper(model, include=["patch_fold_index_math"])(x), model(x))
    plain = convert_for_gpu(model, (x,), tmp_path / "plain.tflite", patches=False)
    assert plain.verdict == "FALLBACK", plain.summary()
    fixed = convert_for_gpu(model, (x,), tmp_path / "fixed.tflite", only=["patch_fold_index_math"])
    assert fixed.ok, fixed.summary()
    assert set(read_model_info(fixed.path).op_histogram()) == {"ADD"}, read_model_info(fixed.path).op_histogram()
