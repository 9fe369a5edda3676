"""Parsing of the GPU delegate's native log (the only place that says which ops it rejects)."""
from litert_gpu_toolkit.runtime.compiled import parse_gpu_log

REJECTED = """INFO: something
ERROR: Following operations are not supported by GPU delegate:
GATHER_ND: Operation is not supported.
MUL: Tensor dimensions must be less than 5.
89 operations will run on the GPU, and the remaining 32 operations will run on the CPU.
"""


def test_rejected_ops_and_split():
    info = parse_gpu_log(REJECTED)
    assert [(r.op, r.reason) for r in info.rejected] == [
        ("GATHER_ND", "Operation is not supported."), ("MUL", "Tensor dimensions must be less than 5.")]
    assert (info.gpu_ops, info.cpu_ops) == (89, 32)


def test_nothing_on_gpu():
    info = parse_gpu_log("No operations will run on the GPU, and all 3 operations will run on the CPU.")
    assert (info.gpu_ops, info.cpu_ops) == (0, 3)


def test_adapter_line():
    info = parse_gpu_log("I0000 environment.cc:532] Selected adapter: llvmpipe (LLVM 15.0.6, 256 bits), arch=software, "
                         "vendor=mesa, backend=Vulkan, adapterType=CPU / Software")
    assert info.adapter == "llvmpipe (LLVM 15.0.6, 256 bits)"
    assert info.backend == "Vulkan" and info.is_software


def test_no_adapter():
    info = parse_gpu_log(
        "ERROR: [delegate_webgpu.cc:359] Failed to initialize WebGPU environment: INTERNAL: No adapters found"
    )
    assert info.no_gpu_reason and not info.rejected
