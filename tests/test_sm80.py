"""The sm80 mixed-input kernels (mma.sync, for sm_80 and later GPUs; they run on Hopper too): the
layout and argument checks everywhere, and on a GPU every schedule x weight type x activation dtype x
group size against the reference (exact_weight: these kernels scale fp32 partial sums), with fresh
random inputs and poisoned outputs."""

import pytest
import torch

import quantgemm
from quantgemm import mixed_input, reference
from quantgemm.quantize import QUANTIZERS
from quantgemm.testing import assert_gemm_close, poison_, replay_in_graph

from conftest import ROOT  # noqa: F401  (puts codegen on the path)
from codegen.schedules import MIXED_INPUT_SM80

WEIGHT_TYPES = ("u4b8", "u4", "u8b128", "u8")
DTYPES = (torch.bfloat16, torch.float16)


def sm80_gpu() -> bool:
    return torch.cuda.is_available() and torch.cuda.get_device_capability()[0] >= 8


requires_sm80 = pytest.mark.skipif(not sm80_gpu(), reason="needs an sm_80 or later GPU")

# ---------------------------------------------------------------- layout and checks (no GPU needed)


@pytest.mark.parametrize("weight_type", WEIGHT_TYPES)
@pytest.mark.parametrize("n,k", [(64, 64), (200, 72), (1000, 328)])
def test_layout_round_trips_and_pads_to_64(weight_type, n, k):
    bits = mixed_input.BITS[weight_type]
    codes = torch.randint(0, 1 << bits, (n, k), dtype=torch.uint8)
    b = quantgemm.prepack_b(codes, weight_type, layout="sm80")
    assert b.layout == "sm80"
    n_pad, k_pad = -(-n // 64) * 64, -(-k // 64) * 64
    assert b.data.numel() == n_pad * k_pad * bits // 8
    assert torch.equal(quantgemm.unpack_b(b), codes)
    assert not torch.equal(b.data, quantgemm.prepack_b(codes, weight_type).data[:b.data.numel()])


def fragment_of(lane, step):
    """The (n, k) of each value of lane `lane`'s k16 step, in the mma.sync A-fragment order:
    [tile][register][half] for the four m16 tiles of a 64-row block."""
    g, r = lane // 4, lane % 4
    return [[[(16 * t + g + 8 * (reg % 2), 16 * step + 2 * r + half + 8 * (reg // 2)) for half in (0, 1)]
             for reg in range(4)] for t in range(4)]


@pytest.mark.parametrize("bits", [4, 8])
def test_layout_puts_each_lane_fragment_where_the_converter_reads_it(bits):
    # codes that name their own position: code(n, k) = a hash of (n, k); decode lane 5's k16 step 2
    # the way the kernel does (a 16-byte load per lane, LOP3 / PRMT extraction) and compare
    n = torch.arange(64).view(64, 1)
    k = torch.arange(64).view(1, 64)
    codes = ((n * 7 + k * 3) % (1 << bits)).to(torch.uint8)
    data = quantgemm.prepack_b(codes, "u4b8" if bits == 4 else "u8b128", layout="sm80").data
    lane, step = 5, 2
    step_bytes = 64 * 16 * bits // 8
    words = []
    for h in range(1 if bits == 4 else 2):
        off = step * step_bytes + (h * 32 + lane) * 16
        words += data[off:off + 16].view(torch.int32).tolist()
    words = [w & 0xFFFFFFFF for w in words]
    want = fragment_of(lane, step)
    for t in range(4):
        for reg in range(4):
            for half in range(2):
                if bits == 4:  # word 2 (t / 2) + reg / 2; nibbles (0, 4) / (2, 6) even tile, (1, 5) / (3, 7) odd
                    word = words[2 * (t // 2) + reg // 2]
                    nibble = (t % 2) + 2 * (reg % 2) + 4 * half
                    got = (word >> (4 * nibble)) & 0xF
                else:  # word 2 t + reg / 2, byte 2 (reg % 2) + half
                    word = words[2 * t + reg // 2]
                    got = (word >> (8 * (2 * (reg % 2) + half))) & 0xFF
                nn, kk = want[t][reg][half]
                assert got == codes[nn, kk].item(), (t, reg, half)


def test_layout_is_refused_when_unknown():
    with pytest.raises(ValueError, match="layout must be one of"):
        quantgemm.prepack_b(torch.zeros(64, 64, dtype=torch.uint8), layout="sm70")


def test_families_and_rules():
    assert len(MIXED_INPUT_SM80) == 8
    for family in MIXED_INPUT_SM80:
        assert family.name.startswith("sm80_") and not family.problems()
        for m in (1, 8, 9, 16, 17, 4096):
            assert family.select(m, 4096, 4096) in family.schedules()


def test_explain_names_the_sm80_family():
    e = quantgemm.explain(1, 4096, 4096, weight_type="u4", layout="sm80")
    assert e.layout == "sm80" and "sm80 layout" in str(e)
    if e.schedule is not None:
        assert e.schedule.startswith("sm80_u4_bf16_")


# ---------------------------------------------------------------- on the GPU


def sm80_schedules(weight_type, dtype):
    schedules = quantgemm.supported_schedules(weight_type, dtype, layout="sm80")
    if not schedules:
        pytest.skip(f"no sm80 {weight_type} x {dtype} kernels in this (subset) build")
    return schedules


def check(m, n, k, g, weight_type, dtype, schedule=None, a=None, out=None, channel=False, token=False):
    gen = torch.Generator(device="cuda").manual_seed(n * 13 + k + g)
    w = torch.randn(n, k, device="cuda", dtype=dtype, generator=gen) / k ** 0.5 + 0.01
    w_q, scales, *zeros = QUANTIZERS[weight_type](w, g)
    zeros = zeros[0] if zeros else None
    zero_point = mixed_input.ZERO_POINTS[weight_type]
    w_max = reference._dequantize(w_q, scales, zeros, g, zero_point, exact_weight=True).abs().max().item()
    if a is None:
        a = torch.randn(m, k, device="cuda", dtype=dtype)
    if out is None:
        out = torch.empty(m, n, device="cuda", dtype=dtype)
    poison_(out)
    cs = torch.rand(n, device="cuda") + 0.5 if channel else None
    ts = torch.rand(m, device="cuda") * 4 if token else None
    b = quantgemm.prepack_b(w_q, weight_type, layout="sm80")
    got = quantgemm.mm(a, b, scales, g, out=out, schedule=schedule, group_zeros=zeros, channel_scales=cs,
                       token_scales=ts)
    assert got.data_ptr() == out.data_ptr()
    ref = reference.mm_quantized(a, w_q, scales, g, zeros, cs, ts, zero_point=zero_point, exact_weight=True)
    a_max = a.abs().max().item() * (ts.max().item() if token else 1.0)
    assert_gemm_close(got, ref, k, a_max, w_max * (cs.max().item() if channel else 1.0))


@requires_sm80
@pytest.mark.parametrize("dtype", DTYPES, ids=["bf16", "fp16"])
@pytest.mark.parametrize("weight_type", WEIGHT_TYPES)
@pytest.mark.parametrize("n,k,g", [(384, 320, 64), (200, 328, -1), (4096, 4096, 128), (640, 96, 32),
                                   (1152, 2048, 256)])
def test_every_schedule_matches_reference(weight_type, dtype, n, k, g):
    for schedule in sm80_schedules(weight_type, dtype):
        for m in (1, 7, 16, 37):
            check(m, n, k, g, weight_type, dtype, schedule)


@requires_sm80
@pytest.mark.parametrize("dtype", DTYPES, ids=["bf16", "fp16"])
@pytest.mark.parametrize("weight_type", WEIGHT_TYPES)
@pytest.mark.parametrize("m", [1, 8, 16, 33, 64, 130])
def test_heuristic_matches_reference_on_a_large_layer(weight_type, dtype, m):
    sm80_schedules(weight_type, dtype)
    check(m, 28672, 8192, 128, weight_type, dtype)


@requires_sm80
@pytest.mark.parametrize("weight_type,dtype", [("u4b8", torch.bfloat16), ("u4", torch.bfloat16),
                                               ("u4b8", torch.float16), ("u4", torch.float16),
                                               ("u8b128", torch.float16), ("u8", torch.float16)])
def test_activations_far_from_zero_mean(weight_type, dtype):
    # codes sum (b + q) a and subtract (b + z) sum(a) per group (bf16 128 + q, fp16 64 + q
    # or 1024 + q; docs/kernel.md): an activation whose mean dominates it makes that cancellation largest
    sm80_schedules(weight_type, dtype)
    k = 14336
    a = torch.randn(33, k, device="cuda", dtype=dtype) * 0.25 + 2.0
    check(33, 4096, k, 128, weight_type, dtype, a=a)


@requires_sm80
@pytest.mark.parametrize("g", [32, 64, 128, -1])
def test_group_sizes_and_epilogue_scales(g):
    sm80_schedules("u4", torch.bfloat16)
    for m in (1, 19):
        check(m, 1024, 2048, g, "u4", torch.bfloat16, channel=True, token=True)


@requires_sm80
def test_strides_m_zero_and_graphs():
    sm80_schedules("u4b8", torch.bfloat16)
    n, k = 4096, 4096
    big = torch.randn(70, k + 64, device="cuda", dtype=torch.bfloat16)
    check(64, n, k, 128, "u4b8", torch.bfloat16, a=big[3:67, 32:32 + k])  # row slice, padded leading dimension
    wide = torch.empty(40, n + 256, device="cuda", dtype=torch.bfloat16)
    check(40, n, k, 128, "u4b8", torch.bfloat16, out=wide[:, 128:128 + n])
    w_q, scales = quantgemm.quantize_u4b8(torch.randn(256, 128, device="cuda", dtype=torch.bfloat16), 128)
    b = quantgemm.prepack_b(w_q, layout="sm80")
    empty = quantgemm.mm(torch.empty(0, 128, device="cuda", dtype=torch.bfloat16), b, scales, 128)
    assert empty.shape == (0, 256)
    a = torch.randn(3, 128, device="cuda", dtype=torch.bfloat16)
    out = torch.empty(3, 256, device="cuda", dtype=torch.bfloat16)
    eager = quantgemm.mm(a, b, scales, 128)
    assert torch.equal(replay_in_graph(lambda: quantgemm.mm(a, b, scales, 128, out=out), out), eager)
    for _ in range(3):
        assert torch.equal(quantgemm.mm(a, b, scales, 128), eager)


@requires_sm80
def test_gpu_prepack_equals_host_reference():
    for weight_type, top in (("u4b8", 16), ("u8", 256)):
        codes = torch.randint(0, top, (200, 136), dtype=torch.uint8)
        host = quantgemm.prepack_b(codes, weight_type, layout="sm80")
        gpu = quantgemm.prepack_b(codes.cuda(), weight_type, layout="sm80")
        assert torch.equal(gpu.data.cpu(), host.data)


@requires_sm80
def test_quant_linear_and_operator_take_the_sm80_layout():
    sm80_schedules("u4", torch.bfloat16)
    linear = torch.nn.Linear(512, 384, bias=True, device="cuda", dtype=torch.bfloat16)
    layer = quantgemm.nn.QuantLinear.from_linear(linear, 128, "u4", layout="sm80")
    assert layer.layout == "sm80" and layer._prepacked().layout == "sm80"
    x = torch.randn(5, 512, device="cuda", dtype=torch.bfloat16)
    y = quantgemm.mm(x, layer._prepacked(), layer.scales, 128, group_zeros=layer.zeros)
    w = reference._dequantize(layer.weight_codes().cuda(), layer.scales, layer.zeros, 128, None, exact_weight=True)
    assert_gemm_close(y, x.float() @ w.t(), 512, x.abs().max().item(), w.abs().max().item())
    assert torch.equal(layer(x), y + layer.bias)
    op = torch.ops.quantgemm.mm(x, layer.qweight, 384, 512, "u4", layer.scales, 128, layer.zeros, layout="sm80")
    assert torch.equal(op, y)


def test_quant_linear_keeps_the_layout_it_was_built_for():
    # on the CPU (the reference path): a checkpoint layer for an Ampere GPU is built in the sm80 layout
    linear = torch.nn.Linear(256, 192, bias=False, dtype=torch.bfloat16)
    layer = quantgemm.nn.QuantLinear.from_linear(linear, 64, "u4b8", layout="sm80")
    assert layer.layout == "sm80" and "layout=sm80" in repr(layer)
    assert layer.qweight.numel() == 192 * 256 // 2  # 64 x 64 blocks: no padding here
    reference_layer = quantgemm.nn.QuantLinear.from_linear(linear, 64, "u4b8", layout="sm90")
    assert torch.equal(layer.weight_codes(), reference_layer.weight_codes())
    x = torch.randn(3, 256, dtype=torch.bfloat16)
    w = reference._dequantize(layer.weight_codes(), layer.scales, None, 64, 8, exact_weight=True)
    assert torch.equal(layer(x), (x.float() @ w.t()).to(torch.bfloat16))  # the sm80 kernels' weight: unrounded
