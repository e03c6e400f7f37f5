"""layout/prepacked_b.hpp: the host prepack follows the wgmma A-fragment order, is a permutation,
and round-trips. The expected placement below is derived independently from the PTX fragment
layout of wgmma .m64nNk16 (16-bit A in registers)."""

import re
from pathlib import Path

import pytest
import torch

import quantgemm
from torch._subclasses.fake_tensor import FakeTensorMode


def nibble_of_value(v: int) -> int:
    """Interleave [0, 2, 4, 6, 1, 3, 5, 7]: nibble p holds value order[p]."""
    return [0, 2, 4, 6, 1, 3, 5, 7].index(v)


def expected_prepack(codes: torch.Tensor, bits: int = 4) -> torch.Tensor:
    """Pure-Python prepack from the PTX register-fragment description: 4-bit codes with the nibble
    interleave, 8-bit codes in value order (byte v of the step's eight), in 16-byte halves."""
    n_total, k_total = codes.shape
    out = bytearray(n_total * k_total * bits // 8)
    blocks_k = k_total // 64
    for nb in range(n_total // 128):
        for kb in range(blocks_k):
            base = (nb * blocks_k + kb) * 8192  # codes per block
            for t in range(256):
                wg, warp, lane = t // 128, (t % 128) // 32, t % 32
                g, q = lane // 4, lane % 4
                for j in range(4):  # k16 step
                    for v in range(8):  # a0..a7
                        row = 64 * wg + 16 * warp + g + 8 * ((v // 2) % 2)
                        col = 16 * j + 2 * q + (v % 2) + 8 * (v // 4)
                        if bits == 4:  # a thread's 16 bytes together
                            e = base + (t * 4 + j) * 8 + nibble_of_value(v)
                        else:  # two 16-byte halves a thread (steps 0-1, 2-3), every thread's first half first
                            e = base + ((j // 2) * 256 + t) * 16 + (j % 2) * 8 + v
                        code = int(codes[nb * 128 + row, kb * 64 + col])
                        if bits == 4:
                            out[e // 2] |= code << (4 * (e % 2))
                        else:
                            out[e] = code
    return torch.frombuffer(out, dtype=torch.uint8)


@pytest.mark.parametrize("n,k", [(128, 64), (256, 128)])
def test_host_prepack_follows_the_wgmma_fragment_order(n, k):
    torch.manual_seed(n + k)
    codes = torch.randint(0, 16, (n, k), dtype=torch.uint8)
    packed = quantgemm.prepack_b(codes)
    assert packed.data.dtype == torch.uint8 and packed.data.numel() == n * k // 2
    assert torch.equal(packed.data, expected_prepack(codes))


@pytest.mark.parametrize("weight_type", ["u8b128", "u8"])
@pytest.mark.parametrize("n,k", [(128, 64), (256, 128)])
def test_host_prepack_of_8_bit_codes_follows_the_fragment_order(weight_type, n, k):
    torch.manual_seed(n + k + 1)
    codes = torch.randint(0, 256, (n, k), dtype=torch.uint8)
    packed = quantgemm.prepack_b(codes, weight_type)
    assert packed.data.numel() == n * k
    assert torch.equal(packed.data, expected_prepack(codes, 8))
    assert torch.equal(quantgemm.unpack_b(packed), codes)


def test_8_bit_weights_off_the_blocks_are_padded_and_round_trip():
    codes = torch.randint(0, 256, (200, 72), dtype=torch.uint8)
    packed = quantgemm.prepack_b(codes, "u8b128")
    assert packed.data.numel() == 256 * 128 and torch.equal(quantgemm.unpack_b(packed), codes)
    with pytest.raises(ValueError, match=r"w_q must hold 4-bit codes \(0..15\) for u4b8"):
        quantgemm.prepack_b(codes, "u4b8")


@pytest.mark.parametrize("n,k", [(128, 64), (384, 192), (1024, 512)])
def test_host_prepack_is_a_permutation_and_round_trips(n, k):
    torch.manual_seed(7)
    codes = torch.randint(0, 16, (n, k), dtype=torch.uint8)
    packed = quantgemm.prepack_b(codes)
    nibbles = torch.stack([packed.data & 0xF, packed.data >> 4], dim=1).flatten()
    assert torch.equal(torch.bincount(nibbles, minlength=16), torch.bincount(codes.flatten(), minlength=16))
    assert torch.equal(quantgemm.unpack_b(packed), codes)


def test_each_code_lands_once():
    # one-hot weights: every position is found exactly once in the packed form
    n, k = 128, 64
    for n0, k0 in [(0, 0), (5, 17), (127, 63), (64, 8), (9, 40)]:
        codes = torch.zeros(n, k, dtype=torch.uint8)
        codes[n0, k0] = 1
        packed = quantgemm.prepack_b(codes).data
        nibbles = torch.stack([packed & 0xF, packed >> 4], dim=1).flatten()
        assert int(nibbles.sum()) == 1


def test_prepack_validation():
    with pytest.raises(TypeError, match="w_q must have dtype torch.uint8"):
        quantgemm.prepack_b(torch.zeros(128, 64, dtype=torch.int32))
    with pytest.raises(ValueError, match="w_q must be 2-D"):
        quantgemm.prepack_b(torch.zeros(128, dtype=torch.uint8))
    with pytest.raises(ValueError, match="N > 0 and K > 0"):
        quantgemm.prepack_b(torch.zeros(0, 64, dtype=torch.uint8))
    with pytest.raises(ValueError, match="N=100 is not supported: the weight's N must be a multiple of 8"):
        quantgemm.prepack_b(torch.zeros(100, 64, dtype=torch.uint8))
    with pytest.raises(ValueError, match="K=92 is not supported: the weight's K must be a multiple of 8"):
        quantgemm.prepack_b(torch.zeros(128, 92, dtype=torch.uint8))
    with pytest.raises(ValueError, match="4-bit codes"):
        quantgemm.prepack_b(torch.full((128, 64), 16, dtype=torch.uint8))
    with pytest.raises(ValueError, match="weight_type"):
        quantgemm.prepack_b(torch.zeros(128, 64, dtype=torch.uint8), weight_type="u3")


@pytest.mark.parametrize("signed,stored,low,high,layout", [("s4", "u4b8", -8, 8, "sm90"), ("s4", "u4b8", -8, 8, "sm80"),
                                                             ("s4", "u4b8", -8, 8, "sm90_e4m3"),
                                                             ("s8", "u8b128", -128, 128, "sm90"),
                                                             ("s8", "u8b128", -128, 128, "sm80")])
def test_signed_codes_are_stored_as_the_offset_type(signed, stored, low, high, layout):
    torch.manual_seed(high)
    q = torch.randint(low, high, (200, 136), dtype=torch.int8)
    b = quantgemm.prepack_b(q, signed, layout=layout)
    assert b.weight_type == stored and (b.n, b.k, b.layout) == (200, 136, layout)
    offset = (q.to(torch.int16) - low).to(torch.uint8)
    assert torch.equal(b.data, quantgemm.prepack_b(offset, stored, layout=layout).data)
    assert torch.equal(quantgemm.unpack_b(b).to(torch.int16) + low, q.to(torch.int16))
    # the weight's values are the signed codes
    a = torch.randn(3, 136, dtype=torch.bfloat16)
    scales = torch.rand(1, 200, dtype=torch.bfloat16) + 0.5
    if layout != "sm90_e4m3":
        out = torch.ops.quantgemm.mm(a, b.data, b.n, b.k, b.weight_type, scales, -1, layout=layout)
        want = a.float() @ (q.float() * scales.float().T).T
        torch.testing.assert_close(out.float(), want, rtol=2e-2, atol=2e-2 * want.abs().max().item())


def test_signed_codes_validation():
    with pytest.raises(TypeError, match="w_q must have dtype torch.int8"):
        quantgemm.prepack_b(torch.zeros(128, 64, dtype=torch.uint8), "s4")
    with pytest.raises(ValueError, match=r"signed 4-bit codes \(-8..7\) for s4, got -9..7"):
        quantgemm.prepack_b(torch.tensor([[-9] + [7] * 63] * 128, dtype=torch.int8), "s4")
    with pytest.raises(ValueError, match=r"one of \('u4b8', 's4'\) for the sm90_e4m3 layout"):
        quantgemm.prepack_b(torch.zeros(128, 64, dtype=torch.int8), "s8", layout="sm90_e4m3")
    with FakeTensorMode() as mode:
        fake = torch.ops.quantgemm.prepack_b(mode.from_tensor(torch.zeros(200, 136, dtype=torch.int8)), "s4")
        assert fake.shape == (256 * 192 // 2,) and fake.dtype == torch.uint8


@pytest.mark.parametrize("n,k", [(136, 72), (576, 320), (8, 8), (200, 4104)])
def test_partial_blocks_are_padded_with_the_zero_code(n, k):
    # N and K off the 128 x 64 blocks: padded once at prepack time with code 8 (weight 0)
    codes = torch.randint(0, 16, (n, k), dtype=torch.uint8)
    b = quantgemm.prepack_b(codes)
    assert (b.n, b.k) == (n, k)
    n_pad, k_pad = -(-n // 128) * 128, -(-k // 64) * 64
    assert b.data.numel() == n_pad * k_pad // 2
    padded = torch.full((n_pad, k_pad), 8, dtype=torch.uint8)
    padded[:n, :k] = codes
    assert torch.equal(b.data, quantgemm.prepack_b(padded).data)
    assert torch.equal(quantgemm.unpack_b(b), codes)


def expected_prepack_e4m3(codes: torch.Tensor) -> torch.Tensor:
    """The W4A8 layout from the PTX fragment of wgmma .m64nNk32 with an 8-bit A in registers: lane
    (g = lane / 4, q = lane % 4) holds, in byte b of register r, row g + 8 (r % 2) and column
    4 q + b + 16 (r / 2) of each k32 step; value v = 4 r + b is nibble v % 8 of word 2 j + v / 8."""
    n_total, k_total = codes.shape
    out = bytearray(n_total * k_total // 2)
    blocks_k = k_total // 64
    for nb in range(n_total // 128):
        for kb in range(blocks_k):
            base = (nb * blocks_k + kb) * 8192
            for t in range(256):
                wg, warp, lane = t // 128, (t % 128) // 32, t % 32
                g, q = lane // 4, lane % 4
                for j in range(2):  # k32 step
                    for v in range(16):
                        r, b = v // 4, v % 4
                        row = 64 * wg + 16 * warp + g + 8 * (r % 2)
                        col = 32 * j + 4 * q + b + 16 * (r // 2)
                        e = base + (t * 2 + j) * 16 + v
                        out[e // 2] |= int(codes[nb * 128 + row, kb * 64 + col]) << (4 * (e % 2))
    return torch.frombuffer(out, dtype=torch.uint8)


@pytest.mark.parametrize("n,k", [(128, 64), (256, 128)])
def test_host_prepack_for_e4m3_follows_the_8_bit_fragment_order(n, k):
    torch.manual_seed(n + k + 2)
    codes = torch.randint(0, 16, (n, k), dtype=torch.uint8)
    packed = quantgemm.prepack_b(codes, layout="sm90_e4m3")
    assert packed.layout == "sm90_e4m3" and packed.data.numel() == n * k // 2
    assert torch.equal(packed.data, expected_prepack_e4m3(codes))


def prmt(a: int, b: int, selector: int) -> int:
    """PTX prmt.b32 (default mode): byte i of the result is byte selector[i] of {b, a}."""
    source = [(a >> (8 * i)) & 0xFF for i in range(4)] + [(b >> (8 * i)) & 0xFF for i in range(4)]
    return sum(source[(selector >> (4 * i)) & 0x7] << (8 * i) for i in range(4))


def test_e4m3_codes_become_the_m16n8k16_fragments_of_the_8_token_tiles():
    """Convert4BitE4m3::to_f16_biased (numeric/u4_e4m3.hpp), modelled step by step with the header's
    PRMT selectors and bias, on the host prepack: register r of lane (g, q) at k16 step j holds rows
    g + 8 (r % 2) at k 16 j + 4 q + 2 (r // 2) + e (e: its half), the k of the B fragment pairs that
    the activation converter writes for the lane (collective/sm90_mma_w4a8.hpp), as 64 + code in fp16."""
    header = (Path(__file__).parent.parent / "include/quantgemm/numeric/u4_e4m3.hpp").read_text()
    selectors = [int(x, 16) for x in re.search(r"kSelect\[4\] = \{([^}]*)\}", header).group(1)
                 .replace("u", "").split(",")]
    bias = int(re.search(r"kF16Bias = (0x[0-9A-Fa-f]+)u", header).group(1), 16)
    torch.manual_seed(7)
    codes = torch.randint(0, 16, (128, 64), dtype=torch.uint8)
    data = quantgemm.prepack_b(codes, layout="sm90_e4m3").data
    words = data.view(torch.int32).tolist()
    for t in range(256):
        g, q = (t % 32) // 4, t % 4
        row = (t // 32) * 16 + g
        for j in range(4):
            word = words[4 * t + j] & 0xFFFFFFFF
            for r, selector in enumerate(selectors):
                x = (prmt(word, (word << 4) & 0xFFFFFFFF, selector) & 0x00F000F0) | bias
                for e in range(2):
                    value = torch.tensor([(x >> (16 * e)) & 0xFFFF], dtype=torch.int16).view(torch.float16).item()
                    k = 16 * j + 4 * q + 2 * (r // 2) + e
                    assert value == 64 + int(codes[row + 8 * (r % 2), k]), (t, j, r, e)


@pytest.mark.parametrize("n,k", [(136, 72), (384, 192)])
def test_e4m3_layout_pads_and_round_trips(n, k):
    codes = torch.randint(0, 16, (n, k), dtype=torch.uint8)
    packed = quantgemm.prepack_b(codes, layout="sm90_e4m3")
    assert torch.equal(quantgemm.unpack_b(packed), codes)


def test_e4m3_layout_takes_u4b8_only():
    with pytest.raises(ValueError, match=r"weight_type must be one of \('u4b8', 's4'\) for the sm90_e4m3 layout"):
        quantgemm.prepack_b(torch.zeros(128, 64, dtype=torch.uint8), "u4", layout="sm90_e4m3")
