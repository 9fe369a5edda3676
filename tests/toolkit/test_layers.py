"""The toolkit is a stack of packages whose imports point one way: down.

Read from the source (every import statement, the ones inside functions too), so a lazy import that climbs a
layer fails here as surely as a top-level one. A package may import itself and any package of a lower layer;
packages of one layer do not import each other.
"""
from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "utilities" / "litert_gpu_toolkit"
ROOT = "litert_gpu_toolkit"

# lowest first
LAYERS = [
    ("core",),                          # model reading, inputs, outputs, metrics, symptoms, files, quiet
    ("runtime", "lint", "rewrites"),    # LiteRT in a child process; static lint; torch-level rewrites
    ("check", "lowering", "phone"),     # the checker; torch -> .tflite; the phone runner
    ("diagnose",),                      # bisect and its diagnosis
    ("convert",),                       # convert_for_gpu, repair, precision plans
    ("export", "recipe"),               # export --task; the recipe scripts' plumbing
    ("cli",),                           # one module per command
]
RANK = {pkg: i for i, layer in enumerate(LAYERS) for pkg in layer}


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    """Absolute names of the toolkit modules or packages `path` imports."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found.add(target)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {t for t in found if t == ROOT or t.startswith(ROOT + ".")}


def _package_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def edges() -> list[tuple[str, str, str]]:
    """(importing module, its package, imported package) for every import between two toolkit packages."""
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        here = _module_name(path)
        for target in _imports(path):
            src, dst = _package_of(here), _package_of(target)
            if src != dst:
                out.append((here, src, dst))
    return out


def test_every_package_is_in_a_layer():
    packages = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}
    assert packages == set(RANK), f"add a new package to LAYERS: {sorted(packages ^ set(RANK))}"


def test_the_root_holds_only_the_facade():
    """No flat floor of modules: the root is the public names (__init__) and the command line (__main__)."""
    assert sorted(p.name for p in PACKAGE.glob("*.py")) == ["__init__.py", "__main__.py"]


def test_imports_point_down():
    wrong = []
    for module, src, dst in edges():
        if src in ("", "__main__") or module == f"{ROOT}.__main__":
            continue                     # the facade and `python -m` may reach any layer
        if dst == "":
            wrong.append(f"{module} imports the package root (import from the layer that defines the name)")
        elif RANK[dst] >= RANK[src]:
            wrong.append(f"{module} ({src}, layer {RANK[src]}) imports {dst} (layer {RANK[dst]})")
    assert not wrong, "\n".join(sorted(set(wrong)))


@pytest.mark.parametrize("rule", ["climbing", "sideways"])
def test_the_rule_catches_a_wrong_edge(tmp_path, monkeypatch, rule):
    """The check itself can fail: a rewrite that imports the checker, or a lint that imports a rewrite."""
    fake = tmp_path / "litert_gpu_toolkit"
    for pkg in RANK:
        (fake / pkg).mkdir(parents=True)
        (fake / pkg / "__init__.py").write_text("")
    (fake / "__init__.py").write_text("")
    (fake / "__main__.py").write_text("")
    bad = (("rewrites", "from ..check import checker\n") if rule == "climbing"
           else ("lint", "from ..rewrites import x\n"))
    (fake / bad[0] / "bad.py").write_text(bad[1])
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", fake)
    with pytest.raises(AssertionError, match=f"{ROOT}.{bad[0]}.bad"):
        test_imports_point_down()
