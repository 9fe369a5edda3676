"""Rewrites are found by symptom: each one lives in the module named for the wall it removes."""
import subprocess
import sys
from pathlib import Path

import pytest

from litert_gpu_toolkit.rewrites import registry
from litert_gpu_toolkit.core.symptoms import BY_ID

ROOT = Path(__file__).resolve().parents[3]


def _home(module: str, wall: str) -> bool:
    base = f"litert_gpu_toolkit.rewrites.{wall}"
    return module == base or module.startswith(base + ".")


def test_every_rewrite_lives_in_the_module_named_for_its_symptom():
    assert registry.load_rewrites() == []
    specs = {**registry.PATCHES, **registry.FUNCTIONAL}
    assert len(specs) >= 30
    wrong = []
    for name, spec in specs.items():
        assert spec.wall in BY_ID, f"{name}: wall {spec.wall!r} is not a symptom id"
        if spec.fn is not None and not _home(spec.fn.__module__, spec.wall):
            wrong.append(f"{name} ({spec.wall}) defined in {spec.fn.__module__}")
    for func, entries in registry.HANDLERS.items():
        for name, handler in entries:
            spec = registry.spec_of(name)
            assert spec is not None, f"handler {name!r} has no registered rewrite or declared wall"
            if not _home(handler.__module__, spec.wall):
                wrong.append(f"handler {name} ({spec.wall}) defined in {handler.__module__}")
    assert not wrong, wrong


def test_every_rewrite_module_is_a_symptom_id():
    modules = registry.rewrite_modules()
    assert len(modules) >= 30
    assert set(modules) <= set(BY_ID), sorted(set(modules) - set(BY_ID))


def test_a_new_wall_module_is_found_without_a_list(tmp_path, monkeypatch):
    """Dropping a file into rewrites/ is all it takes: load_rewrites finds it on disk and its patch registers."""
    import litert_gpu_toolkit.rewrites as package

    (tmp_path / "zz_new_wall.py").write_text(
        "from litert_gpu_toolkit.rewrites import register\n"
        "@register('patch_zz_new_wall', wall='zz_new_wall')\n"
        "def patch_zz_new_wall(model):\n    return []\n")
    monkeypatch.setattr(package, "__path__", [*package.__path__, str(tmp_path)])
    monkeypatch.setattr(registry, "_LOADED", False)
    monkeypatch.delitem(sys.modules, "litert_gpu_toolkit.rewrites.zz_new_wall", raising=False)
    try:
        assert "zz_new_wall" in registry.rewrite_modules()
        registry.load_rewrites()
        assert "patch_zz_new_wall" in registry.PATCHES
    finally:
        registry.PATCHES.pop("patch_zz_new_wall", None)
        sys.modules.pop("litert_gpu_toolkit.rewrites.zz_new_wall", None)


def test_the_wrapper_registers_what_it_is_asked_for_in_a_fresh_process():
    """No side-effect import needed: GpuRewriteWrapper loads the rewrites itself, and an unknown name raises."""
    code = ("import torch, torch.nn.functional as F\n"
            "from litert_gpu_toolkit.rewrites.functional import GpuRewriteWrapper\n"
            "class Pad(torch.nn.Module):\n"
            "    def forward(self, x):\n"
            "        return F.pad(x, (2, 2), mode='reflect')\n"
            "w = GpuRewriteWrapper(Pad(), include=['patch_reflect_pad'])\n"
            "x = torch.randn(1, 3, 9)\n"
            "assert torch.equal(w(x), Pad()(x))\n"
            "assert [c.rewrite for c in w.changes] == ['patch_reflect_pad'], w.changes\n"
            "try:\n    GpuRewriteWrapper(Pad(), include=['patch_reflect_pads'])\n"
            "except ValueError as e:\n    print('RAISED', e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         env={"PYTHONPATH": str(ROOT / "utilities"), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr[-2000:]
    assert "RAISED unknown rewrite names in include: ['patch_reflect_pads']" in out.stdout


@pytest.mark.parametrize("old", ["gather", "rank", "conv_transpose", "norms", "state", "spectral", "elementwise",
                                 "normalize", "attention_bias", "identical_inputs"])
def test_old_module_paths_are_gone(old):
    assert not (ROOT / "utilities" / "litert_gpu_toolkit" / "rewrites" / f"{old}.py").exists()
