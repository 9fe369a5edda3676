"""Probe the GPU accelerator: compile a one-op model GPU-only (no CPU fallback) and run it.

When no adapter is found the message names the missing driver (exit statuses: `cli.EXIT_STATUS`).
"""
from __future__ import annotations

import argparse
import json

from .compiled import STATUS_NO_GPU, probe_gpu

NO_GPU_HELP = ("no GPU adapter for LiteRT's WebGPU accelerator (Vulkan). Install a Vulkan driver; on a machine "
               "without a GPU, Mesa >= 25 lavapipe (software Vulkan): `sudo python3 scripts/install_software_gpu.py` "
               "(Debian 12: mesa-vulkan-drivers from bookworm-backports; Ubuntu >= 24.04: mesa-vulkan-drivers)")


def describe(result) -> str:
    if result.ok:
        kind = "software GPU" if result.gpu.is_software else "hardware GPU"
        return f"GPU accelerator OK: {result.gpu.adapter} via {result.gpu.backend} ({kind})"
    if result.status == STATUS_NO_GPU:
        return f"{NO_GPU_HELP}. Runtime said: {result.gpu.no_gpu_reason}"
    return f"GPU probe failed ({result.status}): {result.error}\n{result.log_tail(8)}"


def add_arguments(p: argparse.ArgumentParser) -> None:
    from ..core.arguments import seconds

    p.add_argument("--json", action="store_true", help="print the probe result as JSON")
    p.add_argument("--timeout", type=seconds, default=120.0,
                   help="seconds before the probe is killed, at least 10 (default 120)")


def run(args: argparse.Namespace) -> int:
    result = probe_gpu(timeout=args.timeout)
    if args.json:
        print(json.dumps({"status": result.status, "adapter": result.gpu.adapter, "backend": result.gpu.backend,
                          "software": result.gpu.is_software, "message": describe(result)}))
    else:
        print(describe(result))
    return 0 if result.ok else (2 if result.status == STATUS_NO_GPU else 1)
