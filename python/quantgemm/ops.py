"""quantgemm's operators registered with torch.library, so that torch.compile traces them as single
ops (no graph break) and CUDA graphs capture them.

    torch.ops.quantgemm.mm(a, b_data, n, k, weight_type, group_scales, group_size, group_zeros, schedule,
                           channel_scales, token_scales)
    torch.ops.quantgemm.prepack_b(w_q, weight_type)
    torch.ops.quantgemm.scaled_mm(a, b, scale_a, scale_b, bias, out_dtype, use_fast_accum, azp_adj, azp)

The prepacked weight travels as its data tensor plus (n, k, weight_type), since an op's arguments
are tensors and scalars. On a CUDA device the ops run the kernels; on the CPU, the pure-torch
reference (the same path QuantLinear takes there). The fake (meta) implementations run the eager
argument checks, so a bad call fails the same way while tracing.
"""

from __future__ import annotations

import torch

from . import mixed_input, reference, scaled
from .mixed_input import PrepackedWeight


@torch.library.custom_op("quantgemm::mm", mutates_args=())
def mm(a: torch.Tensor, b_data: torch.Tensor, n: int, k: int, weight_type: str, group_scales: torch.Tensor,
       group_size: int, group_zeros: torch.Tensor | None = None, schedule: str | None = None,
       channel_scales: torch.Tensor | None = None, token_scales: torch.Tensor | None = None) -> torch.Tensor:
    """quantgemm.mm as an operator: out [M, N] in a's dtype."""
    b = PrepackedWeight(b_data, n, k, weight_type)
    if a.is_cuda:
        return mixed_input.mm(a, b, group_scales, group_size, schedule=schedule, group_zeros=group_zeros,
                              channel_scales=channel_scales, token_scales=token_scales)
    mixed_input.check_mm_args(a, b, group_scales, group_size, None, schedule, group_zeros, channel_scales, token_scales)
    codes = mixed_input.unpack_b(b)
    return reference.mm_4bit(a, codes, group_scales, group_size, group_zeros, channel_scales,
                             token_scales).to(a.dtype)


@mm.register_fake
def _(a, b_data, n, k, weight_type, group_scales, group_size, group_zeros=None, schedule=None, channel_scales=None,
      token_scales=None):
    _, m, n = mixed_input.check_mm_args(a, PrepackedWeight(b_data, n, k, weight_type), group_scales, group_size,
                                        None, schedule, group_zeros, channel_scales, token_scales)
    return a.new_empty((m, n))


@torch.library.custom_op("quantgemm::prepack_b", mutates_args=())
def prepack_b(w_q: torch.Tensor, weight_type: str = "u4b8") -> torch.Tensor:
    """quantgemm.prepack_b as an operator: the prepacked data (N and K padded to whole blocks)."""
    return mixed_input.prepack_b(w_q, weight_type).data


@prepack_b.register_fake
def _(w_q, weight_type="u4b8"):
    n_pad, k_pad = mixed_input.check_prepack_args(w_q, weight_type)
    return w_q.new_empty((n_pad * k_pad // 2,))


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
