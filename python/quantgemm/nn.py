"""quantgemm.nn: QuantLinear (4- or 8-bit prepacked weights, 16-bit activations; or W4A8: 4-bit
weights, activations quantized to e4m3 per token at run time), ScaledLinear (W8A8:
FP8 or INT8 weights with per-channel scales, activations quantized per token at run time) and
BlockScaledLinear (FP8 with 128 x 128 weight scales and 1 x 128 activation scales, DeepSeek-V3's)."""

from __future__ import annotations

import torch

from . import block_scaled, checkpoint, ops, scaled
from .models import unsupported_reason
from .mixed_input import (BITS, E4M3, WEIGHT_TYPES, ZERO_POINTS, PrepackedWeight, _padded, check_layout_takes,
                          default_layout, gather_columns, mm, prepack_b, unpack_b)
from .quantize import QUANTIZERS, group_count, quantize_fp8, quantize_fp8_blocks, quantize_fp8_groups, quantize_int8


class QuantLinear(torch.nn.Module):
    """y = x @ W^T + bias, W = (codes - zero) * scales[k / group_size, n]: zero = 8 for u4b8 weights
    (GPTQ's symmetric format), 128 for u8b128 (its 8-bit one), zeros[k / group_size, n] for u4 and
    u8 weights (AWQ, GPTQ without sym).

    The weight lives in buffers, so module.to(device) moves it: `qweight` (the prepacked codes),
    `scales` [K / group_size, N] in the activation dtype (bf16 or fp16), `zeros` (u4 and u8 only, the
    same shape, integer zero points in that dtype), and `bias` [N] or None. On a GPU the forward is
    quantgemm.mm; on the CPU it is the pure-torch reference. `layout` is the prepacked layout of
    `qweight` (quantgemm.prepack_b): "sm90" for Hopper, "sm80" for the mma.sync kernels (sm_80 and
    later); None picks the one for `device` (mixed_input.default_layout). "sm90_e4m3" (u4b8 weights,
    groups a multiple of 128 or one per channel) makes the layer W4A8: the forward quantizes each
    token of x to e4m3 (quantgemm.quantize_fp8, one fused kernel) and runs the FP8 tensor-core
    kernels, the output in `dtype`. Build it with from_linear() (round-to-nearest quantization),
    from_gptq() or from_awq().
    """

    def __init__(self, in_features: int, out_features: int, group_size: int = 128, bias: bool = False,
                 device=None, dtype: torch.dtype = torch.bfloat16, weight_type: str = "u4b8",
                 act_order: bool = False, layout: str | None = None):
        super().__init__()
        if dtype not in (torch.bfloat16, torch.float16):
            raise ValueError(f"dtype must be torch.bfloat16 or torch.float16 (the activations the kernels take), "
                             f"got {dtype}")
        if weight_type not in WEIGHT_TYPES:
            raise ValueError(f"weight_type must be one of {WEIGHT_TYPES}, got {weight_type!r}")
        check_layout_takes(weight_type, layout, WEIGHT_TYPES)
        self.in_features, self.out_features = in_features, out_features
        self.group_size, self.weight_type = group_size, weight_type
        self.layout = default_layout(device or "cpu") if layout is None else layout
        if self.layout == E4M3:  # (what the W4A8 kernels take, said now rather than at the first call)
            why = unsupported_reason(out_features, in_features, group_size, E4M3)
            if why:
                raise ValueError(why)
        groups = group_count(in_features, group_size)
        n_pad, k_pad = _padded(out_features, in_features, self.layout)
        self.register_buffer("qweight", torch.zeros(n_pad * k_pad * BITS[weight_type] // 8, dtype=torch.uint8,
                                                    device=device))
        self.register_buffer("scales", torch.ones(groups, out_features, dtype=dtype, device=device))
        self.register_buffer("zeros", torch.full((groups, out_features), 1 << (BITS[weight_type] - 1), dtype=dtype,
                                                 device=device) if ZERO_POINTS[weight_type] is None else None)
        self.register_buffer("bias", torch.zeros(out_features, dtype=dtype, device=device) if bias else None)
        # act-order (GPTQ desc_act): [K] int64, the input channel of each weight column
        self.register_buffer("perm", torch.arange(in_features, device=device) if act_order else None)

    @classmethod
    def from_linear(cls, linear: torch.nn.Linear, group_size: int = 128, weight_type: str = "u4b8",
                    layout: str | None = None) -> "QuantLinear":
        """Quantizes linear.weight (round to nearest, per-group scales; u4 and u8 add per-group zero
        points) on its device."""
        w = linear.weight.detach()
        dtype = w.dtype if w.dtype in (torch.bfloat16, torch.float16) else torch.bfloat16
        layer = cls(linear.in_features, linear.out_features, group_size, linear.bias is not None, w.device,
                    dtype, weight_type, layout=layout)
        bias = None if linear.bias is None else linear.bias.detach()
        w_q, scales, *zeros = QUANTIZERS[weight_type](w.to(dtype), group_size)
        layer._load(w_q, scales, bias, *zeros)
        return layer

    @classmethod
    def from_int4(cls, w: checkpoint.Int4Weights, bias: torch.Tensor | None = None,
                  dtype: torch.dtype = torch.bfloat16, layout: str | None = None) -> "QuantLinear":
        """A layer from converted checkpoint weights (u4b8 / u8b128 when every zero point is 8 / 128,
        else u4 / u8) for activations of `dtype`, prepacked in `layout` (None: the one for the
        codes' device)."""
        n, k = w.codes.shape
        layer = cls(k, n, w.group_size, bias is not None, w.codes.device, dtype, weight_type=w.weight_type,
                    act_order=w.perm is not None, layout=layout)
        layer._load(w.codes, w.scales, bias, w.zeros)
        if w.perm is not None:
            layer.perm.copy_(w.perm)
        return layer

    @classmethod
    def from_gptq(cls, qweight: torch.Tensor, qzeros: torch.Tensor, scales: torch.Tensor,
                  g_idx: torch.Tensor | None = None, bias: torch.Tensor | None = None,
                  dtype: torch.dtype = torch.bfloat16, bits: int = 4, layout: str | None = None) -> "QuantLinear":
        """A 4- or 8-bit GPTQ layer (docs/checkpoints.md), symmetric or not; with act-order (a g_idx
        that is not k / group_size) the layer keeps the input-channel order and gathers the
        activation's columns in it on every call."""
        return cls.from_int4(checkpoint.from_gptq(qweight, qzeros, scales, g_idx, bits=bits), bias, dtype, layout)

    @classmethod
    def from_awq(cls, qweight: torch.Tensor, qzeros: torch.Tensor, scales: torch.Tensor,
                 bias: torch.Tensor | None = None, dtype: torch.dtype = torch.bfloat16,
                 layout: str | None = None) -> "QuantLinear":
        """A 4-bit AWQ layer (GEMM layout, docs/checkpoints.md)."""
        return cls.from_int4(checkpoint.from_awq(qweight, qzeros, scales), bias, dtype, layout)

    def _load(self, w_q: torch.Tensor, scales: torch.Tensor, bias: torch.Tensor | None,
              zeros: torch.Tensor | None = None) -> None:
        self.qweight.copy_(prepack_b(w_q, self.weight_type, layout=self.layout).data)
        self.scales.copy_(scales.to(self.scales.dtype))
        if self.zeros is not None:
            self.zeros.copy_(zeros.to(self.zeros.dtype))
        if bias is not None:
            self.bias.copy_(bias.to(self.bias.dtype))

    def _prepacked(self) -> PrepackedWeight:
        return PrepackedWeight(self.qweight, self.out_features, self.in_features, self.weight_type, layout=self.layout)

    def weight_codes(self) -> torch.Tensor:
        """The [N, K] uint8 codes, unpacked on the CPU."""
        return unpack_b(self._prepacked())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[-1] != self.in_features:
            raise ValueError(f"x must have {self.in_features} features in its last dimension, got shape "
                             f"{tuple(x.shape)}")
        a = x if x.dim() == 2 else x.reshape(-1, self.in_features)
        eager = a.is_cuda and not torch.compiler.is_compiling()
        if self.perm is not None:
            a = gather_columns(a, self.perm) if eager else a.index_select(1, self.perm)
        elif not a.is_contiguous():
            a = a.contiguous()
        token_scales = None
        if self.layout == E4M3:  # W4A8: e4m3 activations with fp32 scales per token
            a, scale = quantize_fp8(a) if eager else ops.quantize_fp8(a)
            token_scales = scale.reshape(-1)
        if eager:
            # eager on a GPU: the kernel directly, without the operator's dispatch (15-30 us a call)
            y = mm(a, self._prepacked(), self.scales, self.group_size, group_zeros=self.zeros,
                   token_scales=token_scales)
        else:
            # one operator (quantgemm.ops): the reference on the CPU, and a single node to torch.compile
            y = ops.mm(a, self.qweight, self.out_features, self.in_features, self.weight_type, self.scales,
                       self.group_size, self.zeros, token_scales=token_scales, layout=self.layout)
        if self.bias is not None:
            y = y + self.bias
        return y if x.dim() == 2 else y.reshape(*x.shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, {self.weight_type}, "
                f"group_size={self.group_size}, bias={self.bias is not None}, layout={self.layout}")


class ScaledLinear(torch.nn.Module):
    """y = (sa * q(x)) @ (sb * W_q)^T + bias, W8A8: W_q [N, K] e4m3 or int8 with fp32 scales sb [N]
    per output channel, q(x) the activation quantized per token (symmetric, dynamic) on every call.

    Buffers: `weight` [N, K] (torch.float8_e4m3fn or torch.int8), `weight_scale` [N] fp32, `bias`
    [N] or None in the activation dtype. On a Hopper GPU the forward is quantgemm.scaled_mm (FP8's
    fast accumulation, see docs/math.md); elsewhere the pure-torch reference.
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = False, device=None,
                 dtype: torch.dtype = torch.bfloat16, weight_dtype: torch.dtype = torch.float8_e4m3fn):
        super().__init__()
        if dtype not in scaled.OUT_DTYPES:
            raise ValueError(f"dtype must be torch.bfloat16 or torch.float16, got {dtype}")
        if weight_dtype not in scaled.OPERANDS:
            raise ValueError(f"weight_dtype must be torch.float8_e4m3fn or torch.int8, got {weight_dtype}")
        self.in_features, self.out_features, self.dtype = in_features, out_features, dtype
        self.register_buffer("weight", torch.zeros(out_features, in_features, dtype=weight_dtype, device=device))
        self.register_buffer("weight_scale", torch.ones(out_features, dtype=torch.float32, device=device))
        self.register_buffer("bias", torch.zeros(out_features, dtype=dtype, device=device) if bias else None)

    @classmethod
    def from_linear(cls, linear: torch.nn.Linear, weight_dtype: torch.dtype = torch.float8_e4m3fn) -> "ScaledLinear":
        """Quantizes `linear`'s weight per output channel (symmetric, round to nearest)."""
        w = linear.weight.detach()
        dtype = w.dtype if w.dtype in scaled.OUT_DTYPES else torch.bfloat16
        layer = cls(linear.in_features, linear.out_features, linear.bias is not None, w.device, dtype, weight_dtype)
        q, s = quantize_fp8(w) if weight_dtype == torch.float8_e4m3fn else quantize_int8(w)
        layer.weight.copy_(q)
        layer.weight_scale.copy_(s.reshape(-1))
        if linear.bias is not None:
            layer.bias.copy_(linear.bias.detach().to(dtype))
        return layer

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[-1] != self.in_features:
            raise ValueError(f"x must have {self.in_features} features in its last dimension, got shape "
                             f"{tuple(x.shape)}")
        a, sa = scaled.quantize_activation(x.reshape(-1, self.in_features), self.weight.dtype)
        if a.is_cuda and not torch.compiler.is_compiling():
            y = scaled.scaled_mm(a, self.weight, sa, self.weight_scale, self.bias, self.dtype)
        else:
            y = ops.scaled_mm(a, self.weight, sa, self.weight_scale, self.bias, self.dtype)
        return y.reshape(*x.shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, {self.weight.dtype}, "
                f"bias={self.bias is not None}")


class BlockScaledLinear(torch.nn.Module):
    """y = block_scaled_mm(q(x), W_q) + bias: W_q [N, K] e4m3 with an fp32 scale per 128 x 128 block
    (`weight_scale_inv` [ceil(N / 128), ceil(K / 128)], DeepSeek-V3's checkpoint name and layout),
    the activation quantized per token per 128 of K on every call (quantize_fp8_groups). The GEMM
    outputs bf16; a module of another dtype casts the result.

    Build it with from_linear() (128 x 128 round-to-nearest quantization) or from_fp8_checkpoint()
    (a checkpoint's `weight` and `weight_scale_inv`). On a Hopper GPU the forward is
    quantgemm.block_scaled_mm; elsewhere the pure-torch reference.
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = False, device=None,
                 dtype: torch.dtype = torch.bfloat16):
        super().__init__()
        self.in_features, self.out_features, self.dtype = in_features, out_features, dtype
        blocks = (block_scaled.scale_blocks(out_features), block_scaled.scale_blocks(in_features))
        self.register_buffer("weight", torch.zeros(out_features, in_features, dtype=torch.float8_e4m3fn, device=device))
        self.register_buffer("weight_scale_inv", torch.ones(blocks, dtype=torch.float32, device=device))
        self.register_buffer("bias", torch.zeros(out_features, dtype=dtype, device=device) if bias else None)

    @classmethod
    def from_linear(cls, linear: torch.nn.Linear) -> "BlockScaledLinear":
        w = linear.weight.detach()
        layer = cls(linear.in_features, linear.out_features, linear.bias is not None, w.device,
                    w.dtype if w.is_floating_point() and w.element_size() == 2 else torch.bfloat16)
        q, s = quantize_fp8_blocks(w)
        layer.weight.copy_(q)
        layer.weight_scale_inv.copy_(s)
        if linear.bias is not None:
            layer.bias.copy_(linear.bias.detach().to(layer.dtype))
        return layer

    @classmethod
    def from_fp8_checkpoint(cls, weight: torch.Tensor, weight_scale_inv: torch.Tensor,
                            bias: torch.Tensor | None = None, dtype: torch.dtype = torch.bfloat16) -> "BlockScaledLinear":
        """A layer of a block-scaled FP8 checkpoint (DeepSeek-V3/R1, Qwen3-FP8): `weight` [N, K]
        torch.float8_e4m3fn and `weight_scale_inv` [ceil(N / 128), ceil(K / 128)] fp32, with
        W = weight * weight_scale_inv[n // 128, k // 128]."""
        if weight.dtype != torch.float8_e4m3fn or weight.dim() != 2:
            raise TypeError(f"weight must be a 2-D torch.float8_e4m3fn tensor, got {weight.dtype} of shape "
                            f"{tuple(weight.shape)}")
        n, k = weight.shape
        blocks = (block_scaled.scale_blocks(n), block_scaled.scale_blocks(k))
        if weight_scale_inv.shape != blocks:
            raise ValueError(f"weight_scale_inv must have shape {blocks} (one scale per 128 x 128 block of the "
                             f"{n} x {k} weight), got {tuple(weight_scale_inv.shape)}")
        layer = cls(k, n, bias is not None, weight.device, dtype)
        layer.weight.copy_(weight)
        layer.weight_scale_inv.copy_(weight_scale_inv.float())
        if bias is not None:
            layer.bias.copy_(bias.to(dtype))
        return layer

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[-1] != self.in_features:
            raise ValueError(f"x must have {self.in_features} features in its last dimension, got shape "
                             f"{tuple(x.shape)}")
        a, sa = quantize_fp8_groups(x.reshape(-1, self.in_features))
        if a.is_cuda and not torch.compiler.is_compiling():
            y = block_scaled.block_scaled_mm(a, sa, self.weight, self.weight_scale_inv)
        else:
            y = ops.block_scaled_mm(a, sa, self.weight, self.weight_scale_inv)
        y = y.to(self.dtype)
        if self.bias is not None:
            y = y + self.bias
        return y.reshape(*x.shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, fp8 128 x 128 blocks, "
                f"bias={self.bias is not None}")


#: quantize_model's schemes: what replaces each nn.Linear (a QuantLinear's weight type and layout,
#: None: the device's; a ScaledLinear's weight dtype; BlockScaledLinear)
SCHEMES = {
    "w4a16": ("u4b8", None),    # 4-bit symmetric weights (GPTQ's format), group scales, 16-bit activations
    "w4a16-zp": ("u4", None),   # 4-bit weights with a zero point per group (AWQ's format)
    "fp8": torch.float8_e4m3fn,  # W8A8 FP8: per-channel weight scales, per-token dynamic activations
    "int8": torch.int8,          # W8A8 INT8, the same scaling
    "fp8-block": BlockScaledLinear,  # FP8, 128 x 128 weight blocks, 1 x 128 dynamic activation groups
    "w8a16": ("u8b128", None),  # 8-bit symmetric weights (GPTQ's 8-bit format), group scales, 16-bit activations
    "w4a8": ("u4b8", E4M3),     # 4-bit symmetric weights, group scales, activations quantized to e4m3 per token
}


def quantize_model(model: torch.nn.Module, scheme: str = "w4a16", group_size: int = 128,
                   skip=lambda name, linear: False) -> int:
    """Replaces, in place, every nn.Linear of `model` that `skip(name, linear)` does not exclude by a
    QuantLinear (w4a16, w4a16-zp, w8a16: where N and K are multiples of 8 and group_size divides K;
    w4a8: K a multiple of 16 as well, groups a multiple of 128 or -1), a ScaledLinear (fp8, int8:
    every shape) or a BlockScaledLinear (fp8-block: every shape) quantized with `scheme` by round to
    nearest. Returns how many layers it replaced."""
    if scheme not in SCHEMES:
        raise ValueError(f"scheme must be one of {sorted(SCHEMES)}, got {scheme!r}")

    replaced = 0
    for parent in list(model.modules()):
        for child_name, child in list(parent.named_children()):
            if type(child) is not torch.nn.Linear or skip(child_name, child):
                continue
            if SCHEMES[scheme] is BlockScaledLinear:
                setattr(parent, child_name, BlockScaledLinear.from_linear(child))
                replaced += 1
                continue
            if isinstance(SCHEMES[scheme], torch.dtype):
                setattr(parent, child_name, ScaledLinear.from_linear(child, SCHEMES[scheme]))
                replaced += 1
                continue
            weight_type, layout = SCHEMES[scheme]
            if unsupported_reason(child.out_features, child.in_features, group_size, layout or "sm90"):
                continue
            setattr(parent, child_name, QuantLinear.from_linear(child, group_size, weight_type, layout))
            replaced += 1
    return replaced
