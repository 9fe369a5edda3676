"""Every rewrite a symptom table names imports from `litert_gpu_toolkit.rewrites`, where a reader looks first."""
import importlib
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from litert_gpu_toolkit.core.symptoms import SYMPTOMS

ROOT = Path(__file__).resolve().parents[3]

# The rewrites named in the "What you see | Rewrite" table of the GPU-clean conversion method (the spec this
# project implements), as printed there.
SPEC_TABLE = ("patch_grid_sample", "patch_maxpool_zeropad", "patch_interpolate", "patch_patch_merging",
              "pixelshuffle_to_conv_transpose", "patch_window_attention", "patch_einops", "ZeroStuffConvT1d",
              "ZeroStuffConvT2d", "patch_safe_layernorm", "patch_rmsnorm", "patch_instance_norm", "hierarchical_mean")
# the table also names two diagnostic tools and two tools for quantized files, which are the library's own functions,
# not torch rewrites (fc_rank2 rewrites a converted file, quantize_for_gpu writes the forms the GPU reads)
TOOLS = {"bisect", "plan_precision", "fc_rank2", "quantize_for_gpu"}
OWN_TABLE = sorted({name for s in SYMPTOMS for name in s.rewrites} - TOOLS)


@pytest.mark.parametrize("name", SPEC_TABLE)
def test_the_spec_tables_names_import_from_rewrites(name):
    value = getattr(importlib.import_module("litert_gpu_toolkit.rewrites"), name)
    assert callable(value)


@pytest.mark.parametrize("name", OWN_TABLE)
def test_every_name_of_the_toolkits_symptom_table_imports_from_rewrites(name):
    value = getattr(importlib.import_module("litert_gpu_toolkit.rewrites"), name)
    assert callable(value), name


@pytest.mark.parametrize("name", sorted(TOOLS))
def test_the_tools_the_table_names_import_from_the_package(name):
    assert callable(getattr(importlib.import_module("litert_gpu_toolkit"), name))


def test_a_from_import_in_a_fresh_process():
    """The exact statement a reader copies, with nothing imported before it."""
    code = ("from litert_gpu_toolkit.rewrites import patch_safe_layernorm, ZeroStuffConvT2d, hierarchical_mean\n"
            "from litert_gpu_toolkit.rewrites import functional, registry\n"
            "print(patch_safe_layernorm.__module__, ZeroStuffConvT2d.__module__)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                         env={"PYTHONPATH": str(ROOT / "utilities"), "PATH": ""}, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["litert_gpu_toolkit.rewrites.fp16_overflow.norms",
                                  "litert_gpu_toolkit.rewrites.transpose_conv.zero_stuff"]


def test_an_unknown_name_is_an_import_error_that_says_so():
    with pytest.raises(ImportError, match="cannot import name 'patch_that_does_not_exist'"):
        exec("from litert_gpu_toolkit.rewrites import patch_that_does_not_exist", {})
    with pytest.raises(AttributeError, match="not a rewrite any wall module defines"):
        importlib.import_module("litert_gpu_toolkit.rewrites").patch_that_does_not_exist


def test_a_functional_only_rewrite_is_a_callable_that_wraps_the_model():
    from litert_gpu_toolkit.rewrites import lower_rank_views
    from litert_gpu_toolkit.rewrites.functional import GpuRewriteWrapper

    class Rank5(torch.nn.Module):
        def forward(self, x):
            return x.reshape(1, 2, 3, 4, 5).softmax(-1).reshape(1, 120)

    model = Rank5()
    wrapped = lower_rank_views(model)
    assert isinstance(wrapped, GpuRewriteWrapper) and wrapped.include == ["lower_rank_views"]
    x = torch.randn(1, 120)
    torch.testing.assert_close(wrapped(x), model(x), rtol=0, atol=1e-7)
