"""The calling-convention matrix (zoo/litert_zoo/models/calls.py): each text row called the ways users call it,
beside the zoo's own call -- in torch here (the conversions are `zoo/run.py --calls`)."""
import pytest
import torch

from litert_zoo.models import CALL_ROWS, ROWS, ZOO
from litert_zoo.models.calls import CALLS, render_matrix
from litert_zoo.rows import RunSummary, ZooRow
from litert_zoo.weights import redraw_weights


def test_every_text_row_has_every_call_and_no_zoo_row_changes():
    text = [m.name for m in ROWS if m.domain == "text"]
    assert text and set(CALL_ROWS) == {f"{n}@{c}" for n in text for c in CALLS}
    assert not set(CALL_ROWS) & set(ZOO)


@pytest.mark.parametrize("call, names, batch", [
    ("ids_b1", ["input_ids"], 1), ("ids_b2", ["input_ids"], 2), ("mask_b1", ["input_ids", "attention_mask"], 1),
    ("mask_b2", ["input_ids", "attention_mask"], 2), ("all_b2", ["input_ids", "attention_mask", "token_type_ids"], 2),
])
def test_a_call_passes_exactly_its_inputs_to_the_same_model(call, names, batch):
    pytest.importorskip("transformers")
    model, args = CALL_ROWS[f"bert@{call}"].build()
    assert list(model.names) == names and all(a.shape[0] == batch for a in args)
    if call == "mask_b1":
        assert int(args[1].sum()) < args[1].shape[1], "batch 1 with a mask is the padded sequence"
    with torch.no_grad():
        want = model.model(**dict(zip(names, args))).last_hidden_state
        got = model(*args)
    assert torch.equal(got[0] if isinstance(got, tuple) else got, want)


def test_library_mode_leaves_the_weights_as_initialised():
    layer = torch.nn.Linear(4, 4)
    before = layer.weight.detach().clone()
    redraw_weights(layer, activations="library")
    assert torch.equal(layer.weight, before)


def test_the_matrix_shows_one_line_per_row_and_one_column_per_call():
    rows = {f"bert@{c}": ZooRow(f"bert@{c}", "text", gpu=RunSummary("PASS" if c != "ids_b1" else "FALLBACK",
                                                                      residency="9/10 ops"))
            for c in CALLS}
    text = render_matrix(rows, {"gpu": "llvmpipe", "gpu_is_software": True, "ai-edge-litert": "2.3.0"})
    assert "| bert | FALLBACK | PASS |" in text and "5/6 PASS" in text and "`bert@ids_b1`: 9/10 ops" in text
