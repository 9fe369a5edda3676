"""The zoo's README, generated from its results file (never written by hand)."""
from __future__ import annotations

from pathlib import Path

from litert_gpu_toolkit.core.generated import splice
from .rows import ZooRow
from litert_gpu_toolkit.convert.sensitivity import WEAK, is_weak


def write_readme(folder: Path, rows: dict[str, ZooRow], env: dict, held_out: bool = False) -> None:
    """README.md in `folder`: the generated block (the same text `scripts/gen_docs.py` writes)."""
    readme = folder / "README.md"
    text = readme.read_text() if readme.exists() else ""
    source = results_source(env, held_out)
    readme.write_text(splice(text, "zoo", source, render_table(rows, env, held_out), ""))


def results_source(env: dict, held_out: bool = False) -> str:
    """Where the results of this mode live, from the repository root."""
    folder = "zoo/held_out" if held_out else "zoo"
    if env.get("activations") in ("trained", "library"):
        return f"{folder}/{'trained' if env['activations'] == 'trained' else 'library_init'}/results.json"
    mode = env.get("weights") or "fp32"
    return f"{folder}/weights_{mode}/results.json" if mode != "fp32" else f"{folder}/results.json"


def _verdict_line(env: dict, passed: int, done: int) -> str:
    """The headline: what PASS means in this mode (a weights mode has its own corr floor)."""
    mode = env.get("weights") or "fp32"
    if mode == "fp32":
        return (f"**convert_for_gpu: {passed}/{done} PASS** (strict GPU-only, every output's fp16 and fp32 GPU "
                "corr >= 0.999 vs torch).")
    from litert_gpu_toolkit.quantize.plan import DEFAULT_MIN_CORR

    return (f"**convert_for_gpu(weights='{mode}'): {passed}/{done} PASS** (the {mode} file strict GPU-only, its "
            f"GPU output against the CPU and against torch at corr >= {DEFAULT_MIN_CORR[mode]:g}, the mode's floor; "
            "where the float file itself stands below that floor on the GPU, the floor is the float file's own "
            "agreement less the mode's allowance. The *corr fp16* column is the quantized file's lowest GPU corr "
            "against the source; *weights* says "
            "which weight tensors were quantized, in which form, and which stayed float and why).")


def _fmt_corr(c) -> str:
    return "-" if c is None else f"{c:.6f}"


def _weak(row: ZooRow) -> bool:
    return row.passed and is_weak(row.input_share)


def _why(row: ZooRow) -> str:
    if row.error:
        return row.error
    g = row.gpu
    if g is None:
        return "not run"
    if _weak(row):
        return (f"PASS is a weak check: the input drives {row.input_share:.1%} of the output (the rest does not "
                "depend on the input), so corr barely sees the network's arithmetic")
    parts = []
    if g.verdict != "PASS" and g.note:
        parts.append(g.note)
    if g.verdict == "NUMERICS_FAIL" and g.corr_fp32 is not None:
        parts.append(f"fp32 GPU corr {g.corr_fp32:.6f} ("
                     + ("fp16 precision" if g.corr_fp32 >= 0.999 else "wrong in fp32 too: a GPU miscompute") + ")")
    found = next((a.partition(": ")[2] for a in g.attempts or () if a.startswith("diagnosis: ")), "")
    if g.verdict == "NUMERICS_FAIL" and found:
        parts.append(f"bisect: {found.replace(': see the precision plan in the diagnosis', '')}")
    if g.dropped:
        parts.append(f"dropped (worse than without): {', '.join(g.dropped)}")
    parts += [f"under ai-edge-litert {v}: {r.get('verdict')} {r.get('note', '')}".rstrip()
              for v, r in row.runtimes.items() if r.get("verdict") != "PASS"]
    return "; ".join(parts)


def _commit(env: dict, done: list[ZooRow] = ()) -> str:
    run = env.get("toolkit_commit") or ""
    if run and env.get("toolkit_dirty"):
        run += "+dirty"
    counts: dict[str, int] = {}
    for r in done:
        key = r.toolkit_commit or run
        counts[key] = counts.get(key, 0) + 1
    counts.pop("", None)
    if not counts:
        return ""
    if len(counts) == 1:
        return f" Toolkit at commit {next(iter(counts))}."
    return " Toolkit commits: " + ", ".join(f"{c} ({n} rows)" for c, n in counts.items()) + "."


def _by_library(done: list[ZooRow]) -> list[tuple[str, int, int, int]]:
    libs = list(dict.fromkeys(r.library or "-" for r in done))
    return [(lib, len(rs), sum(r.passed for r in rs), sum(bool(r.plain and r.plain.verdict == "PASS") for r in rs))
            for lib in libs for rs in [[r for r in done if (r.library or "-") == lib]]]


def render_table(rows: dict[str, ZooRow], env: dict, held_out: bool = False) -> str:
    """The README: generated from results.json, never written by hand."""
    from .models import HELD_OUT, ZOO            # no model library is imported by this

    universe = HELD_OUT if held_out else ZOO
    order = {n: i for i, n in enumerate(universe)}
    done = sorted(rows.values(), key=lambda r: order.get(r.name, len(order)))
    passed = [r for r in done if r.passed]
    weak = [r.name for r in done if _weak(r)]
    shared = [r for r in done if r.input_share is not None]
    plain_run = [r for r in done if r.plain is not None and r.plain.verdict != "NOT_RUN"]
    plain_passed = [r for r in plain_run if r.plain.verdict == "PASS"]
    worse = [r.name for r in plain_passed if not r.passed]
    gpu = env.get("gpu") or "unknown GPU"
    label = (f"{str(gpu).split(' (')[0]} (software Vulkan), ai-edge-litert {env.get('ai-edge-litert')}"
             if env.get("gpu_is_software") else f"{gpu}, ai-edge-litert {env.get('ai-edge-litert')}")
    versions = ", ".join(f"{k} {env.get(k)}" for k in ("litert-torch", "torch", "transformers", "timm",
                                                            "torchvision", "diffusers", "ultralytics") if env.get(k))
    total = len(universe)
    trained = env.get("activations") == "trained"
    library_init = env.get("activations") == "library"
    mode = env.get("weights") or "fp32"
    weights_col = mode != "fp32"
    lines = [
        ("# Held-out rows: `convert_for_gpu` on architectures it was not developed on" if held_out else
         "# The zoo: `convert_for_gpu` on architectures from five libraries, none written for it")
        + (", with trained ranges planted" if trained else "")
        + (", at each library's own initialisation" if library_init else "")
        + (f", with {mode} weights" if mode != "fp32" else ""),
        "",
        "Generated by `python scripts/gen_docs.py` (or `python zoo/run.py --table-only`) from `results.json` "
        "(produced by `python zoo/run.py`); do not edit by hand.",
        "",
        f"Device: {label} -- a proxy for a phone GPU, not one. {versions}."
        + _commit(env, done),
        "",
        _verdict_line(env, len(passed), len(done))
        + f" {len(done)} of the {total} {'held-out' if held_out else 'zoo'} rows have a "
        f"result. Plain conversion, run where the defaults do not PASS: {len(plain_passed)}/{len(plain_run)} PASS; "
        f"rows where plain beats the defaults: {', '.join(worse) if worse else 'none'}. "
        + (f"Of the PASS rows, {len(weak)} are weak checks (the input drives less than {WEAK:.0%} of the output, "
           f"so corr barely sees the network's arithmetic): {', '.join(weak) if weak else 'none'}; input share "
           f"measured for {len(shared)} of {len(done)} rows." if shared else ""),
        "",
        "| library | rows run | convert_for_gpu PASS | plain PASS (where run) |",
        "|---|---:|---:|---:|",
        *[f"| {lib} | {n} | {p} | {pp} |" for lib, n, p, pp in _by_library(done)],
        "",
        ("Models: small configs at the library's own initialisation, untouched (`--activations library`: the "
         "weights a user gets from the library's config before loading a checkpoint; the O(1) mode's table is "
         "`zoo/README.md`)" if library_init else
         "Models: small configs with random weights redrawn so activations are O(1), then trained ranges planted: "
         "two outlier channels x400 in every residual stream, one BatchNorm channel in 16 with weight x4 and bias "
         "+2 (measured against real ImageNet CNNs), layer scales log-uniform in [1e-5, 1e-1] (`--activations "
         "trained`; the rules are the docstring of "
         "`zoo/litert_zoo/weights.py`; the O(1) mode's table is `zoo/README.md`)" if trained else
         "Models: small configs with random weights redrawn so activations are O(1) (the rule is the docstring of "
         "`zoo/litert_zoo/weights.py`; `--activations trained` plants trained ranges: `zoo/trained/README.md`)")
        + "; nothing is downloaded. `zoo/compare_ranges.py` prints both modes' per-block ranges, and how well each "
        "block's values survive fp16 storage (torch16), next to a real trained network's where its weights install "
        "offline (MobileNetV2 and EfficientNet-Lite0; run 2026-12-04: the loudest real BatchNorm layer stands x8.6 "
        "/ x10.2 over its median channel, the trained plant's 90th percentile x60 / x57; the plant before "
        "2026-12-04, x32 and +16, stood x115 at a MobileNetV2 block against the real x4.1, and its torch16 fell to "
        "0.91 where the real network keeps 0.99998 -- fp16 storage itself could not carry it; bisect reports such a "
        "row as `storage_bound`). Text encoders are called as users call them: two sequences, one padded, with "
        "attention_mask and token type ids; every output a user reads is compared "
        "(pooled and projected embeddings, logits, a decode step's updated KV cache), not only the first.",
        "",
        "Columns: *plain* = `convert_for_gpu(..., patches=False)`, run only where the defaults do not PASS "
        "(`NOT_RUN` otherwise; `LITERT_ZOO_ALWAYS_PLAIN=1` runs it everywhere); *convert_for_gpu* = the defaults "
        "(rewrites, "
        "with the never-worse-than-plain fallback); *corr fp16* = Pearson correlation of the strict-GPU fp16 output "
        "with torch (`-` when the file did not run GPU-only); *seconds* = both conversions and checks of the row, "
        "on a shared 2-core machine; *input share* = how much of the output the input drives: std of the "
        "difference between the outputs for the example input and a second draw of it, over sqrt(2) x the "
        "output's std (largest over the outputs; `litert_gpu_toolkit/convert/sensitivity.py`; `-` not measured).",
        "",
        "Reproduce: `./zoo/setup.sh && .venv-zoo/bin/python zoo/run.py" + (" --activations trained" if trained else "")
        + (" --activations library" if library_init else "")
        + (f" --weights {mode}" if weights_col else "")
        + "` (resumes; `--only NAME --rerun` redoes "
        "rows; `--library timm` one library; `--fast` is the CI subset; `--table-only` regenerates this file).",
        "",
        "| model | library | domain | params | plain | plain corr fp16 | convert_for_gpu | residency | corr fp16 "
        "| rewrites kept | input share | seconds | why not PASS (or a weak check) |"
        + (" weights |" if weights_col else ""),
        "|---|---|---|---:|---|---:|---|---|---:|---|---:|---:|---|" + ("---|" if weights_col else ""),
    ]
    for r in done:
        p, g = r.plain, r.gpu
        res = (g.residency if g else "").replace("GPU residency: ", "").replace("|", "/")
        why = _why(r).replace("|", "/").replace("\n", " ")
        lines.append(
            f"| {r.name} | {r.library or '-'} | {r.domain} | {r.params:,} | {p.verdict if p else '-'} | "
            f"{_fmt_corr(p.corr_fp16 if p else None)} "
            f"| {g.verdict if g else '-'} | {res or '-'} | {_fmt_corr(g.corr_fp16 if g else None)} "
            f"| {', '.join(g.rewrites) if g and g.rewrites else '-'} "
            f"| {'-' if r.input_share is None else f'{r.input_share:.3f}'} | {r.seconds:.0f} | {why[:240]} |"
            + (f" {((g.weights if g else '') or '-').replace('|', '/')[:300]} |" if weights_col else "")
        )
    return "\n".join(lines) + "\n"
