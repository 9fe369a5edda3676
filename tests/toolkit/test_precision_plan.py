"""A precision plan cuts a model into strictly-GPU graphs, runs the fp16-sensitive one in fp32 and chains them:
exact in torch, refused where a cut is crossed by a skip connection, and on the GPU it matches torch where the
fp16 graph does not (its cost measured against the one-graph fp16 and fp32 files in the same call)."""
import pytest
import torch
import torch.nn as nn

from litert_gpu_toolkit.core.model_info import read_model_info
from litert_gpu_toolkit.convert.precision_plan import CutError, PrecisionPlan, _piece, plan_precision
from torch_helpers import Cancel  # tests/torch_helpers.py


class Chain(nn.Module):
    def __init__(self):
        super().__init__()
        self.pre = nn.Conv1d(8, 256, 1)
        self.body = Cancel()
        self.post = nn.Conv1d(256, 1, 1)

    def forward(self, x):
        return torch.tanh(self.post(self.body(torch.relu(self.pre(x)))))


class Skip(nn.Module):
    def __init__(self):
        super().__init__()
        self.pre, self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 4), nn.Linear(4, 4)

    def forward(self, x):
        h = self.pre(x)
        return self.b(self.a(h)) + h


def test_pieces_chain_to_the_model_bit_for_bit():
    torch.manual_seed(0)
    model, x = Chain().eval(), torch.randn(1, 8, 64)
    with torch.no_grad():
        h = _piece(model, None, "pre")(x)
        y = _piece(model, "pre", None)(h, x)
        assert torch.equal(y, model(x)) and torch.equal(h, model.pre(x))


def test_a_skip_across_a_cut_is_recomputed_from_the_inputs():
    """The later piece gets the model's inputs too, so it recomputes `pre` for the skip: still exact."""
    torch.manual_seed(0)
    model, x = Skip().eval(), torch.randn(2, 4)
    with torch.no_grad():
        assert torch.equal(_piece(model, "a", None)(_piece(model, None, "a")(x), x), model(x))


def test_bad_cuts_are_refused(tmp_path):
    with pytest.raises(CutError, match="no module"):
        plan_precision(Skip(), (torch.randn(2, 4),), ["nope"], [1], tmp_path)
    with pytest.raises(CutError, match="out of range"):
        plan_precision(Skip(), (torch.randn(2, 4),), ["a"], [2], tmp_path)


@pytest.mark.gpu
def test_gpu_plan_matches_torch_where_fp16_does_not(gpu, tmp_path):
    torch.manual_seed(0)
    model, x = Chain().eval(), torch.randn(1, 8, 256)
    plan = plan_precision(model, (x,), ["pre"], [1], tmp_path)
    assert [g.fp32 for g in plan.graphs] == [False, True]
    assert "CONV_2D" in read_model_info(plan.graphs[1].path).op_histogram()
    plan = PrecisionPlan.load(plan.save(tmp_path / "plan.json"))
    m = plan.measure((x,), model, repeats=2)
    assert m.corr_fp16 < 0.999 <= m.corr_chain, m.summary()
    assert m.corr_fp32 > 0.9999 and m.ms_chain > 0 and m.ms_fp16 > 0 and m.ms_fp32 > 0, m.summary()


@pytest.mark.gpu
def test_a_recipe_plan_costs_its_chain_against_both_whole_graphs(gpu, tmp_path):
    """recipe.plans.plan_cost: the chain, the whole graph in fp16 and in fp32, in turn for each round on the same
    samples; medians per sample and the chain's ratio to each (scripts/measure_plan_cost.py records them)."""
    from pathlib import Path

    from litert_gpu_toolkit.recipe.plans import plan_cost

    torch.manual_seed(0)
    model, x = Chain().eval(), torch.randn(1, 8, 256)
    plan = plan_precision(model, (x,), ["pre"], [1], tmp_path)
    row = plan_cost(plan.save(tmp_path / "plan.json"), Path(plan.whole), [(x.numpy(),), (2 * x.numpy(),)],
                    "host-gpu", rounds=2)
    assert not row["failed"], row
    ms = row["ms_per_sample"]
    assert all(ms[k] > 0 for k in ("fp16", "fp32", "chain")), row
    assert row["chain_over_fp16"] == round(ms["chain"] / ms["fp16"], 3) and row["rounds"] == 2
    assert "(fp32)" in row["residency"]["chain"] and "strict GPU" in row["residency"]["fp16"]
