"""A zoo row's input share (toolkit: convert/sensitivity.py): how much of the output the input drives. A row whose
output is nearly all bias PASSes whatever the GPU does to its features, so the table calls its PASS a weak check.
The measure found the zoo's EnCodec decoder ignoring its codes (its codebook buffer was all zero)."""
import torch
from torch import nn

from litert_zoo.rows import RunSummary, ZooRow
from litert_gpu_toolkit.convert.sensitivity import WEAK, input_share
from litert_zoo.table import render_table
from litert_zoo.weights import redraw_weights


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
