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
