"""Phones: list the registry, push the on-device runner, or run a model on a phone's GPU; the same runner on
this machine (`--device host-native`).

  python -m litert_gpu_toolkit phone list
  python -m litert_gpu_toolkit phone build-native              # the runner for this machine (scripts/setup.sh does it)
  python -m litert_gpu_toolkit phone push-runner BUILD_DIR --device pixel8
  python -m litert_gpu_toolkit phone run MODEL.tflite --device pixel8 [--inputs in.npz]
  python -m litert_gpu_toolkit phone run MODEL.tflite --device host-native

See utilities/litert_gpu_toolkit/phone/README.md for building the runner with the Android NDK
(scripts/build_phone_runner.sh).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from ..core.arguments import positive_int
from ..core.errors import DeviceError
from ..phone import PhoneError, load_registry, push_runner, run_on_phone


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("action", choices=["list", "build-native", "push-runner", "run"])
    p.add_argument("path", nargs="?", type=Path, help="BUILD_DIR for push-runner, MODEL for run")
    p.add_argument("--device", default="pixel8",
                   help="phone name from devices.json (default pixel8); run also takes host-native (this machine)")
    p.add_argument("--inputs", type=Path, help="run: .npz of input arrays by input name (default: zeros)")
    p.add_argument("--fp32", action="store_true", help="run: GPU with enforce_f32")
    p.add_argument("--runs", type=positive_int, default=10,
                   help="run: runs after the compile (default 10): the first is the cold one, the rest give the "
                        "steady median")


def run(args: argparse.Namespace) -> int:
    phones = load_registry()
    if args.action == "build-native":
        from ..phone.native import NativeRunnerError, build_host_runner

        try:
            print(build_host_runner(verbose=True))
        except NativeRunnerError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        return 0
    if args.action == "list":
        for name, ph in phones.items():
            print(f"{name:12s} {ph.description}: {ph.soc}, {ph.gpu} [{ph.gpu_family}]")
        return 0
    if args.path is None:
        print(f"error: phone {args.action}: a path is required", file=sys.stderr)
        return 2
    native = args.action == "run" and args.device == "host-native"
    if args.device not in phones and not native:
        print(f"error: unknown phone {args.device!r}; known: {', '.join(phones)}"
              + (" (and host-native for run)" if args.action == "run" else ""), file=sys.stderr)
        return 2
    from ..core.inputs import InputError, fit_array, load_npz, model_signatures
    from ..core.model_info import InvalidModelError

    try:
        if args.action == "push-runner":
            pushed = push_runner(args.path, phones[args.device])
            print("pushed: " + ", ".join(pushed))
            return 0
        from ..core.model_info import numpy_dtype, read_model_info
        from ..runtime.residency import residency_line

        info = read_model_info(args.path)
        sig = model_signatures(info)[0]
        if args.inputs:
            named = load_npz(args.inputs)
            unknown = sorted(set(named) - set(sig.inputs))
            missing = sorted(set(sig.inputs) - set(named))
            if unknown or missing:
                raise InputError(f"{args.inputs}: the model's inputs are {', '.join(sig.inputs) or 'none'}"
                                 + (f"; not inputs: {', '.join(unknown)}" if unknown else "")
                                 + (f"; missing: {', '.join(missing)}" if missing else ""))
            # the signature's shape and dtype exactly, no NaN: the phone would otherwise cast quietly
            named = {n: fit_array(sig.key, n, sig.inputs[n], np.asarray(a)) for n, a in named.items()}
        else:
            try:
                named = {n: np.zeros(t.shape, numpy_dtype(t.dtype)) for n, t in sig.inputs.items()}
            except TypeError as exc:
                raise InputError(f"cannot make zero inputs: {exc}; pass --inputs") from None
        if native:
            from ..phone.native import run_native

            result = run_native(args.path, {sig.key: named}, enforce_f32=args.fp32, repeats=args.runs)
        else:
            result = run_on_phone(args.path, {sig.key: named}, args.device, enforce_f32=args.fp32,
                                  repeats=args.runs)
    except (PhoneError, DeviceError, InvalidModelError, InputError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(residency_line(info, result))
    print(f"status: {result.status}" + (f" ({result.error})" if result.error else ""))
    times = result.times.get(sig.key) or []
    if result.ok and times:
        from .benchmark import latency_ms

        lat = latency_ms(result.compile_s, times, warmup=0)
        print(f"init (compile) {lat['init']} ms; first run {lat['first_inference']} ms; steady median "
              f"{lat['median']} ms (p5 {lat['p5']}, p95 {lat['p95']}, {max(len(times) - 1, 1)} runs)")
    return 0 if result.ok else 1
