"""Where a compiled model's ops ran: the residency line every recipe and the checker record."""
from __future__ import annotations

from dataclasses import asdict, dataclass

from ..core.model_info import ModelInfo
from .compiled import RunResult, parse_gpu_log


@dataclass
class Residency:
    """Where a compiled model's ops run: the numbers behind the residency line (recipes and the checker)."""
    gpu_ops: int | None
    total_ops: int
    cpu_ops: int | None
    partitions: int | None      # GPU partitions, where known (strict compile, or the delegate's 'Replacing' line)
    strict: bool                # compiled GPU-only, without CPU fallback, and ran
    line: str

    def to_dict(self) -> dict:
        return asdict(self)


def residency(info: ModelInfo, run: RunResult) -> Residency:
    """Residency of `run` (a compile of the model `info` describes); `.line` is what recipes record."""
    total = info.num_ops
    if run.accelerator == "cpu":
        return Residency(0, total, total, None, False, f"CPU: {total} ops (no GPU involved)")
    delegated = parse_gpu_log(run.log).delegated   # the delegate's 'Replacing N out of M node(s)' line
    if delegated is not None:
        gpu_nodes, nodes, partitions = delegated
        strict = run.ok and gpu_nodes == nodes
        tail = " (strict GPU)" if strict else ""
        return Residency(gpu_nodes, nodes, nodes - gpu_nodes, partitions, strict,
                         f"GPU residency: {gpu_nodes}/{nodes} ops, {partitions} partition"
                         f"{'s' if partitions != 1 else ''}{tail}")
    if run.ok and run.accelerator == "gpu":
        graphs = max(1, len({op.subgraph for op in info.ops}))
        where = "1 partition" if graphs == 1 else f"1 partition in each of {graphs} graphs"
        return Residency(total, total, 0, graphs, True, f"GPU residency: {total}/{total} ops, {where} (strict GPU)")
    if run.gpu.cpu_ops is not None:
        # the delegate prints one split per graph with rejections; graphs it does not mention run fully on GPU
        on_gpu = total - run.gpu.cpu_ops
        return Residency(on_gpu, total, run.gpu.cpu_ops, None, False,
                         f"{on_gpu}/{total} ops on GPU, {run.gpu.cpu_ops} on CPU")
    why = (run.error or "").splitlines()[0] if run.error else ""
    return Residency(None, total, None, None, False, f"GPU residency: unknown ({run.status}: {why})")


def residency_line(info: ModelInfo, run: RunResult) -> str:
    """The line recipes record: `GPU residency: 121/121 ops, 1 partition (strict GPU)` or the split."""
    return residency(info, run).line


def runtime_version() -> str:
    """This environment's ai-edge-litert version (`versions.installed_version`)."""
    from .versions import installed_version

    return installed_version()


def gpu_label(adapter: str | None, is_software: bool | None, backend: str | None = None,
              precision: str | None = None, version: str | None = None) -> str:
    """Where a GPU number came from, e.g. 'llvmpipe (software Vulkan, fp16), ai-edge-litert 2.3.0'."""
    kind = "software Vulkan" if is_software else (backend or "GPU")
    detail = f"{kind}, {precision}" if precision else kind
    return f"{(adapter or 'unknown GPU').split(' (')[0]} ({detail}), ai-edge-litert {version or runtime_version()}"
