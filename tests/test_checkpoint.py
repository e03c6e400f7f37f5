"""GPTQ and AWQ converters, on tensors packed by each format's own rules (no GPU needed)."""

import pytest
import torch

from quantgemm import checkpoint
from quantgemm.checkpoint import AWQ_ORDER, Int4Weights, from_awq, from_gptq, shard


def pack_along(codes: torch.Tensor, dim: int, order=tuple(range(8))) -> torch.Tensor:
    """int32 words of eight 4-bit fields along `dim`; bits 4i hold position order[i]."""
    c = codes.to(torch.int64).movedim(dim, -1)
    c = c.reshape(*c.shape[:-1], c.shape[-1] // 8, 8)
    words = torch.zeros(c.shape[:-1], dtype=torch.int64)
    for i, pos in enumerate(order):
        words |= c[..., pos] << (4 * i)
    words = torch.where(words >= 2**31, words - 2**32, words).to(torch.int32)
    return words.movedim(-1, dim)


def gptq_layer(n, k, group, zeros, act_order=False, seed=0):
    """A GPTQ checkpoint layer packed as GPTQ packs it, and the weight it stands for."""
    g = torch.Generator().manual_seed(seed)
    codes = torch.randint(0, 16, (n, k), generator=g, dtype=torch.uint8)       # [N, K], checkpoint order
    scales = (torch.rand(k // group, n, generator=g) + 0.5).half() / 64
    g_idx = torch.arange(k) // group
    if act_order:
        g_idx = g_idx[torch.randperm(k, generator=g)]
    qweight = pack_along(codes.t(), dim=0)                                         # [K/8, N]
    qzeros = pack_along(((zeros.to(torch.int16) - 1) & 0xF).to(torch.uint8), dim=1)  # stored minus one
    w = (codes.float() - zeros.float()[g_idx].t()) * scales.float()[g_idx].t()
    return qweight, qzeros, scales, g_idx, w


@pytest.mark.parametrize("act_order", [False, True])
def test_gptq_symmetric_is_u4b8(act_order):
    n, k, group = 64, 256, 32
    zeros = torch.full((k // group, n), 8, dtype=torch.uint8)
    qweight, qzeros, scales, g_idx, w = gptq_layer(n, k, group, zeros, act_order)
    assert qzeros.unique().tolist() == [0x77777777]  # the stored-minus-one convention
    got = from_gptq(qweight, qzeros, scales, g_idx)
    assert got.zeros is None and got.group_size == group
    assert (got.perm is not None) == act_order
    assert torch.equal(got.dequantize(), w)
    if act_order:  # the permuted codes have contiguous groups
        groups = g_idx[got.perm]
        assert torch.equal(groups, torch.arange(k) // group)


def test_gptq_asymmetric_keeps_zero_points():
    n, k, group = 48, 128, 64
    zeros = torch.randint(0, 16, (k // group, n), dtype=torch.uint8)
    zeros[0, 0] = 0  # stored as 0xF
    qweight, qzeros, scales, g_idx, w = gptq_layer(n, k, group, zeros)
    got = from_gptq(qweight, qzeros, scales, g_idx)
    assert torch.equal(got.zeros, zeros)
    assert torch.equal(got.dequantize(), w)


def test_awq_layout_and_zero_points():
    n, k, group = 64, 256, 128
    g = torch.Generator().manual_seed(1)
    codes = torch.randint(0, 16, (n, k), generator=g, dtype=torch.uint8)
    zeros = torch.randint(0, 16, (k // group, n), generator=g, dtype=torch.uint8)
    scales = (torch.rand(k // group, n, generator=g) + 0.5).half() / 64
    qweight = pack_along(codes.t(), dim=1, order=AWQ_ORDER)  # [K, N/8]
    qzeros = pack_along(zeros, dim=1, order=AWQ_ORDER)       # [K/g, N/8], zero points as they are
    got = from_awq(qweight, qzeros, scales)
    assert torch.equal(got.codes, codes) and torch.equal(got.zeros, zeros) and got.group_size == group
    g_of_k = torch.arange(k) // group
    w = (codes.float() - zeros.float()[g_of_k].t()) * scales.float()[g_of_k].t()
    assert torch.equal(got.dequantize(), w)


def test_unpack_int32_places_every_nibble():
    words = torch.tensor([[0x76543210, 0x89ABCDEF - 2**32]], dtype=torch.int32)  # the second one negative
    fields = checkpoint.unpack_int32(words, dim=1)
    assert fields.shape == (1, 16)
    assert fields[0].tolist() == [0, 1, 2, 3, 4, 5, 6, 7, 15, 14, 13, 12, 11, 10, 9, 8]
    awq = checkpoint.unpack_int32(words[:, :1], dim=1, order=AWQ_ORDER)
    assert awq[0].tolist() == [0, 4, 1, 5, 2, 6, 3, 7]  # bits 4i hold column AWQ_ORDER[i]


def test_bad_checkpoints_are_named():
    n, k, group = 64, 256, 32
    zeros = torch.full((k // group, n), 8, dtype=torch.uint8)
    qweight, qzeros, scales, g_idx, _ = gptq_layer(n, k, group, zeros)
    with pytest.raises(TypeError, match="qweight must have dtype torch.int32"):
        from_gptq(qweight.to(torch.int64), qzeros, scales, g_idx)
    with pytest.raises(ValueError, match="qzeros must have shape"):
        from_gptq(qweight, qzeros[:, :4], scales, g_idx)
    with pytest.raises(ValueError, match="g_idx must give each"):
        from_gptq(qweight, qzeros, scales, torch.zeros(k, dtype=torch.int32))
    with pytest.raises(ValueError, match="group_size 64 does not match"):
        from_gptq(qweight, qzeros, scales, g_idx, group_size=64)
    with pytest.raises(ValueError, match="qweight must have shape"):
        from_awq(qweight, qzeros, scales)


@pytest.mark.parametrize("act_order", [False, True])
def test_tensor_parallel_shards_hold_their_part_of_the_weight(act_order):
    n, k, group, tp = 64, 512, 64, 4
    zeros = torch.randint(0, 16, (k // group, n), generator=torch.Generator().manual_seed(9), dtype=torch.uint8)
    qweight, qzeros, scales, g_idx, w = gptq_layer(n, k, group, zeros, act_order=False)
    full = from_gptq(qweight, qzeros, scales, g_idx)
    if act_order:  # permute whole groups, so that every group stays on one rank
        order = torch.randperm(k // group, generator=torch.Generator().manual_seed(2))
        cols = (order[:, None] * group + torch.arange(group)).flatten()
        full = Int4Weights(full.codes[:, cols].contiguous(), full.scales[order], full.zeros[order], group, cols)
    assert torch.equal(full.dequantize(), w)
    for rank in range(tp):
        col = shard(full, tp, rank, "n")
        assert torch.equal(col.dequantize(), w[rank * n // tp:(rank + 1) * n // tp])
        row = shard(full, tp, rank, "k")
        assert torch.equal(row.dequantize(), w[:, rank * k // tp:(rank + 1) * k // tp])
        assert row.group_size == group and row.scales.shape == (k // tp // group, n)


def test_a_group_straddling_a_shard_boundary_is_an_error():
    n, k, group = 64, 384, 128
    zeros = torch.full((k // group, n), 8, dtype=torch.uint8)
    full = from_gptq(*gptq_layer(n, k, group, zeros)[:4])
    with pytest.raises(ValueError, match="straddles a tensor-parallel boundary"):
        shard(full, 2, 0, "k")  # 192 input channels a rank: group 1 spans both
    with pytest.raises(ValueError, match="straddles a tensor-parallel boundary"):  # act-order mixes the ranks
        shard(from_gptq(*gptq_layer(n, k, group, zeros, act_order=True)[:4]), 3, 1, "k")
    with pytest.raises(ValueError, match="does not split 3 ways into multiples of 8"):
        shard(full, 3, 0, "n")
    with pytest.raises(ValueError, match="rank must be in"):
        shard(full, 2, 2, "k")
    per_channel = from_gptq(*gptq_layer(n, k, k, torch.full((1, n), 8, dtype=torch.uint8))[:4])
    assert shard(per_channel, 2, 1, "k").group_size == 192  # one group per rank


def pack8_along(codes: torch.Tensor, dim: int) -> torch.Tensor:
    """int32 words of four 8-bit fields along `dim`, GPTQ's 8-bit packing: bits 8i hold position i."""
    c = codes.to(torch.int64).movedim(dim, -1)
    c = c.reshape(*c.shape[:-1], c.shape[-1] // 4, 4)
    words = sum(c[..., i] << (8 * i) for i in range(4))
    words = torch.where(words >= 2**31, words - 2**32, words).to(torch.int32)
    return words.movedim(-1, dim)


@pytest.mark.parametrize("symmetric", [True, False])
def test_gptq_8_bit_layers(symmetric):
    from quantgemm.nn import QuantLinear

    n, k, group = 64, 256, 128
    g = torch.Generator().manual_seed(3)
    codes = torch.randint(0, 256, (n, k), generator=g, dtype=torch.uint8)
    zeros = torch.full((k // group, n), 128, dtype=torch.uint8) if symmetric \
        else torch.randint(0, 256, (k // group, n), generator=g, dtype=torch.uint8)
    scales = (torch.rand(k // group, n, generator=g) + 0.5).half() / 512
    qweight = pack8_along(codes.t(), dim=0)                                          # [K/4, N]
    qzeros = pack8_along(((zeros.to(torch.int16) - 1) & 0xFF).to(torch.uint8), dim=1)  # stored minus one
    got = from_gptq(qweight, qzeros, scales, bits=8)
    assert got.bits == 8 and got.weight_type == ("u8b128" if symmetric else "u8")
    assert torch.equal(got.codes, codes) and (got.zeros is None) == symmetric
    g_of_k = torch.arange(k) // group
    w = (codes.float() - zeros.float()[g_of_k].t()) * scales.float()[g_of_k].t()
    assert torch.equal(got.dequantize(), w)
    layer = QuantLinear.from_gptq(qweight, qzeros, scales, bits=8, dtype=torch.float16)
    assert layer.weight_type == got.weight_type and torch.equal(layer.weight_codes(), codes)
    with pytest.raises(ValueError, match="bits must be 4 or 8"):
        from_gptq(qweight, qzeros, scales, bits=3)
