"""A recipe's metadata file, `models/<family>/<model>/recipe.yaml`: what the model is, where its weights come from,
the graphs with their inputs, the task metric and gates, the devices, and the commands that re-run it.

Read by scripts/rerun_recipes.py (the `rerun` commands, in order) and scripts/gen_docs.py (the model README's card
and the front page's summary rows). tests/recipes/test_metadata.py holds every file to the recipe's scripts and to
its results.json: a recorded gate, graph or command missing here fails there.

    name: MobileNetV2
    task: image classification (ImageNet-1k)
    source: {model: ..., licence: ...}
    weights: {package: name==version, files: [...]}
    graphs: {<graph name as results.json records it>: {export: <command>, inputs: ..., outputs: ...}}
    metric: what verify measures
    gates: [the gate names verify prints and results.json records]
    devices: [the --device values the recorded runs used]
    rerun: [commands run in converted/, in order; a verify_* or run_* command exiting 1 is a recorded result]
"""
from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path

FILE = "recipe.yaml"
_REQUIRED = {"name": str, "task": str, "source": dict, "weights": dict, "graphs": dict, "metric": str,
             "gates": list, "devices": list, "rerun": list}


class MetadataError(ValueError):
    """A recipe.yaml that is missing, unreadable or not of the documented shape (the message names the file)."""


@dataclass(frozen=True)
class Graph:
    name: str
    export: str
    inputs: str
    outputs: str


@dataclass(frozen=True)
class RecipeMetadata:
    folder: Path                  # models/<family>/<model>
    name: str
    task: str
    source: dict
    weights: dict
    graphs: dict[str, Graph]
    metric: str
    gates: tuple[str, ...]
    devices: tuple[str, ...]
    rerun: tuple[str, ...]

    @property
    def converted(self) -> Path:
        return self.folder / "converted"

    def rerun_commands(self) -> list[list[str]]:
        """Each `rerun` entry as an argument list: the script's file name, then its arguments."""
        return [shlex.split(c) for c in self.rerun]

    @staticmethod
    def tolerates_exit_1(argv: list[str]) -> bool:
        """A verify (or run_*) script that exits 1 has recorded failing gates: a result, not a broken run."""
        return Path(argv[0]).name.startswith(("verify_", "run_"))


def load_metadata(folder: str | Path) -> RecipeMetadata:
    """The recipe.yaml of recipe folder `folder` (models/<family>/<model>), checked. Raises MetadataError."""
    import yaml

    folder = Path(folder)
    path = folder / FILE
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise MetadataError(f"{path}: cannot read ({exc.strerror})") from None
    except yaml.YAMLError as exc:
        raise MetadataError(f"{path}: not valid YAML ({exc})") from None
    if not isinstance(data, dict):
        raise MetadataError(f"{path}: expected a mapping of {', '.join(_REQUIRED)}")
    for key, kind in _REQUIRED.items():
        if not isinstance(data.get(key), kind) or not data[key]:
            raise MetadataError(f"{path}: `{key}` must be a non-empty {kind.__name__}")
    unknown = sorted(set(data) - set(_REQUIRED))
    if unknown:
        raise MetadataError(f"{path}: unknown key(s) {', '.join(unknown)} (known: {', '.join(_REQUIRED)})")
    return RecipeMetadata(folder, data["name"], data["task"], data["source"], data["weights"],
                          _graphs(path, data["graphs"]), data["metric"], _strings(path, data, "gates"),
                          _strings(path, data, "devices"), _strings(path, data, "rerun"))


def _graphs(path: Path, graphs: dict) -> dict[str, Graph]:
    out = {}
    for name, g in graphs.items():
        if not isinstance(g, dict) or not all(isinstance(g.get(k), str) for k in ("export", "inputs", "outputs")):
            raise MetadataError(f"{path}: graph {name!r} needs `export`, `inputs` and `outputs` (strings)")
        out[str(name)] = Graph(str(name), g["export"], g["inputs"], g["outputs"])
    return out


def _strings(path: Path, data: dict, key: str) -> tuple[str, ...]:
    if not all(isinstance(v, str) and v.strip() for v in data[key]):
        raise MetadataError(f"{path}: every entry of `{key}` must be a non-empty string")
    return tuple(data[key])


def recipe_folders(models: str | Path) -> list[Path]:
    """Every recipe folder under `models` (models/<family>/<model> holding converted/), sorted."""
    return sorted(p.parent for p in Path(models).glob("*/*/converted") if p.is_dir())
