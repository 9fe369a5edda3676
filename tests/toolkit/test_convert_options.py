"""ConvertOptions: convert_for_gpu's options as one value, checked when it is made and passed whole."""
import dataclasses

import pytest
import torch

from litert_gpu_toolkit import ConvertOptions, convert_for_gpu


def test_the_value_is_checked_when_it_is_made():
    with pytest.raises(ValueError, match="unknown rewrite names in exclude: \\['patch_nope'\\]"):
        ConvertOptions(exclude=["patch_nope"])
    with pytest.raises(ValueError, match="must be a list of rewrite names, not the string"):
        ConvertOptions(include="patch_select")
    with pytest.raises(ValueError, match="max_tries must be a positive integer"):
        ConvertOptions(max_tries=0)
    with pytest.raises(ValueError, match="diagnose_budget_s must be >= 0"):
        ConvertOptions(diagnose_budget_s=-1)


def test_it_is_frozen_and_normalised():
    opts = ConvertOptions(exclude=["patch_select"], check_kwargs=None)
    assert opts.exclude == ("patch_select",) and opts.check_kwargs == {}
    with pytest.raises(dataclasses.FrozenInstanceError):
        opts.exclude = ()
    assert ConvertOptions(inplace=True).falls_back is False and ConvertOptions().falls_back is True


def test_overrides_change_fields_and_the_rest_goes_to_litert_torch():
    opts = ConvertOptions(exclude=["patch_select"]).with_overrides(max_tries=2, dynamic_shapes={"x": None})
    assert opts.max_tries == 2 and opts.exclude == ("patch_select",)
    assert opts.convert_kwargs == {"dynamic_shapes": {"x": None}}


def test_keywords_and_the_value_take_the_same_path(monkeypatch, tmp_path):
    """convert_for_gpu(m, x, p, exclude=[...]) and convert_for_gpu(m, x, p, ConvertOptions(exclude=[...])) hand
    the conversion the same options."""
    from litert_gpu_toolkit.convert import pipeline

    seen = []
    monkeypatch.setattr(pipeline, "_convert", lambda model, x, path, opts, kwargs, signatures: seen.append(opts))
    model, x = torch.nn.Linear(2, 2), (torch.randn(1, 2),)
    convert_for_gpu(model, x, tmp_path / "a.tflite", exclude=["patch_select"], diagnose_budget_s=0)
    convert_for_gpu(model, x, tmp_path / "b.tflite", ConvertOptions(exclude=["patch_select"], diagnose_budget_s=0))
    assert seen[0] == seen[1] == ConvertOptions(exclude=("patch_select",), diagnose_budget_s=0)


def test_an_unknown_rewrite_name_raises_before_any_work(tmp_path):
    with pytest.raises(ValueError, match="unknown rewrite names in include"):
        convert_for_gpu(torch.nn.Linear(2, 2), (torch.randn(1, 2),), tmp_path / "m.tflite", include=["patch_nope"])
    assert not list(tmp_path.iterdir())
