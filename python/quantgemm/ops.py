"""quantgemm's operators registered with torch.library, so that torch.compile traces them as single
ops (no graph break) and CUDA graphs capture them.

    torch.ops.quantgemm.mm(a, b_data, n, k, weight_type, group_scales, group_size, group_zeros, schedule,
                           channel_scales, token_scales, layout)
    torch.ops.quantgemm.prepack_b(w_q, weight_type, layout)
    torch.ops.quantgemm.scaled_mm(a, b, scale_a, scale_b, bias, out_dtype, use_fast_accum, azp_adj, azp)
    torch.ops.quantgemm.block_scaled_mm(a, a_scales, b, b_scales)
    torch.ops.quantgemm.quantize_fp8(x, per_row) / quantize_int8(x, per_row)      -> (q, scale)
    torch.ops.quantgemm.quantize_fp8_groups(x, group_size) / quantize_fp8_blocks(w, block_size)

The prepacked weight travels as its data tensor plus (n, k, weight_type, layout), since an op's arguments
are tensors and scalars. On a CUDA device the ops run the kernels; on the CPU, the pure-torch
reference (the same path QuantLinear takes there). The fake (meta) implementations run the eager
argument checks, so a bad call fails the same way while tracing.
"""

from __future__ import annotations

import torch

from . import _checks, block_scaled, mixed_input, quantize, reference, scaled
from .mixed_input import PrepackedWeight


@torch.library.custom_op("quantgemm::mm", mutates_args=())
def mm(a: torch.Tensor, b_data: torch.Tensor, n: int, k: int, weight_type: str, group_scales: torch.Tensor,
       group_size: int, group_zeros: torch.Tensor | None = None, schedule: str | None = None,
       channel_scales: torch.Tensor | None = None, token_scales: torch.Tensor | None = None,
       layout: str = "sm90") -> torch.Tensor:
    """quantgemm.mm as an operator: out [M, N] in a's dtype (group_scales' dtype for W4A8)."""
    b = PrepackedWeight(b_data, n, k, weight_type, layout=layout)
    if a.is_cuda:
        return mixed_input.mm(a, b, group_scales, group_size, schedule=schedule, group_zeros=group_zeros,
                              channel_scales=channel_scales, token_scales=token_scales)
    mixed_input.check_mm_args(a, b, group_scales, group_size, None, schedule, group_zeros, channel_scales, token_scales)
    codes = mixed_input.unpack_b(b)
    exact = mixed_input.exact_weight(a.shape[0], n, k, weight_type, _out_dtype(a, group_scales, layout), group_size,
                                     layout, schedule)
    return reference.mm_quantized(a, codes, group_scales, group_size, group_zeros, channel_scales, token_scales,
                                  zero_point=mixed_input.ZERO_POINTS[weight_type],
                                  exact_weight=exact).to(_out_dtype(a, group_scales, layout))


def _out_dtype(a: torch.Tensor, group_scales: torch.Tensor, layout: str) -> torch.dtype:
    return group_scales.dtype if layout == mixed_input.E4M3 else a.dtype


@mm.register_fake
def _(a, b_data, n, k, weight_type, group_scales, group_size, group_zeros=None, schedule=None, channel_scales=None,
      token_scales=None, layout="sm90"):
    _, m, n = mixed_input.check_mm_args(a, PrepackedWeight(b_data, n, k, weight_type, layout=layout), group_scales,
                                        group_size,
                                        None, schedule, group_zeros, channel_scales, token_scales)
    return a.new_empty((m, n), dtype=_out_dtype(a, group_scales, layout))


@torch.library.custom_op("quantgemm::prepack_b", mutates_args=())
def prepack_b(w_q: torch.Tensor, weight_type: str = "u4b8", layout: str = "sm90") -> torch.Tensor:
    """quantgemm.prepack_b as an operator: the prepacked data (N and K padded to whole blocks)."""
    return mixed_input.prepack_b(w_q, weight_type, layout=layout).data


@prepack_b.register_fake
def _(w_q, weight_type="u4b8", layout="sm90"):
    n_pad, k_pad = mixed_input.check_prepack_args(w_q, weight_type, layout=layout)
    bits = mixed_input.BITS[mixed_input.SIGNED_TYPES.get(weight_type, weight_type)]
    return w_q.new_empty((n_pad * k_pad * bits // 8,), dtype=torch.uint8)


@torch.library.custom_op("quantgemm::scaled_mm", mutates_args=())
def scaled_mm(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor,
              bias: torch.Tensor | None = None, out_dtype: torch.dtype = torch.bfloat16, use_fast_accum: bool = True,
              azp_adj: torch.Tensor | None = None, azp: torch.Tensor | None = None) -> torch.Tensor:
    """quantgemm.scaled_mm (and scaled_mm_azp) as an operator: out [M, N] in out_dtype."""
    if a.is_cuda:
        return scaled.scaled_mm(a, b, scale_a, scale_b, bias, out_dtype, use_fast_accum=use_fast_accum,
                                azp_adj=azp_adj, azp=azp)
    scaled.check_scaled_mm_args(a, b, scale_a, scale_b, bias, out_dtype, None, azp_adj, azp, None, use_fast_accum)
    return reference.scaled_mm(a, b, scale_a, scale_b, bias, azp_adj, azp).to(out_dtype)


@scaled_mm.register_fake
def _(a, b, scale_a, scale_b, bias=None, out_dtype=torch.bfloat16, use_fast_accum=True, azp_adj=None, azp=None):
    scaled.check_scaled_mm_args(a, b, scale_a, scale_b, bias, out_dtype, None, azp_adj, azp, None, use_fast_accum)
    return a.new_empty((a.shape[0], b.shape[0]), dtype=out_dtype)


@torch.library.custom_op("quantgemm::block_scaled_mm", mutates_args=())
def block_scaled_mm(a: torch.Tensor, a_scales: torch.Tensor, b: torch.Tensor, b_scales: torch.Tensor) -> torch.Tensor:
    """quantgemm.block_scaled_mm as an operator: out [M, N] bf16."""
    if a.is_cuda:
        return block_scaled.block_scaled_mm(a, a_scales, b, b_scales)
    block_scaled.check_block_scaled_mm_args(a, a_scales, b, b_scales)
    return reference.block_scaled_mm(a, a_scales, b, b_scales).to(torch.bfloat16)


@block_scaled_mm.register_fake
def _(a, a_scales, b, b_scales):
    block_scaled.check_block_scaled_mm_args(a, a_scales, b, b_scales)
    return a.new_empty((a.shape[0], b.shape[0]), dtype=torch.bfloat16)


def _fake_quantized(x: torch.Tensor, dtype: torch.dtype, scale_shape: tuple[int, ...]):
    """A quantizer's fake: the eager input checks, then (codes like x in `dtype`, fp32 scales)."""
    _checks.tensor("x", x, ndim=2)
    if not x.is_floating_point():
        raise TypeError(f"x must be a floating-point tensor, got {x.dtype}")
    return x.new_empty(x.shape, dtype=dtype), x.new_empty(scale_shape, dtype=torch.float32)


@torch.library.custom_op("quantgemm::quantize_fp8", mutates_args=())
def quantize_fp8(x: torch.Tensor, per_row: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """quantgemm.quantize_fp8 as an operator: (q e4m3 [rows, K], fp32 scale [rows, 1] or [1])."""
    return quantize.quantize_fp8(x, per_row)


@quantize_fp8.register_fake
def _(x, per_row=True):
    return _fake_quantized(x, torch.float8_e4m3fn, (x.shape[0], 1) if per_row else (1,))


@torch.library.custom_op("quantgemm::quantize_int8", mutates_args=())
def quantize_int8(x: torch.Tensor, per_row: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """quantgemm.quantize_int8 (symmetric) as an operator: (q int8 [rows, K], fp32 scale [rows, 1] or [1])."""
    return quantize.quantize_int8(x, per_row)


@quantize_int8.register_fake
def _(x, per_row=True):
    return _fake_quantized(x, torch.int8, (x.shape[0], 1) if per_row else (1,))


@torch.library.custom_op("quantgemm::quantize_fp8_groups", mutates_args=())
def quantize_fp8_groups(x: torch.Tensor, group_size: int = 128) -> tuple[torch.Tensor, torch.Tensor]:
    """quantgemm.quantize_fp8_groups as an operator: (q e4m3 [M, K], fp32 scales [M, ceil(K / group_size)])."""
    return quantize.quantize_fp8_groups(x, group_size)


@quantize_fp8_groups.register_fake
def _(x, group_size=128):
    return _fake_quantized(x, torch.float8_e4m3fn, (x.shape[0], -(-x.shape[1] // group_size)))


@torch.library.custom_op("quantgemm::quantize_fp8_blocks", mutates_args=())
def quantize_fp8_blocks(w: torch.Tensor, block_size: int = 128) -> tuple[torch.Tensor, torch.Tensor]:
    """quantgemm.quantize_fp8_blocks as an operator: (q e4m3 [N, K], fp32 scales [ceil(N / b), ceil(K / b)])."""
    return quantize.quantize_fp8_blocks(w, block_size)


@quantize_fp8_blocks.register_fake
def _(w, block_size=128):
    return _fake_quantized(w, torch.float8_e4m3fn, (-(-w.shape[0] // block_size), -(-w.shape[1] // block_size)))
