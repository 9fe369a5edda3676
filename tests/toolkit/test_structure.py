"""The toolkit's shape, held by tests: layers, no import cycles, function budgets, a light command line.

The import graph counts every import of a toolkit module, at module level or inside a function: a lazy
import still ties two modules together, and a cycle through one is still a cycle to a reader.
"""
import ast
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "utilities" / "litert_gpu_toolkit"

# The toolkit's packages as layers, lowest first. A package may import itself and any package of a lower layer;
# packages of one layer do not import each other.
LAYERS = [
    ("core",),                          # model reading, inputs, outputs, metrics, symptoms, files, quiet
    ("runtime", "lint", "rewrites"),    # LiteRT in a child process; static lint; torch-level rewrites
    ("check", "lowering", "phone", "legalize"),  # the checker; torch -> .tflite; the phone runner; the graph pass
    ("diagnose", "quantize"),           # bisect and its diagnosis; quantized weights checked on the GPU
    ("convert",),                       # convert_for_gpu, repair, precision plans
    ("export", "recipe"),               # export --task; the recipe scripts' plumbing
    ("cli",),                           # one module per command
]
RANK = {pkg: i for i, layer in enumerate(LAYERS) for pkg in layer}


def _module_name(path: Path) -> str:
    parts = path.relative_to(PKG.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """module -> the toolkit modules it imports (`from . import x` counts as importing `x`)."""
    modules = {_module_name(p): p for p in PKG.rglob("*.py")}
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text())):
            targets = []
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")
                    base = base[: len(base) - (node.level - 1)]
                    stem = ".".join(base + ([node.module] if node.module else []))
                else:
                    stem = node.module or ""
                targets = [stem] + [f"{stem}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            for t in targets:
                if t in modules and t != name:
                    graph[name].add(t)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle, or None. A package's __init__ re-exporting its own submodules is not a cycle:
    edges from a package to its children are skipped."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str):
        state[m] = 1
        stack.append(m)
        for t in sorted(graph[m]):
            if t.startswith(m + "."):
                continue
            if state.get(t) == 1:
                return stack[stack.index(t):] + [t]
            if not state.get(t):
                found = visit(t)
                if found:
                    return found
        stack.pop()
        state[m] = 2
        return None

    for m in sorted(graph):
        if not state.get(m):
            found = visit(m)
            if found:
                return found
    return None


def test_the_import_graph_has_no_cycle():
    graph = import_graph()
    assert len(graph) > 40 and graph["litert_gpu_toolkit.check.checker"], "the graph was not read"
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_no_cycle_between_sub_packages():
    """Also at the level a reader sees first: `phone/`, `recipe/`, `rewrites/` and the top-level modules
    (a module importing a name that a sibling package re-exports still ties the two packages together)."""
    top = "litert_gpu_toolkit"

    def part(m: str) -> str:
        return ".".join(m.split(".")[:2]) if m != top else top

    collapsed: dict[str, set[str]] = {}
    for m, targets in import_graph().items():
        collapsed.setdefault(part(m), set()).update(part(t) for t in targets if part(t) != part(m))
    cycle = find_cycle(collapsed)
    assert cycle is None, "import cycle between parts of the toolkit: " + " -> ".join(cycle)


def test_the_cycle_finder_finds_one():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"p": {"p.x"}, "p.x": {"p"}}) is None     # a package and its own child


def _package(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def test_every_package_is_in_a_layer():
    packages = {p.name for p in PKG.iterdir() if (p / "__init__.py").exists()}
    assert packages == set(RANK), f"add a new package to LAYERS: {sorted(packages ^ set(RANK))}"


def test_the_root_holds_only_the_facade():
    """No flat floor of modules: the root is the public names (__init__) and the command line (__main__)."""
    assert sorted(p.name for p in PKG.glob("*.py")) == ["__init__.py", "__main__.py"]


def test_imports_point_down():
    wrong = []
    for module, targets in import_graph().items():
        src = _package(module)
        if src in ("", "__main__"):
            continue                     # the facade and `python -m` may reach any layer
        for target in targets:
            dst = _package(target)
            if dst == src:
                continue
            if dst == "":
                wrong.append(f"{module} imports the package root (import from the layer that defines the name)")
            elif RANK[dst] >= RANK[src]:
                wrong.append(f"{module} ({src}, layer {RANK[src]}) imports {target} ({dst}, layer {RANK[dst]})")
    assert not wrong, "\n".join(sorted(set(wrong)))


@pytest.mark.parametrize("rule", ["climbing", "sideways", "the root"])
def test_the_layer_rule_catches_a_wrong_edge(tmp_path, monkeypatch, rule):
    """The check itself can fail: a rewrite that imports the checker, a lint that imports a rewrite, a module that
    takes a name from the package root."""
    fake = tmp_path / "litert_gpu_toolkit"
    for pkg in RANK:
        (fake / pkg).mkdir(parents=True)
        (fake / pkg / "__init__.py").write_text("")
    (fake / "__init__.py").write_text("")
    (fake / "__main__.py").write_text("")
    (fake / "check" / "checker.py").write_text("")
    (fake / "rewrites" / "x.py").write_text("")
    where, code = {"climbing": ("rewrites", "from ..check import checker\n"),
                   "sideways": ("lint", "from ..rewrites import x\n"),
                   "the root": ("core", "from .. import __version__\n")}[rule]
    (fake / where / "bad.py").write_text(code)
    monkeypatch.setattr(sys.modules[__name__], "PKG", fake)
    with pytest.raises(AssertionError, match=f"litert_gpu_toolkit.{where}.bad"):
        test_imports_point_down()


# A wall that builds on another wall's rewrite (not a helper: a whole module or its math) says so here; helpers
# several walls use live in rewrites/shared.py (or the machinery modules).
WALL_ON_WALL = {
    ("batch_matmul", "masked_attention"),     # tags attention scores the masked-attention rule then reads
    ("masked_attention", "fp16_overflow"),    # the fp16-safe softmax
    ("fp16_silent_zero", "fp16_overflow"),    # SafeRMSNorm is the down-scaled norm family's
    ("fft", "transpose_conv"),                # the iSTFT's overlap-add is a polyphase transposed conv
    ("transpose_conv", "rank_gt_4"),          # depth-to-space at rank 4
}


def test_walls_import_each_other_only_where_one_builds_on_the_other():
    from litert_gpu_toolkit.rewrites.registry import MACHINERY

    prefix = "litert_gpu_toolkit.rewrites."
    found = set()
    for module, targets in import_graph().items():
        if not module.startswith(prefix):
            continue
        wall = module[len(prefix):].split(".")[0]
        for target in targets:
            if target.startswith(prefix):
                other = target[len(prefix):].split(".")[0]
                if wall not in MACHINERY and other not in MACHINERY and other != wall:
                    found.add((wall, other))
    assert found <= WALL_ON_WALL, f"walls importing walls (share the helper through rewrites/shared.py): " \
                                  f"{sorted(found - WALL_ON_WALL)}"


def test_function_budgets_are_in_force():
    """The module line cap is replaced by function budgets in ruff (pyproject.toml): complexity and arguments."""
    import tomllib

    lint = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["ruff"]["lint"]
    assert {"C901", "PLR0913"} <= set(lint["select"])
    assert lint["mccabe"]["max-complexity"] <= 20 and lint["pylint"]["max-args"] <= 11


def _python(code: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout,
                          cwd=ROOT)


COMMANDS = ("check", "gpu-info", "bisect", "lint", "phone", "quantize")


@pytest.mark.parametrize("argv", [["--help"]] + [[c, "--help"] for c in COMMANDS])
def test_help_never_imports_torch(argv):
    code = (
        "import sys\nfrom litert_gpu_toolkit.cli.main import main\n"
        f"try:\n    main({argv!r})\nexcept SystemExit:\n    pass\n"
        "heavy = sorted(m for m in ('torch', 'litert_torch', 'transformers', 'ai_edge_litert') if m in sys.modules)\n"
        "print('HEAVY', heavy)\n"
    )
    out = _python(code)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "HEAVY []" in out.stdout, out.stdout[-500:]


@pytest.fixture(scope="module")
def tiny_tflite(tmp_path_factory):
    from litert_gpu_toolkit.runtime.tiny_models import add_model_bytes

    path = tmp_path_factory.mktemp("tiny") / "add.tflite"
    path.write_bytes(add_model_bytes())
    return path


@pytest.mark.parametrize(
    "argv", [["lint", "{m}"], ["check", "{m}", "--fp16-only", "--timeout", "120"], ["gpu-info", "--timeout", "120"]]
)
def test_check_lint_gpu_info_never_import_torch(argv, tiny_tflite):
    argv = [a.format(m=tiny_tflite) for a in argv]
    code = (
        "import sys\nfrom litert_gpu_toolkit.cli.main import main\n"
        f"rc = main({argv!r})\n"
        "print('RC', rc, 'TORCH', 'torch' in sys.modules)\n"
    )
    out = _python(code, timeout=300)
    assert "TORCH False" in out.stdout, out.stdout[-1000:] + out.stderr[-1000:]


def test_help_is_fast():
    """`python -m litert_gpu_toolkit --help` under 0.5 s (the best of five runs: the machines are shared)."""
    best = float("inf")
    for _ in range(5):
        t = time.perf_counter()
        out = subprocess.run(
            [sys.executable, "-m", "litert_gpu_toolkit", "--help"], capture_output=True, text=True, timeout=60, cwd=ROOT
        )
        best = min(best, time.perf_counter() - t)
        assert out.returncode == 0 and "check" in out.stdout
    assert best < 0.5, f"--help took {best:.2f} s"
