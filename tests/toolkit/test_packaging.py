"""The toolkit imports both ways people use it: vendored (utilities/ on PYTHONPATH) and pip-installed."""
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _import_from(tmp_path, env_extra):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(env_extra)
    code = "import litert_gpu_toolkit, sys; print(litert_gpu_toolkit.__file__); print(litert_gpu_toolkit.__version__)"
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


def test_vendored_import_with_only_utilities_on_path(tmp_path):
    path, version = _import_from(tmp_path, {"PYTHONPATH": str(ROOT / "utilities")})
    assert Path(path).resolve().parent == (ROOT / "utilities" / "litert_gpu_toolkit").resolve()
    assert version


def test_importing_the_package_does_not_import_torch(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(ROOT / "utilities")
    code = "import sys, litert_gpu_toolkit; sys.exit(1 if 'torch' in sys.modules else 0)"
    assert subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, timeout=120).returncode == 0


def test_cli_help_lists_commands(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT / "utilities")}
    out = subprocess.run([sys.executable, "-m", "litert_gpu_toolkit", "--help"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "gpu-info" in out.stdout


def test_the_wheel_carries_every_file_the_package_reads(tmp_path):
    """A `pip install` (not -e) must get the phone registry, the runner's source, not only .py files."""
    import shutil
    import zipfile

    src = tmp_path / "src"               # a copy: setuptools builds in the source tree (build/, egg-info)
    shutil.copytree(ROOT / "utilities", src / "utilities", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    out = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                          "-w", str(tmp_path), str(src)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    (wheel,) = tmp_path.glob("*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    package = ROOT / "utilities" / "litert_gpu_toolkit"
    wanted = {f"litert_gpu_toolkit/{p.relative_to(package).as_posix()}" for p in package.rglob("*")
              if p.is_file() and "__pycache__" not in p.parts}
    assert wanted <= names, f"missing from the wheel: {sorted(wanted - names)}"
