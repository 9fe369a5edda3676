"""Command line: `python -m litert_gpu_toolkit <command> ...` (see `--help`)."""
from __future__ import annotations

import argparse
import importlib
import sys

# command -> (module that defines `add_arguments(parser)` and `run(args) -> int`, one-line help)
COMMANDS = {
    "check": ("litert_gpu_toolkit.checker", "prove GPU residency + numerics of a .tflite (exit 0 = PASS)"),
    "gpu-info": ("litert_gpu_toolkit.gpu_info", "probe this machine's GPU accelerator (exit 0 = usable)"),
    "bisect": ("litert_gpu_toolkit.bisect", "find the first block whose GPU output diverges from torch"),
    "lint": ("litert_gpu_toolkit.lint", "static lint for phone-only GPU walls (exit 0 = no findings)"),
    "phone": ("litert_gpu_toolkit.phone.cli", "list phones, push the on-device runner, run a model on a phone's GPU"),
    "zoo": ("litert_gpu_toolkit.zoo", "run tiny transformers architectures plain and through convert_for_gpu"),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m litert_gpu_toolkit",
                                     description="Tools for running PyTorch-converted .tflite models fully on the GPU.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module_name, help_text) in COMMANDS.items():
        module = importlib.import_module(module_name)
        p = sub.add_parser(name, help=help_text, description=(module.__doc__ or help_text),
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        module.add_arguments(p)
        p.set_defaults(_run=module.run)
    args = parser.parse_args(argv)
    if not args.command:
        parser.print_help()
        return 2
    return int(args._run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
