"""W4A8: u4b8 weights in the sm90_e4m3 layout x e4m3 activations (quantgemm.mm): argument validation
everywhere, and on a Hopper GPU every schedule against the pure-torch reference (fp32 matmul of the
dequantized weight and the dequantized e4m3 activation) on fresh random inputs, outputs poisoned."""

import pytest
import torch

import quantgemm
from quantgemm import mixed_input, reference
from quantgemm.quantize import quantize_fp8, quantize_u4b8
from quantgemm.testing import assert_gemm_close, poison_, replay_in_graph

from conftest import requires_hopper

E4M3 = "sm90_e4m3"

# ---------------------------------------------------------------- validation (no GPU needed)


def cpu_problem(m=4, n=128, k=256, g=128, out_dtype=torch.bfloat16):
    w_q = torch.randint(0, 16, (n, k), dtype=torch.uint8)
    a = torch.randn(m, k).to(torch.float8_e4m3fn)
    return a, quantgemm.prepack_b(w_q, layout=E4M3), torch.rand(k // g, n, dtype=out_dtype), g


def test_rejects_16_bit_activations_for_the_e4m3_layout():
    a, b, s, g = cpu_problem()
    with pytest.raises(TypeError, match="a must have dtype torch.float8_e4m3fn for a weight prepacked in the sm90_e4"):
        quantgemm.mm(a.to(torch.bfloat16), b, s, g)


def test_rejects_e4m3_activations_for_a_16_bit_layout():
    a, _, s, g = cpu_problem()
    b = quantgemm.prepack_b(torch.randint(0, 16, (128, 256), dtype=torch.uint8))
    with pytest.raises(TypeError, match="or torch.float8_e4m3fn with a weight prepacked in the sm90_e4m3 layout"):
        quantgemm.mm(a, b, s, g)


@pytest.mark.parametrize("g,match", [(64, "group_size must be a multiple of 128 or -1 for W4A8"),
                                     (100, "group_size must be -1 or a positive divisor")])
def test_rejects_groups_off_the_128_deep_stages(g, match):
    a, b, _, _ = cpu_problem(k=384)
    with pytest.raises(ValueError, match=match):
        quantgemm.mm(a, b, torch.rand(384 // 64, 128, dtype=torch.bfloat16), g)


def test_rejects_k_off_16_bytes():
    w_q = torch.randint(0, 16, (128, 136), dtype=torch.uint8)
    b = quantgemm.prepack_b(w_q, layout=E4M3)
    a = torch.randn(2, 136).to(torch.float8_e4m3fn)
    with pytest.raises(ValueError, match="K=136 is not supported for W4A8"):
        quantgemm.mm(a, b, torch.rand(1, 128, dtype=torch.bfloat16), -1)


@pytest.mark.parametrize("bad,match", [
    (lambda s: s.float(), "group_scales must have dtype torch.bfloat16 or torch.float16 .the output's."),
    (lambda s: s[:1], r"group_scales must have shape \(2, 128\)"),
])
def test_rejects_bad_scales(bad, match):
    a, b, s, g = cpu_problem()
    with pytest.raises((TypeError, ValueError), match=match):
        quantgemm.mm(a, b, bad(s), g)


def test_rejects_an_out_of_another_dtype_and_group_zeros():
    a, b, s, g = cpu_problem()
    with pytest.raises(TypeError, match="out must have dtype torch.bfloat16"):
        quantgemm.mm(a, b, s, g, out=torch.empty(4, 128, dtype=torch.float16))
    with pytest.raises(ValueError, match="group_zeros must be None for a u4b8 weight"):
        quantgemm.mm(a, b, s, g, group_zeros=s)


def test_explain_names_the_w4a8_family():
    e = quantgemm.explain(16, 4096, 4096, 128, layout=E4M3)
    assert "sm90_e4m3" in str(e)
    if not e.refused:  # (a build with the W4A8 kernels)
        assert e.schedule.startswith("u4b8_e4m3_bf16_")
    if "u4b8_e4m3_bf16_128x256x128_c1x1x1" in schedules():
        wide = quantgemm.explain(4096, 28672, 8192, 128, layout=E4M3, schedule="u4b8_e4m3_bf16_128x256x128_c1x1x1")
        assert any("over all of K=8192" in note for note in wide.notes)
        assert not quantgemm.explain(4096, 28672, 8192, 128, layout=E4M3,
                                     schedule="u4b8_e4m3_bf16_128x128x128_c1x1x1").notes
    bad = quantgemm.explain(16, 4096, 4096, 64, layout=E4M3)
    assert any("multiple of 128" in r for r in bad.refused)


def test_the_wide_tile_accumulates_over_all_of_k_the_others_over_128():
    assert mixed_input.w4a8_accumulation("u4b8_e4m3_bf16_128x256x128_c1x1x1", 8192) == 8192
    assert mixed_input.w4a8_accumulation("u4b8_e4m3_fp16_128x128x128_c1x1x1", 8192) == 128
    assert mixed_input.w4a8_accumulation("u4b8_e4m3_bf16_256x64x128_c1x1x1", 8192) == 128
    assert mixed_input.w4a8_accumulation("u4b8_e4m3_bf16_256x8x128_c1x1x1", 96) == 96
    with pytest.raises(ValueError, match="not an sm90 mixed-input schedule name"):
        mixed_input.w4a8_accumulation("sm80_u4b8_bf16_256x8", 128)


# ---------------------------------------------------------------- GPU: every schedule vs the reference

def gpu_problem(m, n, k, group_size, out_dtype, seed, mean=0.5, deviation=2.0):
    torch.manual_seed(seed)
    w = torch.randn(n, k, device="cuda") * 0.05
    w_q, scales = quantize_u4b8(w, group_size, scale_dtype=out_dtype)
    x = torch.randn(m, k, device="cuda") * deviation + mean
    a, ts = quantize_fp8(x)
    return a, ts.reshape(-1).contiguous(), w_q, scales


def check(a, ts, w_q, scales, group_size, out, schedule=None, cs=None):
    """out against the reference, with the accumulation length of `schedule` (default: the dispatch's)."""
    ref = reference.mm_quantized(a.float(), w_q, scales, group_size, channel_scales=cs, token_scales=ts,
                                 exact_weight=True)
    a_max = a.float().abs().max().item() * ts.max().item()
    w_max = 8 * scales.float().abs().max().item() * (1.0 if cs is None else cs.abs().max().item())
    m, k = a.shape
    if schedule is None:
        schedule = mixed_input.select_schedule(m, w_q.shape[0], k, group_size=group_size, layout=E4M3)
    assert_gemm_close(out, ref, k, a_max, w_max, fp8_chunk=mixed_input.w4a8_accumulation(schedule, k))


def schedules(out_dtype=torch.bfloat16):
    return mixed_input.supported_schedules("u4b8", out_dtype, 128, E4M3)


@requires_hopper
@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("m,n,k,g", [(1, 256, 512, 128), (3, 384, 1024, 256), (16, 4096, 4096, 128),
                                     (64, 1024, 2048, -1), (130, 512, 384, 128), (5, 1000, 640, 128)])
def test_every_schedule_matches_the_reference(m, n, k, g, out_dtype):
    names = schedules(out_dtype)
    if not names:
        pytest.skip("no W4A8 kernels in this build")
    a, ts, w_q, scales = gpu_problem(m, n, k, g, out_dtype, seed=m * 7 + n + k)
    b = quantgemm.prepack_b(w_q, layout=E4M3)
    for name in names:
        out = poison_(torch.empty(m, n, dtype=out_dtype, device="cuda"))
        quantgemm.mm(a, b, scales, g, out=out, schedule=name, token_scales=ts)
        torch.cuda.synchronize()
        check(a, ts, w_q, scales, g, out, name)


@requires_hopper
def test_every_schedule_across_zero_and_far_apart_group_scales():
    """Scales spread over eight orders of magnitude from group to group, some groups all zero: the wide
    tiles change their accumulators' units at every group (by up to 1e8, and past a zero scale)."""
    names = schedules()
    if not names:
        pytest.skip("no W4A8 kernels in this build")
    m, n, k = 200, 384, 2048
    a, ts, w_q, _ = gpu_problem(m, n, k, 128, torch.bfloat16, seed=11)
    scales = (10.0 ** (torch.rand(k // 128, n, device="cuda") * 8 - 6)).to(torch.bfloat16)
    scales[3] = 0
    scales[4:6, : n // 2] = 0
    scales[-1, n // 3:] = 0
    b = quantgemm.prepack_b(w_q, layout=E4M3)
    for name in names:
        out = poison_(torch.empty(m, n, dtype=torch.bfloat16, device="cuda"))
        quantgemm.mm(a, b, scales, 128, out=out, schedule=name, token_scales=ts)
        torch.cuda.synchronize()
        check(a, ts, w_q, scales, 128, out, name)


@requires_hopper
@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float16])
def test_every_schedule_on_activations_far_from_zero_mean(out_dtype):
    """The 8-token tiles sum the codes as 64 + q and subtract (64 + 8) times the activation's
    column sums per stage (docs/kernel.md): an activation whose mean dominates it makes that
    cancellation largest."""
    names = schedules(out_dtype)
    if not names:
        pytest.skip("no W4A8 kernels in this build")
    m, k = 8, 14336
    a, ts, w_q, scales = gpu_problem(m, 4096, k, 128, out_dtype, seed=17, mean=2.0, deviation=0.25)
    b = quantgemm.prepack_b(w_q, layout=E4M3)
    for name in names:
        out = poison_(torch.empty(m, 4096, dtype=out_dtype, device="cuda"))
        quantgemm.mm(a, b, scales, 128, out=out, schedule=name, token_scales=ts)
        torch.cuda.synchronize()
        check(a, ts, w_q, scales, 128, out, name)


@requires_hopper
@pytest.mark.parametrize("m", [1, 130])
def test_signed_int4_weights(m):
    """Signed int4 codes (-8..7) prepacked as s4: the weight is q * s."""
    if not schedules():
        pytest.skip("no W4A8 kernels in this build")
    a, ts, w_q, scales = gpu_problem(m, 1024, 2048, 128, torch.bfloat16, seed=m + 5)
    signed = (w_q.to(torch.int16) - 8).to(torch.int8)
    b = quantgemm.prepack_b(signed, "s4", layout=E4M3)
    assert b.weight_type == "u4b8"
    out = poison_(torch.empty(m, 1024, dtype=torch.bfloat16, device="cuda"))
    quantgemm.mm(a, b, scales, 128, out=out, token_scales=ts)
    ref = (a.float() * ts[:, None]) @ (signed.float() * scales.float().repeat_interleave(128, 0).T).T
    check(a, ts, w_q, scales, 128, out)
    torch.testing.assert_close(out.float(), ref, rtol=0, atol=3e-2 * ref.abs().max().item())


@requires_hopper
@pytest.mark.parametrize("m", [1, 8, 48, 200, 1024])
def test_dispatch_matches_the_reference_on_a_real_shape(m):
    if not schedules():
        pytest.skip("no W4A8 kernels in this build")
    a, ts, w_q, scales = gpu_problem(m, 6144, 4096, 128, torch.bfloat16, seed=m)
    cs = torch.rand(6144, device="cuda") + 0.5
    out = quantgemm.mm(a, quantgemm.prepack_b(w_q, layout=E4M3), scales, 128, token_scales=ts, channel_scales=cs)
    assert out.dtype == torch.bfloat16 and out.shape == (m, 6144)
    check(a, ts, w_q, scales, 128, out, cs=cs)


@requires_hopper
def test_strided_activations_empty_problems_and_graphs():
    if not schedules():
        pytest.skip("no W4A8 kernels in this build")
    a, ts, w_q, scales = gpu_problem(24, 512, 1024, 128, torch.bfloat16, seed=3)
    b = quantgemm.prepack_b(w_q, layout=E4M3)
    wide = torch.zeros(24, 1024 + 64, device="cuda").to(torch.float8_e4m3fn)
    wide[:, :1024] = a
    out = quantgemm.mm(wide[:, :1024], b, scales, 128, token_scales=ts)
    check(a, ts, w_q, scales, 128, out)
    assert quantgemm.mm(a[:0], b, scales, 128, token_scales=ts[:0]).shape == (0, 512)
    out = torch.empty(24, 512, dtype=torch.bfloat16, device="cuda")
    replay_in_graph(lambda: quantgemm.mm(a, b, scales, 128, out=out, token_scales=ts), out)
    check(a, ts, w_q, scales, 128, out)


def test_the_operator_on_the_cpu_is_the_reference_in_the_scales_dtype():
    a, b, s, g = cpu_problem(out_dtype=torch.float16)
    ts = torch.rand(a.shape[0]) + 0.5
    out = torch.ops.quantgemm.mm(a, b.data, b.n, b.k, b.weight_type, s, g, token_scales=ts, layout=E4M3)
    ref = reference.mm_quantized(a.float(), quantgemm.unpack_b(b), s, g, token_scales=ts, exact_weight=True)
    assert out.dtype == torch.float16 and torch.equal(out, ref.to(torch.float16))
