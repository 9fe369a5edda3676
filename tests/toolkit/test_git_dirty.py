"""`recipe.results.git_dirty`: a record's provenance says whether tracked files differed from the commit; `ignore`
leaves out the files the run itself writes (the zoo's results and tables)."""
import subprocess

from litert_gpu_toolkit.recipe.results import git_dirty


def _git(cwd, *args):
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


def test_changes_to_ignored_paths_do_not_make_the_tree_dirty(tmp_path):
    _git(tmp_path, "init", "-q")
    (tmp_path / "zoo").mkdir()
    (tmp_path / "zoo" / "results.json").write_text("{}")
    (tmp_path / "code.py").write_text("x = 1\n")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-q", "-m", "first")
    results = lambda p: p.startswith("zoo/") and p.endswith("results.json")      # noqa: E731
    assert git_dirty(tmp_path) is False and git_dirty(tmp_path, ignore=results) is False
    (tmp_path / "zoo" / "results.json").write_text('{"rows": []}')
    assert git_dirty(tmp_path) is True and git_dirty(tmp_path, ignore=results) is False
    (tmp_path / "code.py").write_text("x = 2\n")
    assert git_dirty(tmp_path, ignore=results) is True
