"""The category rule, against every kernel name in the shared traces and known names."""

from __future__ import annotations

import gzip
from functools import cache
from pathlib import Path

import msgspec
import pytest

from gpulens.collector.ingest.categories import categorise

TRACES = Path(__file__).resolve().parents[2] / "shared" / "traces"
KIND = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset"}


class _Event(msgspec.Struct):
    cat: str | None = None
    name: object = None


class _Trace(msgspec.Struct):
    traceEvents: list[_Event]


@cache
def real_gpu_activities() -> frozenset[tuple[str, str]]:
    """(kind, name) of every GPU activity in the shared Kineto traces."""
    found = set()
    for path in sorted((TRACES / "kineto").glob("*.json.gz")):
        for event in msgspec.json.decode(gzip.decompress(path.read_bytes()), type=_Trace).traceEvents:
            if event.cat in KIND:
                found.add((KIND[event.cat], event.name))
    return frozenset(found)


def expected(kind: str, name: str) -> str:
    # Independent of the rule's regex: in these traces NCCL kernels, and only
    # they, start with "nccl".
    if kind != "kernel":
        return "memory"
    return "communication" if name.startswith("nccl") else "compute"


@pytest.mark.skipif(not (TRACES / "kineto").is_dir(), reason="shared real traces not present")
def test_categorise_every_real_gpu_activity() -> None:
    activities = real_gpu_activities()
    wrong = [(kind, name) for kind, name in activities if categorise(name, kind) != expected(kind, name)]
    assert (len(activities) > 250, wrong) == (True, [])


@pytest.mark.skipif(not (TRACES / "kineto").is_dir(), reason="shared real traces not present")
def test_categorise_real_generic_tensor_accessor_kernels_are_compute() -> None:
    generic = [name for kind, name in real_gpu_activities() if "GenericPackedTensorAccessor" in name]
    assert (len(generic) > 5, {categorise(name) for name in generic}) == (True, {"compute"})


@pytest.mark.parametrize("name", [
    "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
    "ncclSymkDevKernel_AllReduce_RSxLD_AGxST_bf16(ncclSymkDevWorkArgs4K)",
    "ncclDevKernel_Generic_4(ncclDevKernelArgsStorage<4096ul>)",
    "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)",
    "void ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclWorkElem)",
])
def test_categorise_nccl_and_rccl_kernels_are_communication(name: str) -> None:
    assert categorise(name) == "communication"


def test_categorise_compute_kernel_with_collective_args_is_communication() -> None:
    assert categorise("void fused_allreduce_kernel<float>(float*, int)", "kernel", has_collective_args=True) == "communication"


def test_categorise_compute_kernel_named_generic_is_compute() -> None:
    assert categorise("void at::native::vectorized_elementwise_kernel<4, at::GenericPackedTensorAccessor<float>>()") == "compute"


def test_categorise_memcpy_kind_is_memory_whatever_the_name() -> None:
    assert categorise("ncclDevKernel_looks_like_nccl", "memcpy") == "memory"


@pytest.mark.parametrize("name", [
    "__amd_rocclr_fillBufferAligned",  # hipMemset*
    "__amd_rocclr_fillBufferAligned2D",  # hipMemset2D*
    "__amd_rocclr_copyBuffer",  # hipMemcpy* device to device
    "__amd_rocclr_copyBufferAligned.kd",  # the code-object symbol, as some traces name it
    "__amd_rocclr_copyBufferRectAligned",  # hipMemcpy2D*
])
def test_categorise_rocm_blit_kernels_are_memory(name: str) -> None:
    assert categorise(name, "kernel") == "memory"

