"""Every flag that a recipe README shows on a script's command line is a flag that script takes.

READMEs are read as documentation and their commands are pasted as they are: a renamed option must
fail here. Each script's `--help` is read once (it never imports torch, so this is quick)."""
import functools
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
COMMAND = re.compile(r"python3? (?:converted/)?(\w+\.py)([^\n`|#]*)")
FLAG = re.compile(r"(?<![\w-])(--[a-z][\w-]*)")


@functools.lru_cache(maxsize=None)
def help_text(script: Path) -> str:
    out = subprocess.run([sys.executable, str(script), "--help"], capture_output=True, text=True, timeout=120,
                         cwd=script.parent)
    assert out.returncode == 0, f"{script.name} --help: {out.stderr[-500:]}"
    return out.stdout


def _uses() -> list[tuple[str, str, str]]:
    found = []
    for readme in sorted(ROOT.glob("models/*/*/README.md")) + sorted(ROOT.glob("models/*/*/converted/README.md")):
        recipe = readme.parent if readme.parent.name == "converted" else readme.parent / "converted"
        for script, rest in COMMAND.findall(readme.read_text()):
            if not (recipe / script).exists():
                found.append((str(readme.relative_to(ROOT)), script, "<missing script>"))
                continue
            for flag in FLAG.findall(rest):
                found.append((str(readme.relative_to(ROOT)), script, flag))
    return sorted(set(found))


USES = _uses()


def test_readmes_show_commands_with_flags():
    assert len(USES) >= 20, USES


@pytest.mark.parametrize("readme,script,flag", USES, ids=[f"{r}:{s}:{f}" for r, s, f in USES])
def test_readme_flag_exists(readme, script, flag):
    assert flag != "<missing script>", f"{readme} runs {script}, which the recipe does not have"
    recipe = ROOT / Path(readme).parent
    recipe = recipe if recipe.name == "converted" else recipe / "converted"
    assert re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", help_text(recipe / script)), \
        f"{readme} shows `{script} {flag}`, but {script} has no such option"
