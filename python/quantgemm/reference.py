"""The pure-torch reference every kernel is checked against.

It computes what the kernels compute, in their order, in fp32: the dequantized weight rounded to
the activation dtype as the kernel's packed multiply rounds it, then an fp32 matmul. Only the fp32
summation order and the final rounding to the output dtype differ from the kernel.
"""

from __future__ import annotations

import torch

from .quantize import group_count


def dequantize_u4b8(w_q: torch.Tensor, scales: torch.Tensor, group_size: int) -> torch.Tensor:
    """(w_q - 8) * scales[k // group_size, n], rounded once to scales.dtype, returned as fp32 [N, K]."""
    n, k = w_q.shape
    groups = group_count(k, group_size)
    s = scales.float().repeat_interleave(k // groups, dim=0).t()  # [N, K]
    return ((w_q.float() - 8.0) * s).to(scales.dtype).float()


def dequantize_u4(w_q: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor, group_size: int) -> torch.Tensor:
    """(w_q - zeros[k // group_size, n]) * scales[k // group_size, n], the difference exact, the
    product rounded once to scales.dtype, returned as fp32 [N, K]."""
    n, k = w_q.shape
    groups = group_count(k, group_size)
    s = scales.float().repeat_interleave(k // groups, dim=0).t()  # [N, K]
    z = zeros.float().repeat_interleave(k // groups, dim=0).t()
    return ((w_q.float() - z) * s).to(scales.dtype).float()


def mm_u4(a: torch.Tensor, w_q: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor, group_size: int) -> torch.Tensor:
    """fp32 [M, N] = a @ dequantize_u4(w_q, scales, zeros)^T."""
    w = dequantize_u4(w_q.to(a.device), scales.to(a.device), zeros.to(a.device), group_size)
    return a.float() @ w.t()


def mm_u4b8(a: torch.Tensor, w_q: torch.Tensor, scales: torch.Tensor, group_size: int) -> torch.Tensor:
    """fp32 [M, N] = a @ dequantize_u4b8(w_q, scales)^T."""
    w = dequantize_u4b8(w_q.to(a.device), scales.to(a.device), group_size)
    return a.float() @ w.t()
