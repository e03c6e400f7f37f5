"""Round-to-nearest weight quantizers: real weights in, codes and group scales out."""

from __future__ import annotations

import torch

from . import _checks


def group_count(k: int, group_size: int) -> int:
    """Number of scale rows for K and a group size (-1: one group spanning K)."""
    g = k if group_size == -1 else group_size
    if g <= 0 or k % g != 0:
        raise ValueError(f"group_size must be -1 or a positive divisor of K={k}, got {group_size}")
    return k // g


def _grouped(w: torch.Tensor, group_size: int, scale_dtype: torch.dtype | None):
    """w [N, K] checked and viewed as fp32 [N, groups, K / groups]; the scale dtype (default: w's
    dtype if 16-bit, else bfloat16)."""
    _checks.tensor("w", w, ndim=2)
    if not w.is_floating_point():
        raise TypeError(f"w must be a floating-point tensor, got {w.dtype}")
    n, k = w.shape
    groups = group_count(k, group_size)
    if scale_dtype is None:
        scale_dtype = w.dtype if w.dtype in (torch.bfloat16, torch.float16) else torch.bfloat16
    return w.float().reshape(n, groups, k // groups), scale_dtype


def _symmetric(w: torch.Tensor, group_size: int, scale_dtype: torch.dtype | None, bits: int):
    """Symmetric round to nearest with zero point 2^(bits - 1): (codes [N, K] uint8, scales [groups, N])."""
    wf, scale_dtype = _grouped(w, group_size, scale_dtype)
    n, k = w.shape
    zero = 1 << (bits - 1)
    half_range = zero - 0.5  # 7.5 for 4 bits, 127.5 for 8
    amax = wf.abs().amax(dim=-1)
    scales = torch.where(amax > 0, amax / half_range, torch.ones_like(amax)).to(scale_dtype)
    # a scale rounded below amax / half_range would clip the group's largest value: take the next one up
    low = scales.float() * half_range < amax
    scales[low] = (scales[low].view(torch.int16) + 1).view(scale_dtype)
    q = torch.round(wf / scales.float().unsqueeze(-1)) + zero
    w_q = q.clamp_(0, 2 * zero - 1).to(torch.uint8).reshape(n, k)
    return w_q, scales.t().contiguous()


def _asymmetric(w: torch.Tensor, group_size: int, scale_dtype: torch.dtype | None, bits: int):
    """Asymmetric round to nearest, a zero point per group and column: (codes, scales, zeros)."""
    wf, scale_dtype = _grouped(w, group_size, scale_dtype)
    n, k = w.shape
    top = (1 << bits) - 1
    lo = wf.amin(dim=-1).clamp(max=0)
    hi = wf.amax(dim=-1).clamp(min=0)
    scales = torch.where(hi > lo, (hi - lo) / top, torch.ones_like(hi)).to(scale_dtype)
    zeros = torch.round(-lo / scales.float()).clamp_(0, top)
    q = torch.round(wf / scales.float().unsqueeze(-1)) + zeros.unsqueeze(-1)
    w_q = q.clamp_(0, top).to(torch.uint8).reshape(n, k)
    return w_q, scales.t().contiguous(), zeros.to(scale_dtype).t().contiguous()


def quantize_u4b8(w: torch.Tensor, group_size: int = 128, scale_dtype: torch.dtype | None = None):
    """Symmetric round-to-nearest 4-bit quantization, GPTQ's convention (zero point 8).

    w: [N, K] floating weight. Returns (w_q, scales): w_q [N, K] uint8 codes in 0..15 and scales
    [K / group_size, N] in `scale_dtype` (default: w's dtype if 16-bit, else bfloat16), such that
    w ~ (w_q - 8) * scales[k // group_size, n]. Each scale is amax / 7.5 of its group, rounded to
    scale_dtype (upwards where rounding down would clip) before the codes are chosen, so the codes
    are the nearest under the stored scale: every error is at most half a scale step.
    """
    return _symmetric(w, group_size, scale_dtype, 4)


def quantize_u4(w: torch.Tensor, group_size: int = 128, scale_dtype: torch.dtype | None = None):
    """Asymmetric round-to-nearest 4-bit quantization with a zero point per group and column (the
    AWQ / GPTQ-without-sym convention).

    w: [N, K] floating weight. Returns (w_q, scales, zeros): w_q [N, K] uint8 codes in 0..15,
    scales and zeros [K / group_size, N] in `scale_dtype` (default: w's dtype if 16-bit, else
    bfloat16), the zeros integers 0..15, such that w ~ (w_q - zeros) * scales. Each scale is
    (max - min) / 15 of its group, rounded to scale_dtype; the zero point is round(-min / scale).
    """
    return _asymmetric(w, group_size, scale_dtype, 4)


def quantize_u8b128(w: torch.Tensor, group_size: int = 128, scale_dtype: torch.dtype | None = None):
    """Symmetric round-to-nearest 8-bit quantization, GPTQ's 8-bit convention (zero point 128): as
    quantize_u4b8 with codes 0..255, w ~ (w_q - 128) * scales, each scale amax / 127.5."""
    return _symmetric(w, group_size, scale_dtype, 8)


def quantize_u8(w: torch.Tensor, group_size: int = 128, scale_dtype: torch.dtype | None = None):
    """Asymmetric round-to-nearest 8-bit quantization with a zero point per group and column: as
    quantize_u4 with codes and zero points 0..255, each scale (max - min) / 255."""
    return _asymmetric(w, group_size, scale_dtype, 8)


FP8_MAX = 448.0  # the largest finite float8_e4m3fn
_TINY = 1e-12    # keeps an all-zero row's scale finite


def quantize_fp8(x: torch.Tensor, per_row: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """Dynamic FP8 e4m3 quantization, on x's device: per token (or per output channel, for a
    weight) when per_row, else per tensor.

    x: [rows, K] floating. Returns (q, scale): q [rows, K] torch.float8_e4m3fn and fp32 scale
    ([rows, 1], or [1]) with x ~ q * scale; scale = amax / 448, so the largest value maps to 448.
    A bf16 or fp16 x on a GPU, per row, with unit stride along K and 16-byte rows (K and the row
    stride multiples of 8), takes one fused kernel; anything else the same arithmetic in torch ops
    (the same bits either way).
    """
    _checks.tensor("x", x, ndim=2)
    if not x.is_floating_point():
        raise TypeError(f"x must be a floating-point tensor, got {x.dtype}")
    rows, k = x.shape
    if (per_row and x.is_cuda and x.dtype in (torch.bfloat16, torch.float16) and k > 0 and k % 8 == 0
            and (x.stride(1) == 1 or k == 1) and (rows <= 1 or x.stride(0) % 8 == 0) and x.data_ptr() % 16 == 0):
        from ._native import native

        q = torch.empty(rows, k, dtype=torch.float8_e4m3fn, device=x.device)
        scale = torch.empty(rows, 1, dtype=torch.float32, device=x.device)
        index = x.get_device()
        native().quantize_fp8(x.data_ptr(), x.dtype == torch.float16, x.stride(0) if rows > 1 else k, rows, k,
                              q.data_ptr(), k, scale.data_ptr(), index, torch._C._cuda_getCurrentRawStream(index))
        return q, scale
    xf = x.float()
    amax = xf.abs().amax(dim=1, keepdim=True) if per_row else xf.abs().amax().reshape(1)
    scale = amax.clamp(min=_TINY) / FP8_MAX
    q = (xf / (scale if per_row else scale[0])).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    return q, scale


def quantize_int8(x: torch.Tensor, per_row: bool = True, symmetric: bool = True):
    """Dynamic INT8 quantization, on x's device: per token (or per output channel) when per_row,
    else per tensor; round to nearest even.

    symmetric: returns (q, scale) with x ~ q * scale, scale = amax / 127.
    asymmetric: returns (q, scale, azp) with x ~ (q - azp) * scale, scale = (max - min) / 255 and
    the int32 zero point azp = round(-128 - min / scale) ([rows] or [1]), for scaled_mm_azp.
    """
    _checks.tensor("x", x, ndim=2)
    if not x.is_floating_point():
        raise TypeError(f"x must be a floating-point tensor, got {x.dtype}")
    xf = x.float()

    def reduce(fn):
        return fn(xf, dim=1, keepdim=True) if per_row else fn(xf).reshape(1)

    if symmetric:
        scale = reduce(lambda t, **kw: t.abs().amax(**kw)).clamp(min=_TINY) / 127.0
        q = torch.round(xf / (scale if per_row else scale[0])).clamp(-128, 127).to(torch.int8)
        return q, scale
    lo = reduce(lambda t, **kw: t.amin(**kw)).clamp(max=0.0)
    hi = reduce(lambda t, **kw: t.amax(**kw)).clamp(min=0.0)
    scale = ((hi - lo) / 255.0).clamp(min=_TINY)
    azp = torch.round(-128.0 - lo / scale)
    q = (torch.round(xf / (scale if per_row else scale[0])) + (azp if per_row else azp[0])).clamp(-128, 127)
    return q.to(torch.int8), scale, azp.reshape(-1).to(torch.int32)


def _fp8_blocks(x: torch.Tensor, block_rows: int, block_cols: int) -> tuple[torch.Tensor, torch.Tensor]:
    """x [R, C] quantized to e4m3 with one fp32 scale (amax / 448) per block_rows x block_cols block
    (the last blocks cover what is left): (q [R, C], scales [ceil(R / block_rows), ceil(C / block_cols)])."""
    _checks.tensor("x", x, ndim=2)
    if not x.is_floating_point():
        raise TypeError(f"x must be a floating-point tensor, got {x.dtype}")
    rows, cols = x.shape
    rb, cb = -(-rows // block_rows), -(-cols // block_cols)
    xf = torch.nn.functional.pad(x.float(), (0, cb * block_cols - cols, 0, rb * block_rows - rows))
    blocks = xf.reshape(rb, block_rows, cb, block_cols)
    scales = blocks.abs().amax(dim=(1, 3)).clamp(min=_TINY) / FP8_MAX  # [rb, cb]
    q = (blocks / scales[:, None, :, None]).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    return q.reshape(rb * block_rows, cb * block_cols)[:rows, :cols].contiguous(), scales


def quantize_fp8_groups(x: torch.Tensor, group_size: int = 128) -> tuple[torch.Tensor, torch.Tensor]:
    """Dynamic FP8 e4m3 quantization of an activation per token per `group_size` of K (DeepSeek-V3's
    1 x 128), on x's device.

    x: [M, K] floating. Returns (q, scales): q [M, K] torch.float8_e4m3fn and fp32 scales
    [M, ceil(K / group_size)], row-major (what block_scaled_mm reads), with
    x[m, k] ~ q[m, k] * scales[m, k // group_size]; each scale is its group's amax / 448.
    """
    return _fp8_blocks(x, 1, group_size)


def quantize_fp8_blocks(w: torch.Tensor, block_size: int = 128) -> tuple[torch.Tensor, torch.Tensor]:
    """Static FP8 e4m3 quantization of a weight per block_size x block_size block (DeepSeek-V3's
    128 x 128), on w's device.

    w: [N, K] floating. Returns (q, scales): q [N, K] torch.float8_e4m3fn and fp32 scales
    [ceil(N / block_size), ceil(K / block_size)], row-major (DeepSeek-V3's weight_scale_inv), with
    w[n, k] ~ q[n, k] * scales[n // block_size, k // block_size]; each scale is its block's amax / 448.
    """
    return _fp8_blocks(w, block_size, block_size)


#: round-to-nearest quantizer of each mixed-input weight type (those with zero points per group
#: return them too, as a third result)
QUANTIZERS = {"u4b8": quantize_u4b8, "u4": quantize_u4, "u8b128": quantize_u8b128, "u8": quantize_u8}
