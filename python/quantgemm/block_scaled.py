"""Block-scaled FP8 GEMM (DeepSeek-V3's recipe): e4m3 activations with an fp32 scale per token per
128 of K, e4m3 weights with an fp32 scale per 128 x 128 block, bf16 out. The scales vary along K,
so the kernel applies them inside the K loop: each 128-wide k block accumulates in the tensor core
and is promoted into fp32 times its two scales (docs/math.md).

    out[m, n] = sum_kb a_scales[m, kb] * b_scales[n // 128, kb] * sum_{k in kb} a[m, k] * b[n, k]

Scale layouts: a_scales [M, ceil(K / 128)] and b_scales [ceil(N / 128), ceil(K / 128)], fp32,
row-major, what quantize_fp8_groups and quantize_fp8_blocks return and DeepSeek-V3's checkpoints
store (weight_scale_inv). Scales in another layout (DeepGEMM's column-major activation scales, a
transposed view) are accepted and copied to row-major for the call: block_scales_row_major.
"""

from __future__ import annotations

import torch

from . import _checks
from ._native import compiled_schedules, native
from .scaled import K_ALIGN, N_ALIGN, _aligned, _launch, _ld, _out_buffer, _round_up

FAMILY = "fp8block_bf16"
BLOCK = 128  #: k (and weight rows) per scale
FP8 = torch.float8_e4m3fn


def scale_blocks(x: int) -> int:
    """Scale blocks along a dimension of x elements."""
    return -(-x // BLOCK)


def block_scales_row_major(scales: torch.Tensor) -> torch.Tensor:
    """scales as the kernel reads them: row-major and contiguous (a copy when they are not, e.g.
    DeepGEMM's column-major [M, K / 128] activation scales)."""
    return scales if scales.is_contiguous() else scales.contiguous()


def check_block_scaled_mm_args(a, a_scales, b, b_scales, out=None, schedule=None) -> None:
    """block_scaled_mm's checks of what the arguments are (not where they live): they need no GPU
    and run on fake tensors too."""
    _checks.tensor("a", a, dtype=FP8, ndim=2)
    m, n, k = _checks.weight_operand(a, b)
    _checks.tensor("a_scales", a_scales, dtype=torch.float32, ndim=2)
    _checks.shape("a_scales", a_scales, (m, scale_blocks(k)))
    _checks.tensor("b_scales", b_scales, dtype=torch.float32, ndim=2)
    _checks.shape("b_scales", b_scales, (scale_blocks(n), scale_blocks(k)))
    if out is not None:
        _checks.tensor("out", out, dtype=torch.bfloat16, ndim=2)
        _checks.shape("out", out, (m, n))
    if schedule is not None and schedule not in supported_schedules():
        raise ValueError(f"schedule must be one of {supported_schedules()}, got {schedule!r}")


def supported_schedules() -> list[str]:
    """The block-scaled schedules compiled into this build."""
    return list(compiled_schedules(FAMILY))


def select_schedule(m: int, n: int, k: int) -> str:
    """The schedule the dispatch picks for an M x N x K problem."""
    return native().select(FAMILY, m, _round_up(n, N_ALIGN), _round_up(k, K_ALIGN))


def block_scaled_mm(a: torch.Tensor, a_scales: torch.Tensor, b: torch.Tensor, b_scales: torch.Tensor,
                    out: torch.Tensor | None = None, schedule: str | None = None) -> torch.Tensor:
    """out [M, N] bf16 = the block-scaled product of a [M, K] and b [N, K] (module docstring).

    a, b: torch.float8_e4m3fn on a Hopper GPU, unit stride along K (a may be a row slice with a
    larger row stride). a_scales: fp32 [M, ceil(K / 128)]; b_scales: fp32 [ceil(N / 128),
    ceil(K / 128)]. out: optional bf16 [M, N] destination (unit stride along N). Any M (M = 0 gives
    an empty result); N and K need not be multiples of 128: the kernel's bounds handle them. K not a
    multiple of 16 and N not a multiple of 8 (which the TMA cannot address) work through zero-padded
    copies for the call. Runs on torch's current stream without synchronizing the host.
    """
    check_block_scaled_mm_args(a, a_scales, b, b_scales, out, schedule)
    m, k = a.shape
    n = b.shape[0]
    index = _checks.cuda_index("a", a)
    for name, x in (("a_scales", a_scales), ("b", b), ("b_scales", b_scales), ("out", out)):
        if x is not None:
            _checks.same_device(name, x, index)
    if out is None:
        out = torch.empty((m, n), dtype=torch.bfloat16, device=a.device)
    if m == 0:
        return out
    _checks.hopper("block_scaled_mm", index)
    for name, x in (("a", a), ("b", b), ("out", out)):
        if x.stride(1) != 1 and x.shape[1] > 1:
            raise ValueError(f"{name} must have unit stride along its last dimension, got strides {x.stride()}")
    k_pad, n_pad = _round_up(k, K_ALIGN), _round_up(n, N_ALIGN)
    a_run = _aligned(a, m, k_pad)
    b_run = _aligned(b, n_pad, k_pad)
    out_run = _out_buffer(out, n_pad)
    sa = block_scales_row_major(a_scales)
    sb = block_scales_row_major(b_scales)
    _launch(index, lambda ws, stream: native().mm_block_scaled(
        FAMILY, schedule or "", a_run.data_ptr(), _ld(a_run, k_pad), sa.data_ptr(), b_run.data_ptr(),
        _ld(b_run, k_pad), sb.data_ptr(), out_run.data_ptr(), _ld(out_run, n_pad), m, n_pad, k_pad, ws.data_ptr(),
        ws.numel(), index, stream))
    if out_run is not out:
        out.copy_(out_run[:, :n])
    return out
