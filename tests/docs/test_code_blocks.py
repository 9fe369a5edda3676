"""Every toolkit import in the docs' Python code blocks names something that exists.

A reader copies these blocks; a renamed module must fail here, not in the reader's project."""
import ast
import importlib
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FENCE = re.compile(r"```python\n(.*?)```", re.S)
IMPORT = re.compile(r"^(from litert_gpu_toolkit[\w.]* import (?:\([^)]*\)|[^\n]*))", re.M)


def _markdown_files() -> list[Path]:
    out = subprocess.run(["git", "ls-files", "*.md"], cwd=ROOT, capture_output=True, text=True, timeout=30)
    return [ROOT / p for p in out.stdout.split()] if out.returncode == 0 else sorted(ROOT.glob("**/*.md"))


def _imports() -> list[tuple[str, str, str]]:
    """(file, module, name) for every `from litert_gpu_toolkit... import name` in a python code block."""
    found = []
    for path in _markdown_files():
        for block in FENCE.findall(path.read_text()):
            for statement in IMPORT.findall(block):
                node = ast.parse(statement).body[0]
                for alias in node.names:
                    found.append((str(path.relative_to(ROOT)), node.module, alias.name))
    return found


IMPORTS = _imports()


def test_the_docs_have_code_blocks_to_check():
    assert len(IMPORTS) >= 8, IMPORTS


@pytest.mark.parametrize("where,module,name", IMPORTS, ids=[f"{f}:{m}.{n}" for f, m, n in IMPORTS])
def test_documented_import_exists(where, module, name):
    mod = importlib.import_module(module)
    if not hasattr(mod, name):
        importlib.import_module(f"{module}.{name}")      # a submodule is importable by name too
