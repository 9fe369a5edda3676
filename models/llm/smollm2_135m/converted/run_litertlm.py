#!/usr/bin/env python
"""Run the `.litertlm` bundle (export_llm.py --format litertlm) with LiteRT-LM (PyPI litert-lm-api) and compare its
greedy generations with torch's (dump_llm_ref.py), token for token; record the rows in results.json.

Per backend (`--backend cpu`, `gpu`, or both), in a child process each (a backend that aborts natively takes only
its child with it; the failure and its log lines are recorded): an Engine on the bundle, then per prompt a Session
without LiteRT-LM's prompt template (the prompt is the dump's chat-templated text, so both sides see the same
tokens: checked against engine.tokenize), greedy sampling (top_k = 1), at most the dump's steps + 1 tokens.
LiteRT-LM streams one text piece per generated token; torch's tokens are cut at the first stop token
(<|im_end|> / <|endoftext|>, where LiteRT-LM stops). A prompt is equal when LiteRT-LM produced as many tokens as
torch and the same text; otherwise the first divergent token is reported with torch's logits there (the
LiteRT-LM API exposes no logits). Gates: every prompt tokenized identically, every prompt token-for-token equal.

Not a verify_*.py: the recipe's verify script is verify_llm.py (one per recipe, tests/recipes/test_contract.py).

    python run_litertlm.py                            # CPU then GPU backend, every prompt of the dump
    python run_litertlm.py --backend cpu --prompts 3
    python run_litertlm.py --model /tmp/t --ref /tmp/tiny_ref.npz --backend cpu   # the CI test's files
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from litert_gpu_toolkit.recipe import ArtifactError, add_ref_argument, load_reference, require_file, script_parser
from litert_gpu_toolkit.recipe.scripts import add_results_dir_argument

HERE = Path(__file__).resolve().parent
VERSION = "0.18.1"
LABELS = {"cpu": f"LiteRT-LM {VERSION} CPU backend (x86_64)",
          "gpu": f"LiteRT-LM {VERSION} GPU backend, llvmpipe (software Vulkan)",   # its default activation type
          "gpu-fp16": f"LiteRT-LM {VERSION} GPU backend (fp16 activations), llvmpipe (software Vulkan)",
          "gpu-fp32": f"LiteRT-LM {VERSION} GPU backend (fp32 activations), llvmpipe (software Vulkan)"}


def child(bundle: Path, backend: str, texts: list[str], max_tokens: int, capacity: int, out: Path,
          activations: str | None = None) -> None:
    """Generate for every prompt text on one backend; write JSON to `out` after every prompt (a crash keeps the
    prompts done so far)."""
    import litert_lm

    litert_lm.set_min_log_severity(litert_lm.LogSeverity.ERROR)
    which = litert_lm.Backend.CPU() if backend == "cpu" else litert_lm.Backend.GPU()
    t0 = time.perf_counter()
    dtype = {"fp32": litert_lm.ActivationDataType.FLOAT32, "fp16": litert_lm.ActivationDataType.FLOAT16,
             None: None}[activations]
    engine = litert_lm.Engine(str(bundle), backend=which, max_num_tokens=capacity, activation_data_type=dtype)
    result = {"engine_s": time.perf_counter() - t0, "prompts": []}
    for text in texts:
        t1 = time.perf_counter()
        session = engine.create_session(apply_prompt_template=False, sampler_config=litert_lm.SamplerConfig(top_k=1),
                                        max_output_tokens=max_tokens)
        session.run_prefill([text])
        pieces = [r.texts[0] if r.texts else "" for r in session.run_decode_async()]
        session.close()
        result["prompts"].append({"tokenized": engine.tokenize(text), "pieces": pieces,
                                  "seconds": time.perf_counter() - t1})
        out.write_text(json.dumps(result))


def run_backend(args, backend: str, texts: list[str], max_tokens: int, capacity: int) -> dict:
    """The child for `backend`: its JSON, or {"error": ...} with the tail of its log when it failed."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out.json"
        cmd = [sys.executable, str(Path(__file__).resolve()), "--child", backend, "--model", str(args.model),
               "--bundle", args.bundle,
               "--child-out", str(out), "--max-tokens", str(max_tokens), "--capacity", str(capacity),
               "--texts", str(Path(tmp) / "texts.json")]
        if args.activations and backend == "gpu":
            cmd += ["--activations", args.activations]
        (Path(tmp) / "texts.json").write_text(json.dumps(texts))
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout,
                                  env={**os.environ, "PYTHONUNBUFFERED": "1"})
            rc, log = proc.returncode, proc.stdout + proc.stderr
        except subprocess.TimeoutExpired as exc:
            rc, log = "timeout", b"".join(x or b"" for x in (exc.stdout, exc.stderr)).decode(errors="replace")
        data = json.loads(out.read_text()) if out.exists() else {"prompts": []}
    if rc != 0:
        lines = [ln for ln in log.splitlines() if ln.strip() and not ln.startswith(("I0000", "WARNING: Logging"))]
        data["error"] = f"child exited {rc} after {len(data['prompts'])} prompt(s)"
        errors = [ln for ln in lines if ln.startswith(("E0000", "F0000")) or "Check failed" in ln or "rror" in ln]
        data["log_tail"] = list(dict.fromkeys(errors[-8:] + lines[-4:]))
    return data


def compare(tokenizer, ref_tokens: list[int], ref_logits: np.ndarray, pieces: list[str]) -> dict:
    """LiteRT-LM's pieces against torch's tokens (cut at the stop token)."""
    text = "".join(pieces)
    want = tokenizer.decode(ref_tokens)
    # leading torch tokens whose text LiteRT-LM reproduced piece by piece
    same = 0
    for j in range(min(len(pieces), len(ref_tokens))):
        if "".join(pieces[:j + 1]) != tokenizer.decode(ref_tokens[:j + 1]):
            break
        same = j + 1
    row = {"equal": text == want and len(pieces) == len(ref_tokens), "same_tokens": same,
           "tokens": f"{same}/{len(ref_tokens)}", "litertlm_tokens": len(pieces), "torch": want, "litertlm": text}
    if not row["equal"] and same < len(ref_logits):
        lg = ref_logits[same]
        top = np.argsort(lg)[::-1][:3]
        row["divergence"] = {"step": same, "torch_token": int(ref_tokens[same]) if same < len(ref_tokens) else None,
                             "torch_top3": [(int(t), tokenizer.decode([int(t)]), round(float(lg[t]), 4)) for t in top],
                             "litertlm_piece": pieces[same] if same < len(pieces) else None,
                             "litertlm_logits": "not exposed by the LiteRT-LM API"}
    return row


def main() -> int:
    p = script_parser(__doc__)
    p.add_argument("--model", type=Path, default=HERE / "artifacts", metavar="DIR",
                   help="the artifacts folder export_llm.py --format litertlm wrote (default: artifacts)")
    p.add_argument("--bundle", default="smollm2_135m.litertlm", metavar="NAME",
                   help="the bundle's file name in DIR (default smollm2_135m.litertlm; export_llm.py names the "
                        "variants smollm2_135m[_fp16w][_tokens].litertlm)")
    add_ref_argument(p, HERE / "artifacts" / "llm_ref.npz", writes=False)
    add_results_dir_argument(p, HERE)
    p.add_argument("--backend", choices=("cpu", "gpu", "all"), default="all", help="LiteRT-LM backend (default all)")
    p.add_argument("--prompts", type=int, default=None, metavar="N", help="only the first N prompts of the dump")
    p.add_argument("--activations", choices=("fp16", "fp32"), default=None,
                   help="GPU backend activation type (default: LiteRT-LM's, fp16 for a text decoder)")
    p.add_argument("--timeout", type=float, default=3600.0, help="seconds per backend (default 3600)")
    p.add_argument("--no-record", action="store_true", help="print only; do not write results.json")
    p.add_argument("--child", choices=("cpu", "gpu"), default=None, help="(internal) run one backend")
    p.add_argument("--child-out", type=Path, default=None, help="(internal) the child's JSON")
    p.add_argument("--texts", type=Path, default=None, help="(internal) the prompt texts, JSON")
    p.add_argument("--max-tokens", type=int, default=33, help="(internal) tokens per prompt")
    p.add_argument("--capacity", type=int, default=256, help="(internal) the bundle's max_num_tokens")
    args = p.parse_args()
    bundle = args.model / args.bundle
    if args.child:
        child(bundle, args.child, json.loads(args.texts.read_text()), args.max_tokens, args.capacity,
              args.child_out, args.activations)
        return 0
    try:
        require_file(bundle, "export_llm.py --format litertlm")
        ref = load_reference(args.ref, "dump_llm_ref.py")
    except ArtifactError as exc:   # one line, usage exit status
        print(f"run_litertlm.py: error: {exc}", file=sys.stderr)
        return 2
    if bundle.read_bytes()[:8] != b"LITERTLM":
        print(f"run_litertlm.py: error: {bundle} is not a .litertlm file", file=sys.stderr)
        return 2

    import decoder as D
    from transformers import AutoTokenizer

    from litert_gpu_toolkit.recipe.provenance import read_provenance
    from litert_gpu_toolkit.recipe.results import write_results

    tokenizer = AutoTokenizer.from_pretrained(args.ref.parent / "tokenizer")
    n = min(args.prompts or len(ref["prompts"]), len(ref["prompts"]))
    steps = ref["tokens"].shape[1] - 1
    stop = set(int(e) for e in ref["eos"])
    ids = [ref["ids"][i, :ref["lengths"][i]].tolist() for i in range(n)]
    texts = [tokenizer.decode(x) for x in ids]
    capacity = 256
    tflite = bundle.with_suffix(".tflite")
    graphs = {"litertlm": tflite, "litertlm_embedder": tflite.with_name(tflite.stem + "_embedder.tflite")}
    provenance = {name: read_provenance(path) for name, path in graphs.items() if path.is_file()}
    backends = ["cpu", "gpu"] if args.backend == "all" else [args.backend]
    status = 0
    for backend in backends:
        print(f"[{backend}] {n} prompts, greedy, up to {steps + 1} tokens each, LiteRT-LM {VERSION} ...")
        t0 = time.perf_counter()
        data = run_backend(args, backend, texts, steps + 1, capacity)
        rows = []
        for i, got in enumerate(data["prompts"]):
            want = D.cut_at(ref["tokens"][i, :steps + 1].tolist(), stop)
            row = {"prompt": str(ref["prompts"][i]), "tokenized_equal": got["tokenized"] == ids[i],
                   **compare(tokenizer, want, ref["logits"][i], got["pieces"]), "seconds": round(got["seconds"], 2)}
            rows.append(row)
            mark = "equal" if row["equal"] else f"DIVERGES at token {row['same_tokens']}"
            differs = "" if row["tokenized_equal"] else " (prompt tokenized differently)"
            print(f"  [{i}] {row['prompt']!r}: {row['tokens']} tokens, {mark}{differs}")
            if not row["equal"]:
                print(f"      torch   : {row['torch']!r}\n      litertlm: {row['litertlm']!r}\n"
                      f"      {row.get('divergence')}")
        if "error" in data:
            print(f"  {backend} backend failed: {data['error']}")
            for line in data.get("log_tail", []):
                print(f"    | {line}")
        equal = sum(r["equal"] for r in rows)
        metrics = {"prompts_equal": f"{equal}/{n}",
                   "tokens_equal": f"{sum(r['same_tokens'] for r in rows)}/"
                                   f"{sum(int(r['tokens'].split('/')[1]) for r in rows)}",
                   "prompts": n, "max_tokens": steps + 1}
        if rows:
            metrics["seconds_per_prompt_median"] = round(float(np.median([r["seconds"] for r in rows])), 2)
            seconds = sum(r["seconds"] for r in rows)       # prefill included: what a user waits per prompt
            metrics["tokens_per_s"] = round(sum(r["litertlm_tokens"] for r in rows) / seconds, 2) if seconds else None
        gates = {"every prompt tokenized as torch's": len(rows) == n and all(r["tokenized_equal"] for r in rows),
                 "greedy tokens equal torch's, every prompt": len(rows) == n and equal == n}
        residency = (f"LiteRT-LM {backend.upper()} backend ran all {n} prompts" if "error" not in data
                     else f"LiteRT-LM {backend.upper()} backend failed: {data['error']}")
        print(f"  {backend}: {equal}/{n} prompts equal ({metrics['tokens_equal']} tokens) in "
              f"{time.perf_counter() - t0:.0f} s; " + "; ".join(f"[{'PASS' if v else 'FAIL'}] {k}"
                                                                 for k, v in gates.items()))
        if not args.no_record:
            which = backend if backend == "cpu" or not args.activations else f"{backend}-{args.activations}"
            extra = {"device_label": LABELS[which], "per_prompt": rows, "provenance": provenance,
                     "bundle_bytes": bundle.stat().st_size}
            if "error" in data:
                extra["failure"] = {"error": data["error"], "log_tail": data.get("log_tail", [])}
            # a bundle of other weights is its own record: smollm2_135m_int8.litertlm -> litertlm_int8
            graph = "litertlm" + bundle.stem.removeprefix("smollm2_135m")
            out = write_results(args.results_dir, graph=graph, device=f"litertlm-{which}", run=None,
                                residency=residency, metrics=metrics, gates=gates,
                                headline=["prompts_equal", "tokens_equal"], extra=extra)
            print(f"  recorded in {out}")
        status = status or (0 if all(gates.values()) else 1)
    return status


if __name__ == "__main__":
    sys.exit(main())
