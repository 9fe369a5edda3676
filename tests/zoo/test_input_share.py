"""A zoo row's input share (litert_zoo/sensitivity.py): how much of the output the input drives. A row whose output
is nearly all bias PASSes whatever the GPU does to its features, so the table calls its PASS a weak check. The
measure found the zoo's EnCodec decoder ignoring its codes (its codebook buffer was all zero)."""
import torch
from torch import nn

from litert_zoo.rows import RunSummary, ZooRow
from litert_zoo.sensitivity import WEAK, input_share, other_draw
from litert_zoo.table import render_table
from litert_zoo.weights import redraw_weights


def _linear(weight_scale: float, bias_scale: float) -> nn.Linear:
    torch.manual_seed(0)
    layer = nn.Linear(64, 32).eval()
    with torch.no_grad():
        layer.weight.normal_(0, weight_scale / 8)
        layer.bias.normal_(0, bias_scale)
    return layer


def test_a_bias_dominated_output_has_a_small_share_and_an_input_driven_one_about_one():
    x = (torch.randn(4, 64),)
    assert input_share(_linear(1e-3, 1.0), x) < 0.01
    assert 0.8 < input_share(_linear(1.0, 0.0), x) < 1.2


class Tokens(nn.Module):
    def __init__(self):
        super().__init__()
        self.table = nn.Embedding(100, 8)

    def forward(self, ids, mask):
        return self.table(ids) * mask[..., None]


def test_token_ids_are_redrawn_and_masks_kept():
    ids, mask = torch.randint(0, 100, (1, 16)), torch.tensor([[1] * 12 + [0] * 4])
    new_ids, new_mask = other_draw((ids, mask))
    assert not torch.equal(new_ids, ids) and int(new_ids.min()) >= int(ids.min()) and int(new_ids.max()) <= 99
    assert torch.equal(new_mask, mask)
    assert input_share(Tokens().eval(), (ids, mask)) > 0.5


class Codebook(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("embed", torch.zeros(16, 8))

    def forward(self, codes):
        return nn.functional.embedding(codes, self.embed).sum(-1) + 1.0


def test_a_zero_codebook_buffer_is_redrawn_so_the_codes_matter():
    model, codes = Codebook().eval(), (torch.randint(0, 16, (1, 32)),)
    assert input_share(model, codes) is None                     # a constant output: no spread to measure
    redraw_weights(model)
    assert input_share(model, codes) > 0.5


def _row(name, share):
    return ZooRow(name, "vision", gpu=RunSummary("PASS", "GPU residency: 9/9 ops", 0.999999, 1.0),
                  library="timm", input_share=share)


def test_the_table_calls_a_weak_pass_so():
    rows = {"weak": _row("weak", WEAK / 10), "strong": _row("strong", 0.5), "unmeasured": _row("unmeasured", None)}
    table = render_table(rows, {"ai-edge-litert": "2.3.0"})
    assert "Of the PASS rows, 1 are weak checks" in table and "measured for 2 of 3 rows" in table
    weak = next(line for line in table.splitlines() if line.startswith("| weak |"))
    strong = next(line for line in table.splitlines() if line.startswith("| strong |"))
    assert "weak check" in weak and "0.005" in weak and "weak check" not in strong
