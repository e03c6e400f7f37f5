"""The pure-torch reference every kernel is checked against.

It computes what the kernels compute, in their order, in fp32: the dequantized weight rounded to
the activation dtype as the kernel's packed multiply rounds it (the sm90 kernels), or left in fp32
where the kernel scales fp32 partial sums instead (the sm80 kernels: exact_weight), then an fp32
matmul. Only the fp32 summation order and the final rounding to the output dtype differ from the
kernel.
"""

from __future__ import annotations

import torch

from .quantize import group_count


def _dequantize(w_q: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor | None, group_size: int,
                zero_point: int | None = 8, exact_weight: bool = False) -> torch.Tensor:
    """(w_q - zero) * scales[k // group_size, n], zero = zeros[k // group_size, n] if given, else
    zero_point (mixed_input.ZERO_POINTS of the weight type: None exactly for the types with zeros); the
    difference exact, the product rounded once to scales.dtype (unless exact_weight); fp32 [N, K]."""
    n, k = w_q.shape
    per_group = k // group_count(k, group_size)
    s = scales.float().repeat_interleave(per_group, dim=0).t()  # [N, K]
    z = float(zero_point) if zeros is None else zeros.float().repeat_interleave(per_group, dim=0).t()
    w = (w_q.float() - z) * s
    return w if exact_weight else w.to(scales.dtype).float()


def dequantize_u4b8(w_q: torch.Tensor, scales: torch.Tensor, group_size: int) -> torch.Tensor:
    """(w_q - 8) * scales[k // group_size, n], rounded once to scales.dtype, returned as fp32 [N, K]."""
    return _dequantize(w_q, scales, None, group_size)


def dequantize_u4(w_q: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor, group_size: int) -> torch.Tensor:
    """(w_q - zeros[k // group_size, n]) * scales[k // group_size, n], the difference exact, the
    product rounded once to scales.dtype, returned as fp32 [N, K]."""
    return _dequantize(w_q, scales, zeros, group_size)


def mm_quantized(a: torch.Tensor, w_q: torch.Tensor, scales: torch.Tensor, group_size: int,
            zeros: torch.Tensor | None = None, channel_scales: torch.Tensor | None = None,
            token_scales: torch.Tensor | None = None, zero_point: int | None = 8,
            exact_weight: bool = False) -> torch.Tensor:
    """fp32 [M, N] = a @ W^T for a weight with a fixed zero point (zeros None: u4b8, zero_point 8;
    u8b128, zero_point 128) or zero points per group (u4, u8: their zeros), times the optional fp32
    channel_scales[n] * token_scales[m] (in that order, as the kernel's epilogue). exact_weight: W
    in fp32, not rounded to the scales' dtype (what the sm80 kernels compute)."""
    zeros = None if zeros is None else zeros.to(a.device)
    w = _dequantize(w_q.to(a.device), scales.to(a.device), zeros, group_size, zero_point, exact_weight)
    out = a.float() @ w.t()
    if channel_scales is None and token_scales is None:
        return out
    cs = 1.0 if channel_scales is None else channel_scales.float().to(a.device).reshape(1, -1)
    ts = 1.0 if token_scales is None else token_scales.float().to(a.device).reshape(-1, 1)
    return out * (cs * ts)


def mm_u4(a: torch.Tensor, w_q: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor, group_size: int) -> torch.Tensor:
    """fp32 [M, N] = a @ dequantize_u4(w_q, scales, zeros)^T."""
    return mm_quantized(a, w_q, scales, group_size, zeros)


def mm_u4b8(a: torch.Tensor, w_q: torch.Tensor, scales: torch.Tensor, group_size: int) -> torch.Tensor:
    """fp32 [M, N] = a @ dequantize_u4b8(w_q, scales)^T."""
    return mm_quantized(a, w_q, scales, group_size)


def scaled_mm(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor,
              bias: torch.Tensor | None = None, azp_adj: torch.Tensor | None = None,
              azp: torch.Tensor | None = None) -> torch.Tensor:
    """fp32 [M, N] = sa * (sb * (a @ b^T - azp[m] * azp_adj[n])) + bias[n], the W8A8 kernels' math:
    the integer product and its correction exact (float64) for int8, an fp32 matmul of the exactly
    converted e4m3 values for FP8; then the scales and bias in fp32, in the kernels' order."""
    if a.dtype == torch.int8:
        acc = a.double() @ b.double().t()
        if azp_adj is not None:
            zp = 1.0 if azp is None else azp.double().reshape(-1, 1)
            acc = acc - zp * azp_adj.double().reshape(1, -1)
        acc = acc.float()
    else:
        acc = a.float() @ b.float().t()
    out = scale_a.float().reshape(-1, 1) * (scale_b.float().reshape(1, -1) * acc)
    return out if bias is None else out + bias.float().reshape(1, -1)


def dequantize_blocks(q: torch.Tensor, scales: torch.Tensor, block_rows: int, block_cols: int) -> torch.Tensor:
    """fp32 [R, C] = q * scales[r // block_rows, c // block_cols], each product rounded once to fp32."""
    rows, cols = q.shape
    s = scales.float().repeat_interleave(block_rows, dim=0)[:rows].repeat_interleave(block_cols, dim=1)[:, :cols]
    return q.float() * s


def block_scaled_mm(a: torch.Tensor, a_scales: torch.Tensor, b: torch.Tensor, b_scales: torch.Tensor,
                    block: int = 128) -> torch.Tensor:
    """fp32 [M, N] = (a * a_scales per token per `block` of K) @ (b * b_scales per block x block)^T,
    the block-scaled FP8 GEMM's math in fp32 (the kernel scales each 128-wide partial sum instead)."""
    return dequantize_blocks(a, a_scales, 1, block) @ dequantize_blocks(b, b_scales.to(a.device), block, block).t()
