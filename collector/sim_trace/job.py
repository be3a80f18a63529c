"""The simulated training job: which kernels and collectives one profiler step
of a data-parallel transformer on H100s runs, with their sizes and durations.

`build_plan` gives the per-step program every rank runs; `collector.sim_trace`
turns it into per-rank Kineto events.
"""

from __future__ import annotations

from dataclasses import dataclass

import orjson

from gpulens.collector.errors import UsageError

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
