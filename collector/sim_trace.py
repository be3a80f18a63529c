"""A seeded synthesiser of PyTorch-profiler (Kineto) traces: `gpulens demo` data.

It writes one Chrome-trace JSON per rank of a data-parallel training job on
H100 nodes, in the layout Kineto itself writes (same keys, same multi-line
event format, times in µs with three decimals relative to
`baseTimeNanoseconds`), so ingesters, HTA and Perfetto read it like a real
trace. It is a product feature (demos, load tests, the ingest benchmark),
not a test helper.

The model, per profiler step and rank:
- CPU: data loading, two pinned host→device copies, a DDP forward of a
  transformer (`layers` blocks of layer norm, GEMMs, flash attention, GELU,
  residual adds), backward on the autograd thread, a per-parameter AdamW
  (many tiny kernels: the CPU-bound phase), then `loss.item()`, which
  synchronises. Each op launches through cudaLaunchKernel (correlation id,
  ac2g flow); a full launch queue (1024 kernels) makes the launch call block.
- GPU: compute on stream 7; NCCL on stream 24, overlapping backward: one
  all_reduce per layer's gradient bucket (bf16), a reduce_scatter of the
  embedding gradient, an all_gather of the updated embedding shard and a
  float all_reduce of the loss, each as `record_param_comms` with the full
  collective arguments and an incrementing `Seq`.
- Coupling: a collective's kernels end together on every rank, when the
  last rank has arrived plus the transfer time (bytes over the bus
  bandwidth, nccl-tests factors). A planted `straggler_rank` computes
  15-30 % slower, so it arrives last; the others' NCCL kernels start
  earlier and last longer (they wait) — the usual signature.

Every number comes from the seed: the same arguments give byte-identical
files (floats are formatted from integers or with a fixed precision).
"""

from __future__ import annotations

import gzip as gzip_module
import os
import random
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Generator

import orjson

from collector.errors import UsageError

GPUS_PER_HOST = 8
LAUNCH_QUEUE_DEPTH = 1024
# Profiling usually starts after wait/warm-up steps; c10d's first few
# sequence numbers go to DDP's initial parameter broadcast.
FIRST_PROFILER_STEP = 2
_SEQ_AT_START = 3
# CUPTI numbers every API call since the process started, so the first
# correlation id of a profiled step is already large (warm-up steps).
_CORRELATION_AT_START = 40_000
# Where the trace starts, relative to baseTimeNanoseconds.
_TRACE_START_NS = 3_600_000_000_000

COMPUTE_STREAM = 7
COMM_STREAM = 24

# --- the job: a transformer on H100s -----------------------------------------

H100_SMS = 132
_H100_BF16_FLOPS = 989e12  # dense
_H100_HBM_BYTES_PER_S = 3.35e12
# nccl-tests bus bandwidth: ring over NVLink4 in a node, 400 Gb/s IB across.
_NVLINK_BUSBW_BYTES_PER_S = 360e9
_NETWORK_BUSBW_BYTES_PER_S = 45e9
_NCCL_LATENCY_NS = {False: 12_000, True: 28_000}
_HIDDEN = 2048
_TOKENS = 2048  # micro-batch 1 x sequence 2048, per rank
_VOCAB = 32000
_NCCL_KERNEL_ARGS_TAIL = "(ncclDevKernelArgsStorage<4096ul>)"
# Per step: head copies, embedding, final norm + lm head + loss (4), loss and
# lm-head backward (7 incl. a memset), embedding backward, 4 collectives
# besides the per-layer buckets, loss.item()'s copy.
_FIXED_KERNELS_PER_STEP = 2 + 1 + 4 + 7 + 1 + 4 + 1
_KERNELS_PER_LAYER = 10 + 17 + 1  # forward, backward, gradient bucket
_MIN_OPTIMIZER_KERNELS = 7
MIN_KERNELS_PER_STEP = _FIXED_KERNELS_PER_STEP + _KERNELS_PER_LAYER + _MIN_OPTIMIZER_KERNELS


@dataclass(frozen=True)
class Kernel:
    """One op that launches one GPU activity; names are JSON literals."""

    op: str
    inner: str | None
    name: str
    dur_ns: int
    # The static tail of the kernel's args (launch configuration).
    tail: str = ""
    cat: str = "kernel"
    api: str = "cudaLaunchKernel"
    cbid: int = 211
    # Slowed by the straggler's compute factor.
    compute: bool = True
    bytes: int = 0


@dataclass(frozen=True)
class Collective:
    annotation: str
    kernel: Kernel
    # Static record_param_comms args (without Seq).
    args: str
    xfer_ns: int


@dataclass(frozen=True)
class Plan:
    """What every rank runs each step (the same program, jittered per rank)."""

    head: list[Kernel]
    forward: list[Kernel]
    backward_head: list[Kernel]
    layers: int
    layer_backward: list[Kernel]
    embedding_backward: list[Kernel]
    optimizer: list[Kernel]
    item: Kernel
    head_bucket: Collective
    layer_bucket: Collective
    reduce_scatter: Collective
    all_gather: Collective
    loss_all_reduce: Collective

    @property
    def step_collectives(self) -> list[Collective]:
        return [self.head_bucket, *[self.layer_bucket] * self.layers, self.reduce_scatter, self.all_gather, self.loss_all_reduce]


def _q(text: str) -> str:
    return orjson.dumps(text).decode()


def _launch_tail(grid: tuple[int, int, int], block: tuple[int, int, int], regs: int, smem: int) -> str:
    blocks = grid[0] * grid[1] * grid[2]
    warps = -(-(block[0] * block[1] * block[2]) // 32)
    blocks_per_sm = blocks / H100_SMS
    warps_per_sm = blocks * warps / H100_SMS
    occupancy = min(100, int(min(warps_per_sm, 64.0) / 64.0 * 100))
    return (
        f',      "registers per thread": {regs},      "shared memory": {smem},      "blocks per SM": {blocks_per_sm:.6f},'
        f'      "warps per SM": {warps_per_sm:.6f},      "grid": [{grid[0]}, {grid[1]}, {grid[2]}],'
        f'      "block": [{block[0]}, {block[1]}, {block[2]}],      "est. achieved occupancy %": {occupancy}'
    )


def _gemm(op: str, inner: str, layout: str, m: int, n: int, k: int, efficiency: float, nvjet: bool = False) -> Kernel:
    tile_m, tile_n = (128, 256) if n >= 3 * _HIDDEN or m >= 3 * _HIDDEN else (128, 128)
    if nvjet:
        name = f"nvjet_tst_{tile_n}x{tile_m}_64x4_2x1_v_bz_coopB_{layout.upper()}T"
    else:
        wg = "2x1x1" if tile_n == 256 else "1x1x1"
        name = f"sm90_xmma_gemm_bf16bf16_bf16f32_f32_{layout}_n_tilesize{tile_m}x{tile_n}x64_warpgroupsize{wg}_execute_segment_k_off_kernel__5x_cublas"
    grid = (-(-n // tile_n), -(-m // tile_m), 1)
    dur_ns = int(2 * m * n * k / (efficiency * _H100_BF16_FLOPS) * 1e9)
    return Kernel(_q(op), _q(inner), _q(name), dur_ns, _launch_tail(grid, (384, 1, 1), 168, 232_448 if tile_n == 256 else 164_864))


def _memory_bound(op: str, inner: str | None, name: str, bytes_moved: int, rows: int | None = None, block: int = 128, regs: int = 28) -> Kernel:
    dur_ns = 2_000 + int(bytes_moved / (0.8 * _H100_HBM_BYTES_PER_S) * 1e9)
    grid = (rows if rows is not None else max(1, min(bytes_moved // 16 // block, 1 << 20)), 1, 1)
    return Kernel(_q(op), None if inner is None else _q(inner), _q(name), dur_ns, _launch_tail(grid, (block, 1, 1), regs, 0))


def _elementwise(op: str, inner: str | None, functor: str, arity: int, numel: int, elem_bytes: int) -> Kernel:
    name = f"void at::native::vectorized_elementwise_kernel<4, {functor}, at::detail::Array<char*, {arity}> >(int, {functor}, at::detail::Array<char*, {arity}>)"
    return _memory_bound(op, inner, name, numel * elem_bytes * arity)


def _copy(kind: str, op: str, inner: str, nbytes: int, bytes_per_s: float) -> Kernel:
    dur_ns = 1_300 + int(nbytes / bytes_per_s * 1e9)
    return Kernel(_q(op), _q(inner), _q(kind), dur_ns, cat="gpu_memcpy", api="cudaMemcpyAsync", cbid=41, compute=False, bytes=nbytes)


_LN_FWD = "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, float>(int, float, c10::BFloat16 const*, c10::BFloat16 const*, c10::BFloat16 const*, float*, float*, c10::BFloat16*)"
_LN_BWD_INPUT = "void at::native::(anonymous namespace)::layer_norm_grad_input_kernel_vectorized<c10::BFloat16, float>(c10::BFloat16 const*, c10::BFloat16 const*, float const*, float const*, c10::BFloat16 const*, c10::BFloat16*, int)"
_LN_BWD_GAMMA = "void at::native::(anonymous namespace)::GammaBetaBackwardCUDAKernel_32x32<c10::BFloat16, float>(long, long, c10::BFloat16 const*, c10::BFloat16 const*, float const*, float const*, c10::BFloat16*, c10::BFloat16*)"
_FLASH_TRAITS = "Flash_bwd_kernel_traits<128, 64, 128, 8, 2, 4, 2, false, false, cutlass::bfloat16_t, Flash_kernel_traits<128, 64, 128, 8, cutlass::bfloat16_t> >"
_FLASH_FWD = "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, cutlass::bfloat16_t, Flash_kernel_traits<128, 128, 64, 4, cutlass::bfloat16_t> >, false, true, false, false, true, true, false, false>(pytorch_flash::Flash_fwd_params)"
_FLASH_BWD = f"void pytorch_flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<{_FLASH_TRAITS}, true, false, false, false, false, false, false>(pytorch_flash::Flash_bwd_params)"
_FLASH_BWD_DOT = f"void pytorch_flash::flash_bwd_dot_do_o_kernel<true, {_FLASH_TRAITS} >(pytorch_flash::Flash_bwd_params)"
_ADD_BF16 = "at::native::CUDAFunctor_add<c10::BFloat16>"
_GELU = "at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&, at::native::GeluType)::{lambda()#2}::operator()() const::{lambda()#4}::operator()() const::{lambda(c10::BFloat16)#1}"
_GELU_BWD = "at::native::GeluBackwardCUDAKernelImpl(at::TensorIteratorBase&, at::native::GeluType)::{lambda()#2}::operator()() const::{lambda()#4}::operator()() const::{lambda(c10::BFloat16, c10::BFloat16)#1}"
# Per-parameter AdamW (foreach=False): (op, functor, arity) per update.
_ADAMW_OPS = [
    ("aten::lerp_", "at::native::lerp_kernel_scalar_weight(at::TensorIteratorBase&, c10::Scalar const&)::{lambda()#1}::operator()() const::{lambda()#4}::operator()() const::{lambda(float, float)#1}", 3),
    ("aten::mul_", "at::native::AUnaryFunctor<float, float, float, at::native::binary_internal::MulFunctor<float> >", 2),
    ("aten::addcmul_", "at::native::(anonymous namespace)::addcmul_cuda_kernel(at::TensorIteratorBase&, c10::Scalar const&)::{lambda()#2}::operator()() const::{lambda()#4}::operator()() const::{lambda(float, float, float)#1}", 4),
    ("aten::sqrt", "at::native::sqrt_kernel_cuda(at::TensorIteratorBase&)::{lambda()#2}::operator()() const::{lambda()#4}::operator()() const::{lambda(float)#1}", 2),
    ("aten::div_", "at::native::BinaryFunctor<float, float, float, at::native::binary_internal::DivFunctor<float> >", 3),
    ("aten::add_", "at::native::CUDAFunctor_add<float>", 3),
    ("aten::addcdiv_", "at::native::(anonymous namespace)::addcdiv_cuda_kernel(at::TensorIteratorBase&, c10::Scalar const&)::{lambda()#2}::operator()() const::{lambda()#4}::operator()() const::{lambda(float, float, float)#1}", 4),
]


def _layer_norm_backward(evaluate: str) -> list[Kernel]:
    act = _TOKENS * _HIDDEN * 2
    return [
        _memory_bound(evaluate, "aten::native_layer_norm_backward", _LN_BWD_INPUT, 3 * act, rows=_TOKENS),
        _memory_bound(evaluate, "aten::native_layer_norm_backward", _LN_BWD_GAMMA, 2 * act, rows=_HIDDEN // 32),
    ]


def _layer_forward() -> list[Kernel]:
    h, t = _HIDDEN, _TOKENS
    act = t * h * 2
    ln = _memory_bound("aten::layer_norm", "aten::native_layer_norm", _LN_FWD, 2 * act, rows=t)
    flash_ns = int(4 * t * t * h / 2 / (0.55 * _H100_BF16_FLOPS) * 1e9)
    flash = Kernel(_q("aten::scaled_dot_product_attention"), _q("aten::_scaled_dot_product_flash_attention"), _q(_FLASH_FWD), flash_ns,
                   _launch_tail((t // 128, h // 128, 1), (128, 1, 1), 255, 49_152))
    add = _elementwise("aten::add", None, _ADD_BF16, 3, t * h, 2)
    return [
        ln,
        _gemm("aten::linear", "aten::addmm", "tn", t, 3 * h, h, 0.72),
        flash,
        _gemm("aten::linear", "aten::addmm", "tn", t, h, h, 0.66),
        add,
        ln,
        _gemm("aten::linear", "aten::addmm", "tn", t, 4 * h, h, 0.74),
        _elementwise("aten::gelu", None, _GELU, 2, t * 4 * h, 2),
        _gemm("aten::linear", "aten::addmm", "tn", t, h, 4 * h, 0.72),
        add,
    ]


def _layer_backward() -> list[Kernel]:
    h, t = _HIDDEN, _TOKENS
    addmm = "autograd::engine::evaluate_function: AddmmBackward0"
    flash_eval = "autograd::engine::evaluate_function: ScaledDotProductFlashAttentionBackward0"
    flash_inner = "aten::_scaled_dot_product_flash_attention_backward"
    flash_ns = int(2.5 * 4 * t * t * h / 2 / (0.45 * _H100_BF16_FLOPS) * 1e9)
    residual = _elementwise("aten::add", None, _ADD_BF16, 3, t * h, 2)
    ln = _layer_norm_backward("autograd::engine::evaluate_function: NativeLayerNormBackward0")
    return [
        _gemm(addmm, "aten::mm", "nn", t, 4 * h, h, 0.70),
        _gemm(addmm, "aten::mm", "nt", 4 * h, h, t, 0.70),
        _elementwise("autograd::engine::evaluate_function: GeluBackward0", "aten::gelu_backward", _GELU_BWD, 3, t * 4 * h, 2),
        _gemm(addmm, "aten::mm", "nn", t, h, 4 * h, 0.70),
        _gemm(addmm, "aten::mm", "nt", h, 4 * h, t, 0.70),
        *ln,
        residual,
        _gemm(addmm, "aten::mm", "nn", t, h, h, 0.64),
        _gemm(addmm, "aten::mm", "nt", h, h, t, 0.64),
        _memory_bound(flash_eval, flash_inner, _FLASH_BWD_DOT, 2 * t * h * 2, rows=t // 128),
        Kernel(_q(flash_eval), _q(flash_inner), _q(_FLASH_BWD), flash_ns, _launch_tail((t // 128, h // 128, 1), (256, 1, 1), 255, 98_304)),
        _gemm(addmm, "aten::mm", "nn", t, h, 3 * h, 0.70),
        _gemm(addmm, "aten::mm", "nt", 3 * h, h, t, 0.70),
        *ln,
        residual,
    ]


def _collective(coll_name: str, annotation: str, kernel_name: str, in_nelems: int, out_nelems: int, dtype: str,
                elem_bytes: int, world: int, multi_host: bool) -> Collective:
    ranks = "[" + ", ".join(str(i) for i in range(world)) + "]"
    common = (
        f'"Collective name": "{coll_name}", "In msg nelems": {in_nelems}, "Out msg nelems": {out_nelems}, "Group size": {world}, '
        f'"dtype": "{dtype}", "In split size": "[]", "Out split size": "[]", "Process Group Name": "0", '
        f'"Process Group Description": "default_pg", "Process Group Ranks": "{ranks}"'
    )
    # nccl-tests bus-bandwidth factors: all_reduce moves 2(n-1)/n of the
    # buffer per rank, all_gather/reduce_scatter (n-1)/n of the large side.
    if coll_name == "allreduce":
        moved = in_nelems * elem_bytes * 2 * (world - 1) / world
    else:
        moved = max(in_nelems, out_nelems) * elem_bytes * (world - 1) / world
    busbw = _NETWORK_BUSBW_BYTES_PER_S if multi_host else _NVLINK_BUSBW_BYTES_PER_S
    xfer_ns = _NCCL_LATENCY_NS[multi_host] + int(moved / busbw * 1e9)
    tail = _launch_tail((24, 1, 1), (640, 1, 1), 96, 9_496) + ", " + common
    kernel = Kernel(_q("record_param_comms"), None, _q(kernel_name + _NCCL_KERNEL_ARGS_TAIL), xfer_ns, tail,
                    api="cuLaunchKernelEx", cbid=652, compute=False)
    args = common + ', "Global rank start": 0, "Global rank stride": 1'
    return Collective(_q(annotation), kernel, args, xfer_ns)


def build_plan(kernels_per_step: int, world: int, multi_host: bool) -> Plan:
    """The per-step program with `kernels_per_step` GPU activities."""
    if kernels_per_step < MIN_KERNELS_PER_STEP:
        raise UsageError(f"kernels per step must be at least {MIN_KERNELS_PER_STEP}, got {kernels_per_step}")
    h, t, v = _HIDDEN, _TOKENS, _VOCAB
    layers = (kernels_per_step - _FIXED_KERNELS_PER_STEP - _MIN_OPTIMIZER_KERNELS) // _KERNELS_PER_LAYER
    optimizer_kernels = kernels_per_step - _FIXED_KERNELS_PER_STEP - layers * _KERNELS_PER_LAYER
    head = [_copy("Memcpy HtoD (Pinned -> Device)", "aten::to", "aten::copy_", t * 8, 24e9)] * 2
    embedding = _memory_bound(
        "aten::embedding", "aten::index_select",
        "void at::native::(anonymous namespace)::indexSelectLargeIndex<c10::BFloat16, long, unsigned int, 2, 2, -2, true>(at::cuda::detail::TensorInfo<c10::BFloat16, unsigned int>, at::cuda::detail::TensorInfo<c10::BFloat16 const, unsigned int>, at::cuda::detail::TensorInfo<long const, unsigned int>, int, int, unsigned int, unsigned int, long)",
        2 * t * h * 2)
    logits = t * v * 4
    forward_tail = [
        _memory_bound("aten::layer_norm", "aten::native_layer_norm", _LN_FWD, 2 * t * h * 2, rows=t),
        _gemm("aten::linear", "aten::mm", "tn", t, v, h, 0.75, nvjet=True),
        _memory_bound("aten::log_softmax", "aten::_log_softmax",
                      "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, at::native::(anonymous namespace)::LogSoftMaxForwardEpilogue>(float*, float const*, int)",
                      2 * logits, rows=t, block=1024),
        _memory_bound("aten::nll_loss_nd", "aten::nll_loss_forward",
                      "void at::native::(anonymous namespace)::nll_loss_forward_reduce_cuda_kernel_2d<float, float, long>(float*, float*, float const*, long const*, float const*, bool, long, long, long, long)",
                      t * 16, rows=1, block=32),
    ]
    nll_eval = "autograd::engine::evaluate_function: NllLossBackward0"
    memset = Kernel(_q(nll_eval), _q("aten::zero_"), _q("Memset (Device)"), 2_000 + int(logits / (0.9 * _H100_HBM_BYTES_PER_S) * 1e9),
                    cat="gpu_memset", api="cudaMemsetAsync", cbid=51, compute=False, bytes=logits)
    backward_head = [
        memset,
        _memory_bound(nll_eval, "aten::nll_loss_backward",
                      "void at::native::(anonymous namespace)::nll_loss_backward_reduce_cuda_kernel_2d<float, long>(float*, float const*, long const*, float const*, float const*, bool, int, int, long, long)",
                      t * 16, rows=1, block=32),
        _memory_bound("autograd::engine::evaluate_function: LogSoftmaxBackward0", "aten::_log_softmax_backward_data",
                      "void at::native::(anonymous namespace)::cunn_SoftMaxBackward<4, float, float, float, at::native::(anonymous namespace)::LogSoftMaxBackwardEpilogue>(float*, float const*, float const*, long)",
                      3 * logits, rows=t, block=1024),
        _gemm("autograd::engine::evaluate_function: MmBackward0", "aten::mm", "nn", t, h, v, 0.72, nvjet=True),
        _gemm("autograd::engine::evaluate_function: MmBackward0", "aten::mm", "nt", v, h, t, 0.72, nvjet=True),
        *_layer_norm_backward("autograd::engine::evaluate_function: NativeLayerNormBackward0"),
    ]
    embedding_backward = [_memory_bound(
        "autograd::engine::evaluate_function: EmbeddingBackward0", "aten::embedding_dense_backward",
        "void at::native::(anonymous namespace)::embedding_backward_feature_kernel<c10::BFloat16, float, long>(long const*, c10::BFloat16 const*, c10::BFloat16*, int, long, int)",
        3 * t * h * 2, block=1024)]
    # Norm weights and biases dominate the parameter count of the loop, not
    # the bytes: tiny kernels, so this phase is CPU-bound.
    sizes = [h, h, 3 * h, h, h, h]
    optimizer = []
    for i in range(optimizer_kernels):
        op, functor, arity = _ADAMW_OPS[i % len(_ADAMW_OPS)]
        optimizer.append(_elementwise(op, None, functor, arity, sizes[(i // len(_ADAMW_OPS)) % len(sizes)], 4))
    item = _copy("Memcpy DtoH (Device -> Pageable)", "aten::item", "aten::_local_scalar_dense", 4, 1e9)
    multi = multi_host
    shard = -(-v * h // world)
    bucket_kernel = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL"
    return Plan(
        head=head,
        forward=[embedding, *_layer_forward() * layers, *forward_tail],
        backward_head=backward_head,
        layers=layers,
        layer_backward=_layer_backward(),
        embedding_backward=embedding_backward,
        optimizer=optimizer,
        item=item,
        head_bucket=_collective("allreduce", "nccl:all_reduce", bucket_kernel, v * h, v * h, "BFloat16", 2, world, multi),
        layer_bucket=_collective("allreduce", "nccl:all_reduce", bucket_kernel, 12 * h * h, 12 * h * h, "BFloat16", 2, world, multi),
        reduce_scatter=_collective("_reduce_scatter_base", "nccl:_reduce_scatter_base", "ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL",
                                   shard * world, shard, "BFloat16", 2, world, multi),
        all_gather=_collective("_allgather_base", "nccl:_all_gather_base", "ncclDevKernel_AllGather_RING_LL",
                               shard, shard * world, "BFloat16", 2, world, multi),
        loss_all_reduce=_collective("allreduce", "nccl:all_reduce", "ncclDevKernel_AllReduce_Sum_f32_RING_LL", 1, 1, "Float", 4, world, multi),
    )


def device_properties_json(gpus: int) -> str:
    """Kineto's deviceProperties block for `gpus` H100 SXM5 80GB."""
    entries = []
    for i in range(gpus):
        entries.append(
            f'    {{\n      "id": {i}, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 84942979072,\n'
            '      "computeMajor": 9, "computeMinor": 0,\n'
            '      "maxThreadsPerBlock": 1024, "maxThreadsPerMultiprocessor": 2048,\n'
            '      "regsPerBlock": 65536, "warpSize": 32,\n'
            f'      "sharedMemPerBlock": 49152, "numSms": {H100_SMS}\n'
            '    , "regsPerMultiprocessor": 65536, "sharedMemPerBlockOptin": 232448, "sharedMemPerMultiprocessor": 233472\n    }'
        )
    return "[\n" + ",\n".join(entries) + "\n  ]"


def distributed_info_json(rank: int, world: int) -> str:
    ranks = ", ".join(str(i) for i in range(world))
    return (
        f'{{"backend": "nccl", "rank": {rank}, "world_size": {world}, "pg_count": 1, "pg_config": '
        f'[{{"pg_name": "0", "pg_desc": "default_pg", "backend_config": "cuda:nccl", "pg_size": {world}, "ranks": [{ranks}]}}], '
        f'"nccl_version": "2.21.5"}}'
    )


# --- generating the events ------------------------------------------------------

@dataclass
class _Rank:
    """The moving state of one rank's timelines while a step is generated."""

    rank: int
    device: int
    pid: int
    main_tid: int
    autograd_tid: int
    rng: random.Random
    cpu_ns: int
    tid: int = 0
    compute_free_ns: int = 0
    comm_free_ns: int = 0
    # Compute slow-down this step (>1 for the straggler).
    slow: float = 1.0
    # Mean Python time between ops: module code in forward and the
    # optimizer, the C++ autograd engine in backward.
    gap_ns: int = 20_000
    ext_id: int = 0
    corr_id: int = 0
    ev_idx: int = 0
    # First kernel start since a GPU-side annotation opened.
    region_start_ns: int | None = None
    queue: deque[int] = field(default_factory=deque)
    cpu: list[str] = field(default_factory=list)
    gpu: list[str] = field(default_factory=list)


def _us(ns: int) -> str:
    """Kineto's µs with three decimals, exact (from integer ns)."""
    return f"{ns // 1000}.{ns % 1000:03d}"


def _x(cat: str, name: str, pid: int, tid: int, ts_ns: int, dur_ns: int, args: str) -> str:
    # `name` is already a JSON string literal (quotes included).
    return (
        f'  {{\n    "ph": "X", "cat": "{cat}", "name": {name}, "pid": {pid}, "tid": {tid},\n'
        f'    "ts": {ts_ns // 1000}.{ts_ns % 1000:03d}, "dur": {dur_ns // 1000}.{dur_ns % 1000:03d},\n'
        f'    "args": {{\n      {args}\n    }}\n  }}'
    )


def _flow(ph: str, corr: int, pid: int, tid: int, ts_ns: int) -> str:
    end = ', "bp": "e"' if ph == "f" else ""
    return (
        f'  {{\n    "ph": "{ph}", "id": {corr}, "pid": {pid}, "tid": {tid}, "ts": {ts_ns // 1000}.{ts_ns % 1000:03d},\n'
        f'    "cat": "ac2g", "name": "ac2g"{end}\n  }}'
    )


def _runtime(r: _Rank, name: str, cbid: int, ts_ns: int, dur_ns: int, ext: int, cat: str = "cuda_runtime") -> int:
    r.corr_id += 1
    args = f'"External id": {ext},      "cbid": {cbid}, "correlation": {r.corr_id}'
    r.cpu.append(_x(cat, f'"{name}"', r.pid, r.tid, ts_ns, dur_ns, args))
    return r.corr_id


def _gpu_activity(r: _Rank, k: Kernel, ext: int, corr: int, start_ns: int, dur_ns: int, stream: int) -> None:
    head = f'"External id": {ext},      "queued": 0, "device": {r.device}, "context": 1,      "stream": {stream}, "correlation": {corr}'
    if k.cat == "kernel":
        args = head + k.tail
    else:
        args = f'{head},      "bytes": {k.bytes}, "memory bandwidth (GB/s)": {k.bytes / dur_ns:.6f}'
    r.gpu.append(_x(k.cat, k.name, r.device, stream, start_ns, dur_ns, args))
    r.gpu.append(_flow("f", corr, r.device, stream, start_ns))


def _launch(r: _Rank, k: Kernel) -> None:
    """One op (outer, optional inner) launching one GPU activity on stream 7.

    The hot path of the synthesiser: times first, then each side's events
    as one formatted string (a few million of these per run).
    """
    rnd = r.rng.random
    t0 = r.cpu_ns
    outer_ext = r.ext_id + 1
    outer_ev = r.ev_idx
    inner_start = t = t0 + 3_000 + int(rnd() * 4_000)
    if k.inner is not None:
        launch_ext = r.ext_id = outer_ext + 1
        r.ev_idx += 2
        t += 4_000 + int(rnd() * 8_000)
    else:
        launch_ext = r.ext_id = outer_ext
        r.ev_idx += 1
    # Launch queue full: the call blocks until the oldest kernel retires.
    queue = r.queue
    while queue and queue[0] <= t:
        queue.popleft()
    rt_dur = 2_500 + int(rnd() * 3_500)
    if len(queue) >= LAUNCH_QUEUE_DEPTH:
        free_at = queue[len(queue) - LAUNCH_QUEUE_DEPTH]
        while queue and queue[0] <= free_at:
            queue.popleft()
        rt_dur = max(rt_dur, free_at - t + 2_000)
    corr = r.corr_id = r.corr_id + 1
    ready = t + 2_500 + int(rnd() * 3_000)
    start = max(ready, r.compute_free_ns + 1_000 + int(rnd() * 1_000))
    dur = int(k.dur_ns * (r.slow if k.compute else 1.0) * (0.97 + 0.06 * rnd()))
    r.compute_free_ns = start + dur
    queue.append(start + dur)
    if r.region_start_ns is None:
        r.region_start_ns = start
    rt = t
    t += rt_dur
    inner = ""
    pid, tid = r.pid, r.tid
    if k.inner is not None:
        t += 1_000 + int(rnd() * 1_500)
        d = t - inner_start
        inner = (
            f'  {{\n    "ph": "X", "cat": "cpu_op", "name": {k.inner}, "pid": {pid}, "tid": {tid},\n'
            f'    "ts": {inner_start // 1000}.{inner_start % 1000:03d}, "dur": {d // 1000}.{d % 1000:03d},\n'
            f'    "args": {{\n      "External id": {launch_ext},"Record function id": {launch_ext}, "Ev Idx": {outer_ev + 1}\n    }}\n  }},\n'
        )
    t += 1_000 + int(rnd() * 2_000)
    d = t - t0
    rt_ts = f"{rt // 1000}.{rt % 1000:03d}"
    r.cpu.append(
        f'  {{\n    "ph": "X", "cat": "cpu_op", "name": {k.op}, "pid": {pid}, "tid": {tid},\n'
        f'    "ts": {t0 // 1000}.{t0 % 1000:03d}, "dur": {d // 1000}.{d % 1000:03d},\n'
        f'    "args": {{\n      "External id": {outer_ext},"Record function id": {outer_ext}, "Ev Idx": {outer_ev}\n    }}\n  }},\n'
        f"{inner}"
        f'  {{\n    "ph": "X", "cat": "cuda_runtime", "name": "{k.api}", "pid": {pid}, "tid": {tid},\n'
        f'    "ts": {rt_ts}, "dur": {rt_dur // 1000}.{rt_dur % 1000:03d},\n'
        f'    "args": {{\n      "External id": {launch_ext},      "cbid": {k.cbid}, "correlation": {corr}\n    }}\n  }},\n'
        f'  {{\n    "ph": "s", "id": {corr}, "pid": {pid}, "tid": {tid}, "ts": {rt_ts},\n    "cat": "ac2g", "name": "ac2g"\n  }}'
    )
    if k.cat == "kernel":
        device = r.device
        ts = f"{start // 1000}.{start % 1000:03d}"
        r.gpu.append(
            f'  {{\n    "ph": "X", "cat": "kernel", "name": {k.name}, "pid": {device}, "tid": {COMPUTE_STREAM},\n'
            f'    "ts": {ts}, "dur": {dur // 1000}.{dur % 1000:03d},\n'
            f'    "args": {{\n      "External id": {launch_ext},      "queued": 0, "device": {device}, "context": 1,'
            f'      "stream": {COMPUTE_STREAM}, "correlation": {corr}{k.tail}\n    }}\n  }},\n'
            f'  {{\n    "ph": "f", "id": {corr}, "pid": {device}, "tid": {COMPUTE_STREAM}, "ts": {ts},\n'
            f'    "cat": "ac2g", "name": "ac2g", "bp": "e"\n  }}'
        )
    else:
        _gpu_activity(r, k, launch_ext, corr, start, dur, COMPUTE_STREAM)
    # Python between ops; now and then a longer stall (GC, logging).
    gap = r.gap_ns // 2 + int(rnd() * r.gap_ns)
    if rnd() < 0.002:
        gap += 50_000 + int(rnd() * 250_000)
    r.cpu_ns = t + gap


def _open(r: _Rank) -> tuple[int, int, int, int]:
    """Reserve a place for an annotation whose end is not known yet."""
    r.ext_id += 1
    r.ev_idx += 1
    r.cpu.append("")
    r.region_start_ns = None
    return len(r.cpu) - 1, r.cpu_ns, r.ext_id, r.ev_idx - 1


def _close(r: _Rank, token: tuple[int, int, int, int], name: str, gpu: bool = False) -> None:
    slot, t0, ext, ev = token
    r.cpu_ns += 2_000
    args = f'"External id": {ext},"Record function id": {ext}, "Ev Idx": {ev}'
    r.cpu[slot] = _x("user_annotation", name, r.pid, r.tid, t0, r.cpu_ns - t0, args)
    if gpu and r.region_start_ns is not None:
        start = r.region_start_ns
        r.gpu.append(_x("gpu_user_annotation", name, r.device, COMPUTE_STREAM, start, r.compute_free_ns - start, f'"External id": {ext}'))


def _cpu_only(r: _Rank, name: str, dur_ns: int) -> None:
    token = _open(r)
    r.cpu_ns += dur_ns
    _close(r, token, name)


def _wait_comm(r: _Rank) -> None:
    """The compute stream waits for the NCCL stream (DDP's work.wait())."""
    ext = r.ext_id
    _runtime(r, "cudaStreamWaitEvent", 147, r.cpu_ns, 1_500, ext)
    r.cpu_ns += 4_000
    r.compute_free_ns = max(r.compute_free_ns, r.comm_free_ns)


def _run_collective(r: _Rank, c: Collective, seq: int) -> Generator[int, int, None]:
    """Launch one collective; yields the time the rank's NCCL kernel can start
    and receives the time it ends (set by the slowest rank)."""
    rnd = r.rng.random
    t0 = r.cpu_ns
    ext = r.ext_id = r.ext_id + 1
    slot = len(r.cpu)
    r.cpu.append("")
    ev = r.ev_idx
    r.ev_idx += 1
    t = t0 + 4_000 + int(rnd() * 3_000)
    _runtime(r, "cudaEventRecord", 135, t, 1_500, ext)
    t += 4_000
    _runtime(r, "cudaStreamWaitEvent", 147, t, 1_200, ext)
    t += 6_000 + int(rnd() * 4_000)
    ann = r.ext_id = r.ext_id + 1
    ann_ev = r.ev_idx
    r.ev_idx += 1
    ann_start = t
    t += 10_000 + int(rnd() * 8_000)
    launch_dur = 6_000 + int(rnd() * 6_000)
    corr = _runtime(r, "cuLaunchKernelEx", 652, t, launch_dur, ext, cat="cuda_driver")
    r.cpu.append(_flow("s", corr, r.pid, r.tid, t))
    ready = max(t + 5_000 + int(rnd() * 4_000), r.compute_free_ns + 1_500, r.comm_free_ns + 1_500)
    t += launch_dur + 6_000 + int(rnd() * 4_000)
    args = f'"External id": {ann},"Record function id": {ann}, "Ev Idx": {ann_ev}'
    r.cpu.append(_x("user_annotation", c.annotation, r.pid, r.tid, ann_start, t - ann_start, args))
    t += 3_000
    _runtime(r, "cudaEventRecord", 135, t, 1_000, ext)
    t += 5_000 + int(rnd() * 3_000)
    args = f'"External id": {ext},"Record function id": {ext}, "Ev Idx": {ev}, {c.args}, "Seq": {seq}'
    r.cpu[slot] = _x("cpu_op", '"record_param_comms"', r.pid, r.tid, t0, t - t0, args)
    r.cpu_ns = t + 4_000 + int(rnd() * 8_000)

    end = yield ready
    end += int(rnd() * 3_000)
    r.comm_free_ns = end
    _gpu_activity(r, c.kernel, ext, corr, ready, end - ready, COMM_STREAM)
    r.gpu.append(_x("gpu_user_annotation", c.annotation, r.device, COMM_STREAM, ready, end - ready, f'"External id": {ann}'))


def _rank_step(r: _Rank, plan: Plan, step: int, seq0: int) -> Generator[int, int, None]:
    """All events of one profiler step on one rank; yields at each collective."""
    rnd = r.rng.random
    seq = seq0
    r.tid = r.main_tid
    step_name = f'"ProfilerStep#{step}"'
    step_token = _open(r)
    r.cpu_ns += 20_000
    # Data loading is CPU-only; every few steps a slow batch.
    r.gap_ns = 24_000
    load_ns = 800_000 + int(rnd() * 400_000)
    if rnd() < 0.03:
        load_ns += 6_000_000
    _cpu_only(r, '"enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"', load_ns)
    for k in plan.head:
        _launch(r, k)
    _cpu_only(r, '"Optimizer.zero_grad#AdamW.zero_grad"', 40_000 + int(rnd() * 80_000))

    token = _open(r)
    for k in plan.forward:
        _launch(r, k)
    _close(r, token, '"DistributedDataParallel.forward"', gpu=True)

    # Backward on the autograd thread; DDP launches a bucket's all_reduce as
    # soon as its gradients are ready, overlapping the rest of backward.
    r.tid = r.autograd_tid
    r.gap_ns = 8_000
    r.cpu_ns += 30_000
    for k in plan.backward_head:
        _launch(r, k)
    yield from _run_collective(r, plan.head_bucket, seq)
    seq += 1
    for _ in range(plan.layers):
        for k in plan.layer_backward:
            _launch(r, k)
        yield from _run_collective(r, plan.layer_bucket, seq)
        seq += 1
    for k in plan.embedding_backward:
        _launch(r, k)
    yield from _run_collective(r, plan.reduce_scatter, seq)
    seq += 1

    r.tid = r.main_tid
    r.gap_ns = 24_000
    r.cpu_ns += 25_000
    _wait_comm(r)
    token = _open(r)
    for k in plan.optimizer:
        _launch(r, k)
    _close(r, token, '"Optimizer.step#AdamW.step"', gpu=True)
    yield from _run_collective(r, plan.all_gather, seq)
    seq += 1
    yield from _run_collective(r, plan.loss_all_reduce, seq)
    _wait_comm(r)
    _launch(r, plan.item)
    # loss.item(): cudaStreamSynchronize returns when the copy has landed.
    sync_start = r.cpu_ns - 2_000
    sync_end = max(sync_start + 3_000, r.compute_free_ns + 2_000)
    _runtime(r, "cudaStreamSynchronize", 131, sync_start, sync_end - sync_start, r.ext_id)
    r.cpu_ns = sync_end + 10_000 + int(rnd() * 20_000)
    _close(r, step_token, step_name)


def _advance(gen: Generator[int, int, None], value: int | None) -> int | None:
    try:
        return next(gen) if value is None else gen.send(value)
    except StopIteration:
        return None


def _run_step(ranks: list[_Rank], plan: Plan, step: int, seq0: int, rng: random.Random) -> None:
    """Advance every rank through one step, meeting at each collective."""
    gens = [_rank_step(r, plan, step, seq0) for r in ranks]
    ready = [_advance(g, None) for g in gens]
    for c in plan.step_collectives:
        if any(t is None for t in ready):
            raise RuntimeError("ranks disagree on the collective sequence")
        end = max(ready) + c.xfer_ns + int(rng.random() * 2_000)  # type: ignore[type-var]
        ready = [_advance(g, end) for g in gens]
    if any(t is not None for t in ready):
        raise RuntimeError("ranks disagree on the collective sequence")


def _metadata(r: _Rank, host_ts_ns: int, end_ns: int) -> list[str]:
    ts = _us(host_ts_ns)

    def meta(name: str, pid: int | str, tid: int | str, key: str, value: str) -> str:
        return f'  {{\n    "name": "{name}", "ph": "M", "ts": {ts}, "pid": {pid}, "tid": {tid},\n    "args": {{\n      "{key}": {value}\n    }}\n  }}'

    events = [
        meta("process_name", r.pid, 0, "name", '"python3.11"'),
        meta("process_name", r.device, 0, "name", '"python3.11"'),
        meta("process_labels", r.device, 0, "labels", f'"GPU {r.device}"'),
        meta("process_sort_index", r.device, 0, "sort_index", str(16_777_216 + r.device)),
    ]
    for stream in (COMPUTE_STREAM, COMM_STREAM):
        events.append(meta("thread_name", r.device, stream, "name", f'"stream {stream} "'))
        events.append(meta("thread_sort_index", r.device, stream, "sort_index", str(stream)))
    for tid, label in ((r.main_tid, "python"), (r.autograd_tid, "pt_autograd_0")):
        events.append(meta("thread_name", r.pid, tid, "name", f'"thread {tid} ({label})"'))
        events.append(meta("thread_sort_index", r.pid, tid, "sort_index", str(tid)))
    dur = end_ns - host_ts_ns
    events.append(
        f'  {{\n    "ph": "X", "cat": "Trace", "ts": {ts}, "dur": {_us(dur)},\n    "pid": "Spans", "tid": "PyTorch Profiler",\n'
        f'    "name": "PyTorch Profiler (0)",\n    "args": {{\n      "Op count": 0\n    }}\n  }}'
    )
    events.append(f'  {{\n    "name": "Iteration Start: PyTorch Profiler", "ph": "i", "s": "g",\n    "pid": "Traces", "tid": "Trace PyTorch Profiler", "ts": {ts}\n  }}')
    events.append(f'  {{\n    "name": "Record Window End", "ph": "i", "s": "g",\n    "pid": "", "tid": "", "ts": {_us(end_ns)}\n  }}')
    return events


def _mix(*values: int) -> int:
    """A reproducible 63-bit integer from a few integers (splitmix64)."""
    x = 0x9E3779B97F4A7C15
    for v in values:
        x = (x ^ (v & 0xFFFFFFFFFFFFFFFF)) * 0xBF58476D1CE4E5B9 & 0xFFFFFFFFFFFFFFFF
        x = (x ^ (x >> 31)) * 0x94D049BB133111EB & 0xFFFFFFFFFFFFFFFF
    return x >> 1


def write_training_traces(
    out_dir: Path,
    ranks: int = 8,
    steps: int = 10,
    seed: int = 0,
    straggler_rank: int | None = None,
    kernels_per_step: int = 200,
    gzip: bool = False,
    base_time_ns: int = 1_767_225_600_000_000_000,
    world_hosts: int | None = None,
) -> list[Path]:
    """Write one Kineto trace per rank of a simulated DDP job; return the paths.

    `kernels_per_step` is the exact number of GPU activities (kernels,
    copies, memsets, NCCL kernels) per rank and step; the transformer's
    depth follows from it (at least `MIN_KERNELS_PER_STEP`). Ranks fill
    nodes of 8 GPUs, or spread evenly over `world_hosts` nodes; collectives
    that span nodes run at network rather than NVLink bandwidth. Files are named as
    `tensorboard_trace_handler` names them, with the rank in front:
    `rank-<r>.<host>_<pid>.<ms>.pt.trace.json[.gz]`.
    """
    if ranks < 1:
        raise UsageError(f"ranks must be at least 1, got {ranks}")
    if steps < 1:
        raise UsageError(f"steps must be at least 1, got {steps}")
    if straggler_rank is not None and not 0 <= straggler_rank < ranks:
        raise UsageError(f"straggler rank {straggler_rank} is not one of the {ranks} ranks")
    if world_hosts is None:
        per_host = min(ranks, GPUS_PER_HOST)
    elif world_hosts < 1 or ranks % world_hosts:
        raise UsageError(f"{ranks} ranks do not spread evenly over {world_hosts} hosts")
    else:
        per_host = ranks // world_hosts
    plan = build_plan(kernels_per_step, ranks, multi_host=per_host < ranks)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)

    states: list[_Rank] = []
    for rank in range(ranks):
        pid = 10_000 + _mix(seed, rank, 1) % 3_000_000
        start = _TRACE_START_NS + _mix(seed, rank, 2) % 400_000
        states.append(
            _Rank(rank=rank, device=rank % per_host, pid=pid, main_tid=pid, autograd_tid=pid + 29 + rank % 7,
                  rng=random.Random(_mix(seed, rank, 3)), cpu_ns=start, compute_free_ns=start, comm_free_ns=start,
                  corr_id=_CORRELATION_AT_START + _mix(seed, rank, 5) % 20_000)
        )
    coordinator_rng = random.Random(_mix(seed, 0xC0FFEE))
    starts = [r.cpu_ns for r in states]

    # Names need the end time: write under temporary names, then rename.
    temp_paths = [out_dir / f".rank-{r.rank}.{os.getpid()}.partial" for r in states]
    raw = [open(p, "wb") for p in temp_paths]
    sinks: list[BinaryIO] = [
        gzip_module.GzipFile(filename="", mode="wb", fileobj=h, mtime=0, compresslevel=3) if gzip else h for h in raw
    ]
    paths: list[Path] = []
    try:
        for r, sink in zip(states, sinks):
            sink.write(_header(r, ranks, per_host).encode())
        for i in range(steps):
            step = FIRST_PROFILER_STEP + i
            slow_factor = 1.15 + 0.15 * coordinator_rng.random()
            for r in states:
                r.slow = slow_factor if r.rank == straggler_rank else 1.0 + 0.02 * r.rng.random()
            _run_step(states, plan, step, _SEQ_AT_START + step * len(plan.step_collectives), coordinator_rng)
            for r, sink in zip(states, sinks):
                chunk = ",\n".join(r.cpu + r.gpu)
                sink.write((chunk if i == 0 else ",\n" + chunk).encode())
                r.cpu.clear()
                r.gpu.clear()
        for r, start, sink in zip(states, starts, sinks):
            end = max(r.cpu_ns, r.compute_free_ns, r.comm_free_ns)
            sink.write((",\n" + ",\n".join(_metadata(r, start, end)) + _footer(r, seed, base_time_ns)).encode())
            stamp_ms = (base_time_ns + end) // 1_000_000
            host = _host_name(r.rank, per_host)
            suffix = ".pt.trace.json.gz" if gzip else ".pt.trace.json"
            paths.append(out_dir / f"rank-{r.rank}.{host}_{r.pid}.{stamp_ms}{suffix}")
    finally:
        for sink, handle in zip(sinks, raw):
            sink.close()
            handle.close()
        if len(paths) != len(temp_paths):
            for temp in temp_paths:
                temp.unlink(missing_ok=True)
    for temp, path in zip(temp_paths, paths):
        os.replace(temp, path)
    return paths


def _header(r: _Rank, ranks: int, per_host: int) -> str:
    return (
        '{\n  "schemaVersion": 1,\n'
        f'  "deviceProperties": {device_properties_json(per_host)},\n'
        f'  "distributedInfo": {distributed_info_json(r.rank, ranks)},\n'
        # What `prof.add_metadata_json("hostname", ...)` adds; Kineto itself
        # records no host name.
        f'  "hostname": "{_host_name(r.rank, per_host)}",\n'
        '  "record_shapes": 0,\n  "traceEvents": [\n'
    )


def _host_name(rank: int, per_host: int) -> str:
    return f"sim-node-{rank // per_host:02d}"


def _footer(r: _Rank, seed: int, base_time_ns: int) -> str:
    token = f"{_mix(seed, r.rank, 4):016x}"[:8]
    return (
        f'\n  ],\n  "traceName": "/tmp/tmp{token}.json",\n  "displayTimeUnit": "ms",\n'
        f'  "baseTimeNanoseconds": {base_time_ns}\n}}\n'
    )
