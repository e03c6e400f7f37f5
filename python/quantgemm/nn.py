"""quantgemm.nn.QuantLinear: a linear layer whose weight is stored as prepacked 4-bit codes."""

from __future__ import annotations

import torch

from . import checkpoint, reference
from .mixed_input import PrepackedWeight, mm, prepack_b, unpack_b
from .quantize import group_count, quantize_u4b8


class QuantLinear(torch.nn.Module):
    """y = x @ W^T + bias, W = (codes - 8) * scales[k / group_size, n] (u4b8, GPTQ's symmetric format).

    The weight lives in buffers, so module.to(device) moves it: `qweight` (the prepacked codes,
    N * K / 2 bytes), `scales` [K / group_size, N] in the activation dtype (bf16), and `bias` [N] or
    None. On a Hopper GPU the forward is quantgemm.mm; elsewhere it is the pure-torch reference.
    Build it with from_linear() (round-to-nearest quantization) or from_gptq().
    """

    def __init__(self, in_features: int, out_features: int, group_size: int = 128, bias: bool = False,
                 device=None, dtype: torch.dtype = torch.bfloat16):
        super().__init__()
        if dtype != torch.bfloat16:
            raise ValueError(f"dtype must be torch.bfloat16 (the activations the kernels take), got {dtype}")
        self.in_features, self.out_features = in_features, out_features
        self.group_size = group_size
        groups = group_count(in_features, group_size)
        self.register_buffer("qweight", torch.zeros(out_features * in_features // 2, dtype=torch.uint8, device=device))
        self.register_buffer("scales", torch.ones(groups, out_features, dtype=dtype, device=device))
        self.register_buffer("bias", torch.zeros(out_features, dtype=dtype, device=device) if bias else None)

    @classmethod
    def from_linear(cls, linear: torch.nn.Linear, group_size: int = 128) -> "QuantLinear":
        """Quantizes linear.weight to u4b8 (round to nearest, per-group scales) on its device."""
        w = linear.weight.detach()
        layer = cls(linear.in_features, linear.out_features, group_size, linear.bias is not None, w.device)
        w_q, scales = quantize_u4b8(w.to(torch.bfloat16), group_size)
        layer._load(w_q, scales, None if linear.bias is None else linear.bias.detach())
        return layer

    @classmethod
    def from_gptq(cls, qweight: torch.Tensor, qzeros: torch.Tensor, scales: torch.Tensor,
                  g_idx: torch.Tensor | None = None, bias: torch.Tensor | None = None) -> "QuantLinear":
        """A 4-bit GPTQ layer (docs/checkpoints.md). Symmetric checkpoints without act-order map onto
        the u4b8 kernels; zero points and act-order are refused until those kernels exist."""
        w = checkpoint.from_gptq(qweight, qzeros, scales, g_idx)
        if w.zeros is not None:
            raise NotImplementedError("this GPTQ layer has zero points other than 8 (sym=False): the "
                                      "kernels take symmetric (u4b8) checkpoints today")
        if w.perm is not None:
            raise NotImplementedError("this GPTQ layer uses act-order (desc_act): the kernels take "
                                      "checkpoints without act-order today")
        n, k = w.codes.shape
        layer = cls(k, n, w.group_size, bias is not None, w.codes.device)
        layer._load(w.codes, w.scales, bias)
        return layer

    def _load(self, w_q: torch.Tensor, scales: torch.Tensor, bias: torch.Tensor | None) -> None:
        self.qweight.copy_(prepack_b(w_q).data)
        self.scales.copy_(scales.to(self.scales.dtype))
        if bias is not None:
            self.bias.copy_(bias.to(self.bias.dtype))

    def weight_codes(self) -> torch.Tensor:
        """The [N, K] uint8 codes, unpacked on the CPU."""
        return unpack_b(PrepackedWeight(self.qweight, self.out_features, self.in_features, "u4b8"))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[-1] != self.in_features:
            raise ValueError(f"x must have {self.in_features} features in its last dimension, got shape "
                             f"{tuple(x.shape)}")
        a = x.reshape(-1, self.in_features)
        if x.is_cuda:
            b = PrepackedWeight(self.qweight, self.out_features, self.in_features, "u4b8")
            y = mm(a.contiguous(), b, self.scales, self.group_size)
        else:
            y = reference.mm_u4b8(a, self.weight_codes(), self.scales, self.group_size).to(x.dtype)
        if self.bias is not None:
            y = y + self.bias
        return y.reshape(*x.shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, u4b8, "
                f"group_size={self.group_size}, bias={self.bias is not None}")
