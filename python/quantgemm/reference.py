"""The pure-torch reference every kernel is checked against.

It computes what the kernels compute, in their order, in fp32: the dequantized weight rounded to
the activation dtype as the kernel's packed multiply rounds it, then an fp32 matmul. Only the fp32
summation order and the final rounding to the output dtype differ from the kernel.
"""

from __future__ import annotations

import torch

from .quantize import group_count


def _dequantize(w_q: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor | None, group_size: int) -> torch.Tensor:
    """(w_q - zero) * scales[k // group_size, n], zero = 8 or zeros[k // group_size, n]; the difference
    exact, the product rounded once to scales.dtype; fp32 [N, K]."""
    n, k = w_q.shape
    per_group = k // group_count(k, group_size)
    s = scales.float().repeat_interleave(per_group, dim=0).t()  # [N, K]
    z = 8.0 if zeros is None else zeros.float().repeat_interleave(per_group, dim=0).t()
    return ((w_q.float() - z) * s).to(scales.dtype).float()


def dequantize_u4b8(w_q: torch.Tensor, scales: torch.Tensor, group_size: int) -> torch.Tensor:
    """(w_q - 8) * scales[k // group_size, n], rounded once to scales.dtype, returned as fp32 [N, K]."""
    return _dequantize(w_q, scales, None, group_size)


def dequantize_u4(w_q: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor, group_size: int) -> torch.Tensor:
    """(w_q - zeros[k // group_size, n]) * scales[k // group_size, n], the difference exact, the
    product rounded once to scales.dtype, returned as fp32 [N, K]."""
    return _dequantize(w_q, scales, zeros, group_size)


def mm_4bit(a: torch.Tensor, w_q: torch.Tensor, scales: torch.Tensor, group_size: int,
            zeros: torch.Tensor | None = None) -> torch.Tensor:
    """fp32 [M, N] = a @ W^T for a u4b8 weight (zeros None) or a u4 weight (its zeros)."""
    zeros = None if zeros is None else zeros.to(a.device)
    w = _dequantize(w_q.to(a.device), scales.to(a.device), zeros, group_size)
    return a.float() @ w.t()


def mm_u4(a: torch.Tensor, w_q: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor, group_size: int) -> torch.Tensor:
    """fp32 [M, N] = a @ dequantize_u4(w_q, scales, zeros)^T."""
    return mm_4bit(a, w_q, scales, group_size, zeros)


def mm_u4b8(a: torch.Tensor, w_q: torch.Tensor, scales: torch.Tensor, group_size: int) -> torch.Tensor:
    """fp32 [M, N] = a @ dequantize_u4b8(w_q, scales)^T."""
    return mm_4bit(a, w_q, scales, group_size)
