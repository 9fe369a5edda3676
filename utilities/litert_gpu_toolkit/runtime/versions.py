"""Other LiteRT runtime versions, each in a side environment the toolkit makes once and keeps.

An app ships the ai-edge-litert version its build pins, and the GPU accelerator's op support and numerics change
between releases. The compile-and-run child (`runtime.worker`) needs only numpy and ai_edge_litert, so running a
model under another version is running that child with another interpreter: `side_runtime("2.1.3")` makes a
virtual environment holding `ai-edge-litert==2.1.3`, numpy and ml_dtypes (pip, from the package index pip is
configured for), checks that the wheel imports and carries a GPU accelerator, records what it found in
`runtime.json`, and returns it. Later calls reuse it. The folder is `LITERT_GPU_RUNTIMES` when set, else
`~/.cache/litert-gpu-toolkit/runtimes`; a half-made environment is never reused (it is built under a temporary
name and renamed when complete). A development version ("2.4.0.dev20261026") comes from the nightly package
(`ai-edge-litert-nightly`, same module name); "nightly" names the newest one pip's index lists.

`compile_and_run(..., runtime=VERSION)` and `check_gpu_compatibility(..., runtime=VERSION)` use it;
`python -m litert_gpu_toolkit check --runtime VERSION` prints the matrix over versions.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

PACKAGE = "ai-edge-litert"
NIGHTLY = "ai-edge-litert-nightly"      # development builds; versions like 2.4.0.dev20261026
MARKER = "runtime.json"
# installed beside every version: numpy for the worker; ml_dtypes because 2.1.6's wheel imports it without
# declaring it (without it that version does not import at all)
EXTRAS = ("numpy", "ml_dtypes")
OLDEST_COMPILED_MODEL = (2, 0, 0)       # the CompiledModel Python API the worker uses ships from 2.0 on
OLDEST_WITH_GPU = "2.1.2"               # measured: the 2.0.x, 2.1.0 and 2.1.1 wheels carry no GPU accelerator
_VERSION = re.compile(r"^\d+\.\d+\.\d+([.\w+-]*)$")
_PROBE = ("import importlib.util as u, json, pathlib, ai_edge_litert, ai_edge_litert.compiled_model; "
          "root = pathlib.Path(ai_edge_litert.__file__).parent; "
          "gpu = sorted(p.name for p in root.glob('*Gpu*Accelerator*')); "
          "print(json.dumps({'gpu_accelerator': gpu, 'enforce_f32': bool(u.find_spec('ai_edge_litert.gpu_options'))}))")


class RuntimeVersionError(ValueError):
    """A runtime version that cannot be used here; the message says why and what to do."""


@dataclass(frozen=True)
class SideRuntime:
    version: str
    python: Path
    gpu_accelerator: tuple[str, ...]     # the accelerator libraries in its wheel (empty: the wheel has none)
    enforce_f32: bool                    # its Python API can ask the GPU for fp32 (GpuOptions); older ones cannot


def runtimes_dir() -> Path:
    return Path(os.environ.get("LITERT_GPU_RUNTIMES") or Path.home() / ".cache" / "litert-gpu-toolkit" / "runtimes")


def installed_version() -> str:
    """The ai-edge-litert version of this environment (what a run without `runtime` uses); "unknown" when the
    package's metadata cannot be read."""
    try:
        from importlib.metadata import version
        return version(PACKAGE)
    except Exception:  # noqa: BLE001 - reported, not raised
        return "unknown"


def parse_version(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", text.split("dev")[0])[:3])


def validate_version(version: str) -> str:
    """`version` stripped, or RuntimeVersionError for a malformed one or one older than the CompiledModel API."""
    version = str(version).strip()
    if not _VERSION.match(version):
        raise RuntimeVersionError(f"runtime version {version!r} is not a version number (e.g. 2.1.3)")
    if parse_version(version) < OLDEST_COMPILED_MODEL:
        raise RuntimeVersionError(f"ai-edge-litert {version} predates the CompiledModel API (2.0.0): the GPU check "
                                  "cannot run on it")
    return version


def package_of(version: str) -> str:
    """The distribution a version comes from: the nightly package for a development version."""
    return NIGHTLY if ".dev" in version else PACKAGE


def _python_of(env: Path) -> Path:
    return env / ("Scripts/python.exe" if sys.platform == "win32" else "bin/python")


def side_runtime(version: str, progress=None) -> SideRuntime:
    """The side environment of `version`, made on first use (a minute or two: one ~60 MB wheel). Raises
    RuntimeVersionError when it cannot be made (pip's own last line says why) or its wheel has no GPU
    accelerator. progress(text), when given, hears each step."""
    version = validate_version(version)
    home = runtimes_dir() / version
    marker = home / MARKER
    if marker.exists():
        data = json.loads(marker.read_text())
        return SideRuntime(version, _python_of(home), tuple(data.get("gpu_accelerator", ())),
                           bool(data.get("enforce_f32", True)))
    say = progress or (lambda text: None)
    building = runtimes_dir() / f".{version}.building-{os.getpid()}"
    shutil.rmtree(building, ignore_errors=True)
    building.parent.mkdir(parents=True, exist_ok=True)
    try:
        say(f"runtime {version}: making a side environment in {home} (once)")
        _run([sys.executable, "-m", "venv", str(building)], f"could not create a virtual environment for {version}")
        package = package_of(version)
        say(f"runtime {version}: installing {package}=={version} with {', '.join(EXTRAS)}")
        _run([str(_python_of(building)), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
              f"{package}=={version}", *EXTRAS],
             f"pip could not install {package}=={version} (offline, or no wheel of it for this Python / platform)")
        probe = _run([str(_python_of(building)), "-c", _PROBE], f"{package} {version} installed but does not import")
        found = json.loads(probe.strip().splitlines()[-1])
        if not found["gpu_accelerator"]:
            raise RuntimeVersionError(f"{package} {version}'s wheel has no GPU accelerator library: it cannot run "
                                      "a model on the GPU")
        (building / MARKER).write_text(json.dumps({"version": version, **found}, indent=1) + "\n")
        if home.exists():                     # made meanwhile by another process: keep theirs
            shutil.rmtree(building, ignore_errors=True)
        else:
            building.rename(home)
    except BaseException:
        shutil.rmtree(building, ignore_errors=True)
        raise
    return side_runtime(version)


def chosen(version: str | None) -> str | None:
    """The version a run asks for: `version`, else the LITERT_GPU_RUNTIME environment variable's, else None."""
    return version or os.environ.get("LITERT_GPU_RUNTIME") or None


def prepare(version: str | None, progress=None) -> str | None:
    """`version` ready to run (its side environment made), or None when it is the installed one or None."""
    if version is None:
        return None
    version = validate_version(version)
    if version == installed_version():
        return None
    side_runtime(version, progress)
    return version


def _last_line(proc: subprocess.CompletedProcess) -> str:
    """What a failed pip / python call said last (stderr, else stdout)."""
    lines = [ln.strip() for ln in (proc.stderr or proc.stdout or "").splitlines() if ln.strip()]
    return lines[-1] if lines else "no output"


def _run(cmd: list[str], what: str) -> str:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        raise RuntimeVersionError(f"{what}: {_last_line(proc)}")
    return proc.stdout


def _listed(package: str, pre: bool = False) -> list[str]:
    """The versions of `package` pip's index lists (2.0.0 and later), oldest first."""
    cmd = [sys.executable, "-m", "pip", "index", "versions", package, "--disable-pip-version-check"]
    proc = subprocess.run(cmd + (["--pre"] if pre else []), capture_output=True, text=True, timeout=300)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("Available versions:")), None)
    if proc.returncode != 0 or line is None:
        raise RuntimeVersionError(f"could not list {package}'s versions with pip: {_last_line(proc)}")
    found = [v.strip() for v in line.split(":", 1)[1].split(",") if v.strip()]
    return sorted((v for v in found if _VERSION.match(v) and parse_version(v) >= OLDEST_COMPILED_MODEL),
                  key=_order)


def _order(version: str) -> tuple:
    """Release order; a development build sorts before the release of its number, by its date."""
    dev = re.search(r"\.dev(\d+)", version)
    return (*parse_version(version), 0 if dev else 1, int(dev.group(1)) if dev else 0)


def available_versions() -> list[str]:
    """The ai-edge-litert releases pip's index lists that the check can run (2.0.0 and later), oldest first."""
    return _listed(PACKAGE)


def newest_nightly() -> str:
    """The newest development build pip's index lists (`ai-edge-litert-nightly`)."""
    listed = _listed(NIGHTLY, pre=True)
    if not listed:
        raise RuntimeVersionError(f"pip's index lists no {NIGHTLY} build")
    return listed[-1]


def resolve(requested: list[str]) -> list[str]:
    """The versions `check --runtime` asked for, in order, each once: "all" is every available release,
    "installed" this environment's, "nightly" the newest development build."""
    named = {"all": available_versions, "installed": lambda: [installed_version()],
             "nightly": lambda: [newest_nightly()]}
    out: list[str] = []
    for item in requested:
        for v in (named[item]() if item in named else [validate_version(item)]):
            if v not in out:
                out.append(v)
    return out
