"""Command line: `python -m litert_gpu_toolkit <command> ...`.

Only the chosen command's module is imported, so `--help` is instant and never pulls in torch or LiteRT.
Every command refuses a bad argument with a one-line message and exit status 2 (argparse's own
convention), reports a file it cannot read or write without a traceback, and exits 130 on Ctrl-C
after its child processes are gone.
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys

from ..core.interrupt import EXIT_INTERRUPTED, prompt_interrupt

EXIT_STATUS = """\
Exit status (every command):
  2    bad arguments or input arrays, an unreadable / unwritable file, a FIFO or device where a file belongs,
       an output path that is one of the command's inputs, or (check, lint, phone run) not a readable model
  130  interrupted (Ctrl-C); the runtime child processes are killed first
  check:     0 PASS; 1 FALLBACK, COMPILE_FAIL or NUMERICS_FAIL; 2 INVALID_MODEL or unusable inputs; 3 NO_GPU
  lint:      0 no phone-only risks found; 1 findings
  bisect:    0 every boundary clean; 1 a boundary diverges (or does not run GPU-only)
  gpu-info:  0 a usable GPU; 1 the probe failed; 2 no GPU adapter
  export:    0 every graph PASS (--no-check: converted); 1 a graph did not convert or not PASS; 2 a model
             the task cannot load; 3 NO_GPU (the files are written, unchecked on a GPU)
  quantize:  0 the quantized file passed; 1 nothing quantized passed (OUT is the float file); 3 NO_GPU
  phone:     0 done (run: the phone ran the model); 1 the phone's compile or run failed
  benchmark: 0 every file measured; 1 a file failed to compile or run; 2 bad arguments or files"""

# command -> (module that defines `add_arguments(parser)` and `run(args) -> int`, one-line help).
# The module's docstring is the command's description.
COMMANDS = {
    "check": ("litert_gpu_toolkit.cli.check", "prove GPU residency + numerics of a .tflite (exit 0 = PASS)"),
    "gpu-info": ("litert_gpu_toolkit.runtime.gpu_info", "probe this machine's GPU accelerator (exit 0 = usable)"),
    "bisect": ("litert_gpu_toolkit.diagnose.bisect", "find the first block whose GPU output diverges from torch"),
    "lint": ("litert_gpu_toolkit.lint.mobile", "static lint for phone-only GPU walls (exit 0 = no findings)"),
    "export": ("litert_gpu_toolkit.cli.export", "Hugging Face model + task -> checked GPU .tflite, report, provenance"),
    "quantize": ("litert_gpu_toolkit.cli.quantize", "quantize a .tflite's weights (fp16 / int8 / int4), keep what the "
                 "GPU runs right"),
    "phone": ("litert_gpu_toolkit.cli.phone", "list phones, push the on-device runner, run a model on a phone's GPU"),
    "benchmark": ("litert_gpu_toolkit.cli.benchmark", "init, first-run and steady latency of a .tflite, in the "
                  "leaderboard's fields"),
}


def _chosen(argv: list[str]) -> str | None:
    """The command named in argv (the first word that is not an option), if it is one of ours."""
    for word in argv:
        if not word.startswith("-"):
            return word if word in COMMANDS else None
    return None


def build_parser(load: str | None = "all") -> argparse.ArgumentParser:
    """The parser; `load` names the one command whose module is imported ("all": every one, None: none)."""
    parser = argparse.ArgumentParser(prog="python -m litert_gpu_toolkit", epilog=EXIT_STATUS,
                                     description="Tools for running PyTorch-converted .tflite models fully on the GPU.",
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module_name, help_text) in COMMANDS.items():
        if load not in ("all", name):
            sub.add_parser(name, help=help_text)
            continue
        module = importlib.import_module(module_name)
        p = sub.add_parser(name, help=help_text, description=(module.__doc__ or help_text), epilog=EXIT_STATUS,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        module.add_arguments(p)
        p.set_defaults(_run=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(load=_chosen(argv))
    args = parser.parse_args(argv)
    if not args.command:
        parser.print_help()
        return 2
    try:
        with prompt_interrupt():
            return int(args._run(args) or 0)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:          # `... | head`: the reader has gone; nothing left to say
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
