#!/usr/bin/env python
"""Generate with the two .tflite graphs and check every step against the torch reference (dump_llm_ref.py).

1. prefill: all prompts through prefill.tflite with the toolkit's `run_on_device` (a child process, one
   compile, strict GPU-only on GPU devices): residency line, latency, step-0 logits, and each prompt's
   KV cache.
2. decode residency: one decode step through `run_on_device` (strict, 3 timed repeats).
3. generation (host devices; in this process, same strict compile): per prompt, --steps decode steps
   carrying the graphs' OWN cache (prefill's caches, then each step's outputs become the next inputs).
   Teacher-forced: step j gets the torch greedy token j, so one early mismatch does not cascade.
   Free-running: greedy on the graphs' own argmax. Until its first token differs from torch's, it is
   the teacher-forced run itself; from there it continues alone from a copy of the cache.

Per step (prefill = step 0): correlation of the logits with torch's, top-1 agreement with torch's
greedy token. Gates: strict GPU residency of both graphs (GPU devices), top-1 agreement >= 97 % over all
steps of all prompts, min logits correlation >= 0.999. Results go to results.json here (or --results-dir).
Exit status: 0 passed, 1 a gate failed, 2 unknown device / a phone (the loop needs a host device) / a missing or
corrupt artifact, 3 no usable GPU (nothing recorded).

    python verify_llm.py                               # host GPU fp16: all prompts, 32 steps (see README.md)
    python verify_llm.py --device host-gpu-fp32        # GPU with fp32 compute
    python verify_llm.py --device cpu                  # LiteRT CPU, for the latency comparison
    python verify_llm.py --prompts 1 --steps 4         # the CI subset (dump the same subset first)
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
from tqdm import tqdm

from litert_gpu_toolkit.core.metrics import compare
from litert_gpu_toolkit.recipe import (LATENCY_METRIC, DeviceError, add_ref_argument, finish_verify,
                                       fixed_inputs_only, is_native, latency_ms, load_model, load_reference,
                                       open_session, print_failure, residency, run_on_device, strict_gates,
                                       verify_main, verify_parser)

HERE = Path(__file__).resolve().parent

TOP1_GATE, CORR_GATE = 0.97, 0.999


def generate(session, dims, length: int, cache: dict, ref_tokens: np.ndarray,
             first_logits: np.ndarray, steps: int, capacity: int) -> tuple[list[np.ndarray], list[int]]:
    """Teacher-forced logits [steps] (step j fed torch's token j) and the free-running tokens [steps + 1]."""
    import decoder as D

    free = [int(first_logits.argmax())]
    forked = None                                     # (step, cache) where free-running left torch's path
    logits = []
    for j in tqdm(range(steps), desc="  decode (teacher-forced)", unit="step", leave=False, file=sys.stdout):
        if forked is None and free[j] != ref_tokens[j]:
            forked = (j, dict(cache))
        out = session.run({**D.decode_inputs(dims, int(ref_tokens[j]), length + j, capacity), **cache})
        logits.append(out.pop("logits").reshape(-1))
        cache = out
        if forked is None:
            free.append(int(logits[-1].argmax()))
    if forked is not None:
        j0, cache = forked
        for j in tqdm(range(j0, steps), desc="  decode (free-running)", unit="step", leave=False, file=sys.stdout):
            out = session.run({**D.decode_inputs(dims, free[j], length + j, capacity), **cache})
            free.append(int(out.pop("logits").argmax()))
            cache = out
    return logits, free


def main() -> int:
    p = verify_parser(__doc__, HERE)
    p.add_argument("--model", type=Path, default=HERE / "artifacts", metavar="DIR",
                   help="the folder holding prefill.tflite and decode.tflite (default: artifacts)")
    p.add_argument("--prefill", type=Path, default=None, metavar="TFLITE",
                   help="the prefill graph, when not <model>/prefill.tflite")
    p.add_argument("--decode", type=Path, default=None, metavar="TFLITE",
                   help="the decode graph, when not <model>/decode.tflite")
    add_ref_argument(p, HERE / "artifacts" / "llm_ref.npz", writes=False)
    p.add_argument("--prompts", type=int, default=None, metavar="N", help="only the first N prompts of the dump")
    p.add_argument("--steps", type=int, default=None, metavar="K", help="decode steps (default: all in the dump)")
    args = p.parse_args()
    args.prefill = args.prefill or args.model / "prefill.tflite"
    args.decode = args.decode or args.model / "decode.tflite"
    graphs = {"prefill": args.prefill, "decode": args.decode}
    if fixed_inputs_only(args.device):
        what = "the native runner" if is_native(args.device) else "a phone"
        raise DeviceError(f"{args.device} is {what}: the decode loop feeds each step's outputs back in, and the "
                          "runner takes fixed inputs only; use host-gpu, host-gpu-fp32 or cpu")
    pre_info = load_model(args.prefill, "export_llm.py --graph prefill")
    dec_info = load_model(args.decode, "export_llm.py --graph decode")
    import decoder as D   # imports torch
    ref = load_reference(args.ref, "dump_llm_ref.py")
    dims = D.Dims.of(json.loads(str(ref["config"])))
    n = min(args.prompts or len(ref["prompts"]), len(ref["prompts"]))
    steps = min(args.steps if args.steps is not None else ref["tokens"].shape[1] - 1, ref["tokens"].shape[1] - 1)
    prompts, lengths, ref_tokens, ref_logits = (
        ref["prompts"][:n],
        ref["lengths"][:n],
        ref["tokens"][:n],
        ref["logits"][:n],
    )
    length = pre_info.signatures[0].inputs["tokens"].shape[1]
    capacity = dec_info.signatures[0].inputs["k_0"].shape[2]
    print(f"{n} prompts ({lengths.min()}-{lengths.max()} tokens), prefill + {steps} decode steps, on {args.device}")

    # 1. prefill, every prompt on one compile
    samples = [D.prefill_inputs(dims, ref["ids"][i, : lengths[i]], length) for i in range(n)]
    pre_run = run_on_device(args.prefill, {pre_info.signatures[0].key: samples}, args.device)
    pre_res = residency(pre_info, pre_run)
    print(f"prefill: {pre_res.line}")
    if not pre_run.ok:
        print_failure(pre_run, "prefill")
        gates = strict_gates(args.device, pre_res) | {f"prefill logits corr >= {CORR_GATE}": False}
        return finish_verify(args, graph="prefill", run=pre_run, residency=pre_res.line, metrics={}, gates=gates,
                             models=graphs)
    pre_out = pre_run.outputs[pre_info.signatures[0].key]
    prefill_ms = latency_ms(pre_run.run_s[pre_info.signatures[0].key])  # median over the prompts

    # 2. decode residency and latency (one step, prompt 0, from its prefill cache)
    cache0 = {k: v[0] for k, v in pre_out.items() if k != "logits"}
    first = {**D.decode_inputs(dims, int(ref_tokens[0, 0]), int(lengths[0]), capacity), **cache0}
    dec_run = run_on_device(args.decode, {dec_info.signatures[0].key: first}, args.device, repeats=3)
    dec_res = residency(dec_info, dec_run)
    print(f"decode:  {dec_res.line}")
    if not dec_run.ok:
        print_failure(dec_run, "decode")
        gates = strict_gates(args.device, pre_res, dec_res) | {f"top-1 agreement >= {TOP1_GATE:.0%}": False,
                                                               f"min logits corr >= {CORR_GATE}": False}
        return finish_verify(args, graph="decode", run=dec_run, residency=dec_res.line, metrics={}, gates=gates,
                             models=graphs, extra={"prefill_residency": pre_res.line})
    decode_ms = latency_ms(dec_run.run_s[dec_info.signatures[0].key])

    # 3. generation with the graphs' own cache: the decode graph compiled once in this process (runtime.Session)
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(args.ref.parent / "tokenizer")
    stop = set(int(e) for e in ref["eos"])
    corrs, agree, rows = [], [], []
    # one compile for every prompt; native stderr kept off the console while the loop runs
    with open_session(args.decode, args.device) as session:
        for i in range(n):
            cache = {k: v[i] for k, v in pre_out.items() if k != "logits"}
            first_logits = pre_out["logits"][i].reshape(-1)
            logits, free = generate(session, dims, int(lengths[i]), cache, ref_tokens[i], first_logits, steps, capacity)
            got = [first_logits, *logits]
            c = [compare(g, r).corr for g, r in zip(got, ref_logits[i])]
            a = [int(g.argmax()) == int(t) for g, t in zip(got, ref_tokens[i])]
            corrs += c
            agree += a
            same = next((j for j, (f, t) in enumerate(zip(free, ref_tokens[i])) if f != t), len(free))
            torch_text = tokenizer.decode(D.cut_at(ref_tokens[i, : steps + 1].tolist(), stop))
            tflite_text = tokenizer.decode(D.cut_at(free, stop))
            rows.append(
                {
                    "prompt": str(prompts[i]),
                    "top1": float(np.mean(a)),
                    "min_corr": float(min(c)),
                    "free_running_same_tokens": same,
                    "torch": torch_text,
                    "tflite": tflite_text,
                }
            )
            print(
                f"[{i}] {str(prompts[i])!r}: top-1 {sum(a)}/{len(a)}, "
                f"logits corr min {min(c):.5f} (prefill {c[0]:.5f}), "
                f"free-running = torch for {same}/{len(free)} tokens"
            )
            print(f"    torch : {torch_text!r}\n    tflite: {tflite_text!r}")
    step_ms = latency_ms(session.seconds)
    top1, min_corr = float(np.mean(agree)), float(min(corrs))
    print(
        f"top-1 agreement (teacher-forced): {sum(agree)}/{len(agree)} = {top1:.2%}; logits corr min {min_corr:.6f}, "
        f"mean {float(np.mean(corrs)):.6f}"
    )
    print(
        f"latency: prefill ({length} tokens) {prefill_ms:.0f} ms; one decode step {decode_ms:.0f} ms "
        f"(in the loop, with cache I/O: median {step_ms:.0f} ms)"
    )

    gates = strict_gates(args.device, pre_res, dec_res)
    gates[f"top-1 agreement >= {TOP1_GATE:.0%}"] = top1 >= TOP1_GATE
    gates[f"min logits corr >= {CORR_GATE}"] = min_corr >= CORR_GATE
    common = {"prompts": n, "decode_steps": steps, "prefill_len": length, "cache_capacity": capacity}
    metrics = {
        "top1_agreement": round(top1, 5),
        "min_logits_corr": round(min_corr, 6),
        "mean_logits_corr": round(float(np.mean(corrs)), 6),
        LATENCY_METRIC: decode_ms,  # one step
        "in_loop_latency_ms_median": step_ms,  # one step in the generation loop, with cache I/O
        "free_running_same_tokens": f"{sum(r['free_running_same_tokens'] for r in rows)}/{n * (steps + 1)}",
        **common,
    }
    pre_status = finish_verify(
        args, graph="prefill", run=pre_run, residency=pre_res.line,
        headline=["prefill_min_corr", "prompts", LATENCY_METRIC],
        metrics={LATENCY_METRIC: prefill_ms, "prefill_min_corr": round(min(corrs[:: steps + 1]), 6), **common},
        gates=strict_gates(args.device, pre_res)
        | {f"prefill logits corr >= {CORR_GATE}": min(corrs[:: steps + 1]) >= CORR_GATE},
        models={"prefill": args.prefill},
    )
    status = finish_verify(
        args, graph="decode", run=dec_run, residency=dec_res.line, metrics=metrics, gates=gates,
        headline=["top1_agreement", "min_logits_corr", "mean_logits_corr"], models=graphs,
        extra={"per_prompt": rows, "prefill_residency": pre_res.line},
    )
    return max(pre_status, status)


if __name__ == "__main__":
    sys.exit(verify_main(main))
