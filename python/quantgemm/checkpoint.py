"""Converters from the checkpoint formats in the wild (GPTQ 4- and 8-bit, AWQ) to quantgemm's codes.

Both formats store, for a linear layer with N outputs and K inputs, 4-bit codes packed eight to an
int32, per-group zero points packed the same way, and per-group scales [K / group, N]:

- GPTQ (AutoGPTQ / GPTQModel "v1"): qweight [K / 8, N], packed along K (code of input k + j in
  bits 4j of row k / 8); qzeros [K / group, N / 8], packed along N, each stored as zero - 1 (the
  format's historical convention: a symmetric checkpoint stores 7 for zero point 8); scales
  [K / group, N] fp16; g_idx [K], the group of each input channel, which with act-order (desc_act)
  is not k / group.
  GPTQ's 8-bit checkpoints pack four codes to an int32 the same way: qweight [K / 4, N], qzeros
  [K / group, N / 4] (a symmetric checkpoint stores 127 for zero point 128).
- AWQ (GEMM layout): qweight [K, N / 8] and qzeros [K / group, N / 8], both packed along N in the
  order [0, 2, 4, 6, 1, 3, 5, 7] (bits 4i of a word hold column 8c + order[i]); zero points stored
  as they are; scales [K / group, N] fp16.

A converter returns `Int4Weights`: codes [N, K] uint8 (0..15, or 0..255 for 8 bits), scales, zero
points [K / group, N] uint8 (None when every zero point is 8, or 128: the u4b8 and u8b128 cases), the
group size, the bits, and
for act-order checkpoints the input-channel order the codes follow. The weight is
w[n, k] = (codes[n, j] - zeros[j / group, n]) * scales[j / group, n] for the input channel
k = perm[j] (perm the identity when None).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from . import _checks
from .mixed_input import BITS, ZERO_POINTS

#: AWQ's nibble order: bits 4i of a packed word hold column 8c + AWQ_ORDER[i].
AWQ_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)


@dataclass
class Int4Weights:
    codes: torch.Tensor                # [N, K] uint8, 0..15, columns in `perm` order
    scales: torch.Tensor               # [K / group_size, N]
    zeros: torch.Tensor | None         # [K / group_size, N] uint8, None: every zero point is 8
    group_size: int
    perm: torch.Tensor | None = None   # [K] int64: column j of codes is input channel perm[j]
    bits: int = 4                      # 4 (u4b8, u4) or 8 (u8b128, u8)

    @property
    def weight_type(self) -> str:
        """The kernels' name of the format: u4b8 / u8b128 (fixed zero point), u4 / u8 (per group)."""
        per_group = self.zeros is not None
        return next(t for t, b in BITS.items() if b == self.bits and (ZERO_POINTS[t] is None) == per_group)

    def dequantize(self) -> torch.Tensor:
        """The fp32 weight [N, K] in the checkpoint's input-channel order (no rounding)."""
        n, k = self.codes.shape
        zeros = float(ZERO_POINTS[self.weight_type]) if self.zeros is None \
            else self.zeros.float().repeat_interleave(self.group_size, dim=0).t()
        s = self.scales.float().repeat_interleave(self.group_size, dim=0).t()
        w = (self.codes.float() - zeros) * s
        if self.perm is None:
            return w
        out = torch.empty_like(w)
        out[:, self.perm] = w
        return out


def unpack_int32(packed: torch.Tensor, dim: int, order: tuple[int, ...] | None = None, bits: int = 4) -> torch.Tensor:
    """The `bits`-bit fields of int32 `packed`, 32 / bits per word, spread along `dim` (that many
    times longer), uint8. Bits bits * i of each word hold position order[i] of its group."""
    per_word = 32 // bits
    order = tuple(range(per_word)) if order is None else order
    words = packed.to(torch.int64) & 0xFFFFFFFF
    shifts = torch.tensor([bits * order.index(j) for j in range(per_word)], dtype=torch.int64, device=packed.device)
    fields = (words.unsqueeze(-1) >> shifts) & ((1 << bits) - 1)  # [..., per_word] in position order
    fields = fields.movedim(-1, dim + 1 if dim >= 0 else dim)
    shape = list(packed.shape)
    shape[dim] *= per_word
    return fields.reshape(shape).to(torch.uint8)


def _int32_tensor(name: str, t: torch.Tensor, shape: tuple[int, int]) -> None:
    _checks.tensor(name, t, dtype=torch.int32, ndim=2)
    _checks.shape(name, t, shape)


def _groups_from_g_idx(g_idx: torch.Tensor, k: int, groups: int) -> tuple[int, torch.Tensor | None]:
    """(group size, input-channel order or None) for a GPTQ g_idx."""
    _checks.tensor("g_idx", g_idx, ndim=1)
    if g_idx.numel() != k:
        raise ValueError(f"g_idx must have K = {k} entries, got {g_idx.numel()}")
    g_idx = g_idx.to(torch.int64)
    counts = torch.bincount(g_idx, minlength=groups)
    if counts.numel() != groups or (counts != k // groups).any():
        raise ValueError(f"g_idx must give each of the {groups} groups the same number of input channels "
                         f"({k // groups}), got counts {counts.tolist()[:8]}...")
    group_size = k // groups
    if torch.equal(g_idx, torch.arange(k, device=g_idx.device) // group_size):
        return group_size, None
    return group_size, torch.argsort(g_idx, stable=True)


def from_gptq(qweight: torch.Tensor, qzeros: torch.Tensor, scales: torch.Tensor,
              g_idx: torch.Tensor | None = None, group_size: int | None = None, bits: int = 4) -> Int4Weights:
    """A 4- or 8-bit GPTQ layer (qweight [K * bits / 32, N], qzeros [K/g, N * bits / 32] stored minus
    one, scales [K/g, N], optional g_idx [K]) as codes, scales, zero points and, for act-order, the
    input order."""
    if bits not in (4, 8):
        raise ValueError(f"bits must be 4 or 8, got {bits!r}")
    per_word = 32 // bits
    _checks.tensor("scales", scales, ndim=2)
    groups, n = scales.shape
    k = qweight.shape[0] * per_word if qweight.dim() == 2 else -1
    _int32_tensor("qweight", qweight, (k // per_word, n))
    _int32_tensor("qzeros", qzeros, (groups, (n + per_word - 1) // per_word))
    if k % groups:
        raise ValueError(f"K = {k} (from qweight) is not a multiple of the {groups} scale rows")
    if g_idx is not None:
        size, perm = _groups_from_g_idx(g_idx.cpu(), k, groups)
    else:
        size, perm = k // groups, None
    if group_size is not None and group_size not in (size, -1):
        raise ValueError(f"group_size {group_size} does not match the checkpoint's {size} (K / scale rows)")
    codes = unpack_int32(qweight, dim=0, bits=bits).t()                   # [N, K] in checkpoint order
    mask = (1 << bits) - 1
    zeros = ((unpack_int32(qzeros, dim=1, bits=bits)[:, :n].to(torch.int16) + 1) & mask).to(torch.uint8)  # stored - 1
    if perm is not None:
        codes = codes[:, perm.to(codes.device)]
    fixed = bool((zeros == 1 << (bits - 1)).all())  # GPTQ's symmetric zero point, 8 or 128
    return Int4Weights(codes.contiguous(), scales, None if fixed else zeros.contiguous(), size, perm, bits)


def from_awq(qweight: torch.Tensor, qzeros: torch.Tensor, scales: torch.Tensor, group_size: int | None = None
             ) -> Int4Weights:
    """A 4-bit AWQ layer (GEMM layout: qweight [K, N/8], qzeros [K/g, N/8], scales [K/g, N], both
    packed along N in AWQ's order) as codes, scales and zero points."""
    _checks.tensor("scales", scales, ndim=2)
    groups, n = scales.shape
    k = qweight.shape[0] if qweight.dim() == 2 else -1
    _int32_tensor("qweight", qweight, (k, n // 8))
    _int32_tensor("qzeros", qzeros, (groups, n // 8))
    if n % 8:
        raise ValueError(f"N = {n} (from scales) is not a multiple of 8, as AWQ packs it")
    if k % groups:
        raise ValueError(f"K = {k} (from qweight) is not a multiple of the {groups} scale rows")
    size = k // groups
    if group_size is not None and group_size not in (size, -1):
        raise ValueError(f"group_size {group_size} does not match the checkpoint's {size} (K / scale rows)")
    codes = unpack_int32(qweight, dim=1, order=AWQ_ORDER).t().contiguous()  # [N, K]
    zeros = unpack_int32(qzeros, dim=1, order=AWQ_ORDER)                   # [K/g, N]
    return Int4Weights(codes, scales, None if bool((zeros == 8).all()) else zeros.contiguous(), size)


def shard(w: Int4Weights, tp: int, rank: int, split: str) -> Int4Weights:
    """The part of a layer that tensor-parallel rank `rank` of `tp` holds: split "n" for a
    column-parallel layer (qkv, gate/up: output features), "k" for a row-parallel one (o, down:
    input features, in the checkpoint's order). A K split must fall on group boundaries: a group
    that straddles two ranks would leave a rank starting mid-group, which no kernel layout takes,
    so it is an error here, before anything is prepacked. Per-channel scales (one group) split
    freely."""
    n, k = w.codes.shape
    if not isinstance(tp, int) or tp < 1 or not isinstance(rank, int) or not 0 <= rank < tp:
        raise ValueError(f"rank must be in [0, tp) for tp >= 1, got tp={tp!r}, rank={rank!r}")
    if split == "n":
        if n % tp or (n // tp) % 8:
            raise ValueError(f"N = {n} does not split {tp} ways into multiples of 8 rows")
        rows = slice(rank * n // tp, (rank + 1) * n // tp)
        return Int4Weights(w.codes[rows].contiguous(), w.scales[:, rows].contiguous(),
                           None if w.zeros is None else w.zeros[:, rows].contiguous(), w.group_size, w.perm, w.bits)
    if split != "k":
        raise ValueError(f"split must be 'n' (column-parallel) or 'k' (row-parallel), got {split!r}")
    if k % tp:
        raise ValueError(f"K = {k} does not split {tp} ways")
    part, groups = k // tp, w.scales.shape[0]
    if groups == 1:  # per-channel: every rank keeps the scale row, its group is its K
        cols = torch.arange(rank * part, (rank + 1) * part, device=w.codes.device)
        return Int4Weights(w.codes[:, cols].contiguous(), w.scales, w.zeros, part, None, w.bits)
    perm = torch.arange(k, device=w.codes.device) if w.perm is None else w.perm.to(w.codes.device)
    owner = perm // part  # the rank that holds each column's input channel
    per_group = owner.reshape(groups, w.group_size)
    straddling = (per_group != per_group[:, :1]).any(dim=1).nonzero().flatten().tolist()
    if straddling:
        raise ValueError(f"group {straddling[0]} of {w.group_size} input channels straddles a tensor-parallel "
                         f"boundary (K = {k} over {tp} ranks of {part}): the shards must start on group "
                         f"boundaries")
    mine = (per_group[:, 0] == rank).nonzero().flatten()
    cols = (mine[:, None] * w.group_size + torch.arange(w.group_size, device=mine.device)).flatten()
    shard_perm = perm[cols] - rank * part
    identity = torch.equal(shard_perm, torch.arange(part, device=shard_perm.device))
    return Int4Weights(w.codes[:, cols].contiguous(), w.scales[mine].contiguous(),
                       None if w.zeros is None else w.zeros[mine].contiguous(), w.group_size,
                       None if identity else shard_perm, w.bits)
