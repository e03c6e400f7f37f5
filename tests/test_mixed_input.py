"""quantgemm.mm (u4b8 x bf16, group scales): argument validation everywhere, and on a Hopper GPU
every schedule against the pure-torch reference on fresh random inputs with poisoned outputs."""

import functools

import pytest
import torch

import quantgemm
from quantgemm import mixed_input, reference
from quantgemm.quantize import QUANTIZERS
from quantgemm.testing import assert_gemm_close, mm_reference, poison_

from conftest import SUBSET_BUILD, requires_hopper

# ---------------------------------------------------------------- validation (no GPU needed)


def cpu_problem(m=4, n=128, k=128, g=64):
    w_q = torch.randint(0, 16, (n, k), dtype=torch.uint8)
    return (torch.randn(m, k, dtype=torch.bfloat16), quantgemm.prepack_b(w_q),
            torch.rand(k // g, n, dtype=torch.bfloat16), g)


def test_rejects_a_weight_that_is_not_prepacked():
    a, _, s, g = cpu_problem()
    with pytest.raises(TypeError, match="b must be a PrepackedWeight"):
        quantgemm.mm(a, torch.zeros(128, 64, dtype=torch.uint8), s, g)


@pytest.mark.parametrize("bad,match", [
    (lambda a: a.float(), "a must have dtype torch.bfloat16 or torch.float16"),
    (lambda a: a.half(), "group_scales must have dtype torch.float16"),
    (lambda a: a[None], "a must be 2-D"),
    (lambda a: a[:, :64], "a must have K=128"),
    (lambda a: [1, 2], "a must be a torch.Tensor"),
])
def test_rejects_bad_activations(bad, match):
    a, b, s, g = cpu_problem()
    with pytest.raises((TypeError, ValueError), match=match):
        quantgemm.mm(bad(a), b, s, g)


@pytest.mark.parametrize("g,match", [(96, "group_size must be -1 or a positive divisor"),
                                     (16, "group_size must be 32, a multiple of 64 or -1"),
                                     (0, "group_size must be -1 or a positive divisor"),
                                     (1.5, "group_size must be an int")])
def test_rejects_bad_group_size(g, match):
    a, b, s, _ = cpu_problem()
    with pytest.raises((TypeError, ValueError), match=match):
        quantgemm.mm(a, b, s, g)


@pytest.mark.parametrize("bad,match", [
    (lambda s: s.float(), "group_scales must have dtype torch.bfloat16"),
    (lambda s: s[:1], r"group_scales must have shape \(2, 128\)"),
    (lambda s: s.t().contiguous().t(), "group_scales must be contiguous"),
])
def test_rejects_bad_scales(bad, match):
    a, b, s, g = cpu_problem()
    with pytest.raises((TypeError, ValueError), match=match):
        quantgemm.mm(a, b, bad(s), g)


@pytest.mark.parametrize("kwargs,match", [
    (dict(channel_scales=torch.ones(128, dtype=torch.bfloat16)), "channel_scales must have dtype torch.float32"),
    (dict(channel_scales=torch.ones(64)), r"channel_scales must have shape \(128,\)"),
    (dict(token_scales=torch.ones(4, 1)), "token_scales must be 1-D"),
    (dict(token_scales=torch.ones(8)[::2]), "token_scales must be contiguous"),
])
def test_rejects_bad_channel_and_token_scales(kwargs, match):
    a, b, s, g = cpu_problem()
    with pytest.raises((TypeError, ValueError), match=match):
        quantgemm.mm(a, b, s, g, **kwargs)


def test_rejects_bad_out_and_schedule():
    a, b, s, g = cpu_problem()
    with pytest.raises(ValueError, match=r"out must have shape \(4, 128\)"):
        quantgemm.mm(a, b, s, g, out=torch.empty(4, 64, dtype=torch.bfloat16))
    with pytest.raises(TypeError, match="out must have dtype torch.bfloat16"):
        quantgemm.mm(a, b, s, g, out=torch.empty(4, 128, dtype=torch.float32))
    with pytest.raises(ValueError, match="schedule must be one of"):
        quantgemm.mm(a, b, s, g, schedule="no_such_schedule")


def test_zero_points_go_with_u4_weights_only():
    a, b, s, g = cpu_problem()
    with pytest.raises(ValueError, match="group_zeros must be None for a u4b8 weight"):
        quantgemm.mm(a, b, s, g, group_zeros=torch.zeros_like(s))
    u4 = quantgemm.prepack_b(quantgemm.unpack_b(b), weight_type="u4")
    with pytest.raises(ValueError, match="group_zeros must be given for a u4 weight"):
        quantgemm.mm(a, u4, s, g)
    with pytest.raises(ValueError, match=r"group_zeros must have shape \(2, 128\)"):
        quantgemm.mm(a, u4, s, g, group_zeros=s[:1])
    with pytest.raises(TypeError, match="group_zeros must have dtype torch.bfloat16"):
        quantgemm.mm(a, u4, s, g, group_zeros=s.float())
    with pytest.raises(ValueError, match="schedule must be one of"):
        quantgemm.mm(a, u4, s, g, group_zeros=s, schedule=quantgemm.supported_schedules()[0])


def test_rejects_cpu_activations():
    a, b, s, g = cpu_problem()
    with pytest.raises(ValueError, match="a must be a CUDA tensor"):
        quantgemm.mm(a, b, s, g)


def test_exact_weight_follows_the_kernel():
    # the mma.sync 8-token tiles and the sm80 / W4A8 layouts scale fp32 partial sums; the wgmma tiles round
    assert mixed_input.exact_weight(1, 4096, 4096, schedule="u4b8_bf16_256x8x128_c1x1x1")
    assert mixed_input.exact_weight(1, 4096, 4096, schedule="u4b8_bf16_128x8x128_c4x1x1")
    assert mixed_input.exact_weight(4, 4096, 4096, schedule="u8_g32_fp16_256x8x64_c1x1x1")
    assert not mixed_input.exact_weight(16, 4096, 4096, schedule="u4b8_bf16_256x16x128_c2x1x1")
    assert not mixed_input.exact_weight(64, 4096, 4096, schedule="u4b8_bf16_128x64x128_c1x1x1")
    assert mixed_input.exact_weight(64, 4096, 4096, layout="sm80", schedule="sm80_u4b8_bf16_256x32")
    with pytest.raises(ValueError, match="not an sm90 mixed-input schedule"):
        mixed_input.exact_weight(1, 4096, 4096, schedule="sm80_u4b8_bf16_256x8")


def test_schedules_are_listed_and_selectable():
    names = quantgemm.supported_schedules()
    assert names and len(set(names)) == len(names)
    for m in (1, 16, 64, 4096):
        assert quantgemm.select_schedule(m, 4096, 4096) in names


# ---------------------------------------------------------------- on the GPU

M_VALUES = (1, 7, 16, 33, 64, 128, 257, 1024)
SHAPES = ((256, 128), (384, 256), (4096, 4096), (28672, 8192), (8192, 28672))


@functools.lru_cache(maxsize=None)
def gpu_weight(n, k, g):
    """A real (Gaussian) weight, quantized and prepacked; cached across tests of one shape."""
    gen = torch.Generator(device="cuda").manual_seed(n * 7 + k + g)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16, generator=gen) / k ** 0.5
    w_q, scales = quantgemm.quantize_u4b8(w, g)
    w_deq = reference.dequantize_u4b8(w_q, scales, g)
    return w_q, scales, quantgemm.prepack_b(w_q), w_deq.abs().max().item()


def check_mm(m, n, k, g, schedule=None, a=None, out=None):
    w_q, scales, b, w_max = gpu_weight(n, k, g)
    if a is None:
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    if out is None:
        out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    poison_(out)
    got = quantgemm.mm(a, b, scales, g, out=out, schedule=schedule)
    assert got.data_ptr() == out.data_ptr()
    ref = mm_reference(a, w_q, scales, g, schedule=schedule)
    assert_gemm_close(got, ref, k, a.abs().max().item(), w_max)


@requires_hopper
@pytest.mark.parametrize("n,k", [(256, 128), (4096, 4096), (200, 72)])
def test_gpu_prepack_equals_host_reference(n, k):
    codes = torch.randint(0, 16, (n, k), dtype=torch.uint8)
    host = quantgemm.prepack_b(codes)
    gpu = quantgemm.prepack_b(codes.cuda())
    assert gpu.data.is_cuda
    assert torch.equal(gpu.data.cpu(), host.data)
    codes8 = torch.randint(0, 256, (n, k), dtype=torch.uint8)
    assert torch.equal(quantgemm.prepack_b(codes8.cuda(), "u8b128").data.cpu(), quantgemm.prepack_b(codes8, "u8b128").data)


@requires_hopper
@pytest.mark.parametrize("schedule", quantgemm.supported_schedules())
@pytest.mark.parametrize("n,k", SHAPES)
@pytest.mark.parametrize("m", M_VALUES)
def test_mm_matches_reference(m, n, k, schedule):
    check_mm(m, n, k, 128, schedule)


@requires_hopper
@pytest.mark.parametrize("schedule", quantgemm.supported_schedules())
@pytest.mark.parametrize("g", [64, -1])
def test_mm_odd_number_of_k_blocks(schedule, g):
    # K = 5 x 64: a 128-deep stage ends half past K
    for m in (1, 19):
        check_mm(m, 384, 320, g, schedule)


@requires_hopper
@pytest.mark.parametrize("schedule", quantgemm.supported_schedules())
@pytest.mark.parametrize("n,k,g", [(136, 72, -1), (200, 320, 64)])
def test_mm_partial_blocks(schedule, n, k, g):
    # N and K off the 128 x 64 blocks: the weight is padded at prepack time, the scales are not
    for m in (1, 37):
        check_mm(m, n, k, g, schedule)


@requires_hopper
@pytest.mark.parametrize("n,k,g", [(576, 7168, 128), (4104, 4104, -1)])
@pytest.mark.parametrize("m", [1, 16, 64, 300])
def test_mm_heuristic_on_partial_blocks(m, n, k, g):
    check_mm(m, n, k, g)


@requires_hopper
@pytest.mark.parametrize("m", M_VALUES)
def test_mm_heuristic_matches_reference(m):
    check_mm(m, 28672, 8192, 128)


@requires_hopper
@pytest.mark.parametrize("g", [64, 256, -1])
def test_mm_other_group_sizes(g):
    for m in (1, 33, 300):
        check_mm(m, 1024, 2048, g)


@requires_hopper
@pytest.mark.parametrize("m,schedule", [(1, None), (33, None), (300, None), (16, "u4b8_bf16_256x16x128_c1x1x1"),
                                        (200, "u4b8_bf16_128x256x64_c1x1x1")])
def test_mm_channel_and_token_scales(m, schedule):
    n, k, g = 1152, 2048, 128
    if schedule is not None and schedule not in quantgemm.supported_schedules():
        pytest.skip(f"{schedule} is not compiled")
    w_q, scales, b, w_max = gpu_weight(n, k, g)
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    cs = torch.rand(n, device="cuda") + 0.5
    ts = torch.rand(m, device="cuda") * 4
    out = poison_(torch.empty(m, n, device="cuda", dtype=torch.bfloat16))
    quantgemm.mm(a, b, scales, g, out=out, schedule=schedule, channel_scales=cs, token_scales=ts)
    ref = mm_reference(a, w_q, scales, g, channel_scales=cs, token_scales=ts, schedule=schedule)
    assert_gemm_close(out, ref, k, a.abs().max().item() * ts.max().item(), w_max * cs.max().item())
    only_channel = quantgemm.mm(a, b, scales, g, schedule=schedule, channel_scales=cs)
    ref = mm_reference(a, w_q, scales, g, channel_scales=cs, schedule=schedule)
    assert_gemm_close(only_channel, ref, k, a.abs().max().item(), w_max * cs.max().item())


@requires_hopper
def test_mm_honours_strides():
    n, k = 4096, 4096
    big = torch.randn(70, k + 64, device="cuda", dtype=torch.bfloat16)
    check_mm(64, n, k, 128, a=big[3:67, 32:32 + k])  # row slice with a padded leading dimension
    wide = torch.empty(40, n + 256, device="cuda", dtype=torch.bfloat16)
    check_mm(40, n, k, 128, out=wide[:, 128:128 + n])


@requires_hopper
def test_mm_m_zero_and_fresh_output():
    _, scales, b, _ = gpu_weight(256, 128, 128)
    a = torch.empty(0, 128, device="cuda", dtype=torch.bfloat16)
    out = quantgemm.mm(a, b, scales, 128)
    assert out.shape == (0, 256) and out.dtype == torch.bfloat16
    a = torch.randn(3, 128, device="cuda", dtype=torch.bfloat16)
    assert quantgemm.mm(a, b, scales, 128).shape == (3, 256)


@requires_hopper
def test_mm_repeated_calls_are_deterministic():
    w_q, scales, b, _ = gpu_weight(4096, 4096, 128)
    a = torch.randn(5, 4096, device="cuda", dtype=torch.bfloat16)
    first = quantgemm.mm(a, b, scales, 128)
    for _ in range(3):
        assert torch.equal(quantgemm.mm(a, b, scales, 128), first)


CHAIN_GROUPS = (128, 64, 256, -1)  # one 4096 x 4096 layer per group size


@functools.lru_cache(maxsize=None)
def gpu_weight_u4(n, k, g):
    """A Gaussian weight quantized with zero points (u4) and prepacked; cached across tests of one shape."""
    gen = torch.Generator(device="cuda").manual_seed(n * 5 + k + g)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16, generator=gen) / k ** 0.5 + 0.01
    w_q, scales, zeros = quantgemm.quantize_u4(w, g)
    w_deq = reference.dequantize_u4(w_q, scales, zeros, g)
    return w_q, scales, zeros, quantgemm.prepack_b(w_q, "u4"), w_deq.abs().max().item()


def check_mm_u4(m, n, k, g, schedule=None):
    w_q, scales, zeros, b, w_max = gpu_weight_u4(n, k, g)
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    out = poison_(torch.empty(m, n, device="cuda", dtype=torch.bfloat16))
    got = quantgemm.mm(a, b, scales, g, out=out, schedule=schedule, group_zeros=zeros)
    ref = mm_reference(a, w_q, scales, g, zeros, weight_type="u4", schedule=schedule)
    assert_gemm_close(got, ref, k, a.abs().max().item(), w_max)


@requires_hopper
@pytest.mark.parametrize("schedule", quantgemm.supported_schedules("u4"))
@pytest.mark.parametrize("n,k,g", [(384, 320, 64), (4096, 4096, 128), (200, 328, -1)])
def test_mm_u4_matches_reference(schedule, n, k, g):
    assert schedule.startswith("u4_bf16_")
    for m in (1, 37, 130):
        check_mm_u4(m, n, k, g, schedule)


@requires_hopper
@pytest.mark.parametrize("m", M_VALUES)
def test_mm_u4_heuristic_matches_reference(m):
    built_schedules("u4", torch.bfloat16)
    check_mm_u4(m, 28672, 8192, 128)


@functools.lru_cache(maxsize=None)
def gpu_weight_fp16(n, k, g, weight_type):
    """A Gaussian weight quantized with fp16 scales (and zero points for u4), prepacked."""
    gen = torch.Generator(device="cuda").manual_seed(n * 3 + k + g)
    w = torch.randn(n, k, device="cuda", dtype=torch.float16, generator=gen) / k ** 0.5 + 0.01
    if weight_type == "u4":
        w_q, scales, zeros = quantgemm.quantize_u4(w, g)
        w_deq = reference.dequantize_u4(w_q, scales, zeros, g)
    else:
        (w_q, scales), zeros = quantgemm.quantize_u4b8(w, g), None
        w_deq = reference.dequantize_u4b8(w_q, scales, g)
    return w_q, scales, zeros, quantgemm.prepack_b(w_q, weight_type), w_deq.abs().max().item()


def check_mm_fp16(m, n, k, g, weight_type, schedule=None):
    w_q, scales, zeros, b, w_max = gpu_weight_fp16(n, k, g, weight_type)
    assert scales.dtype == torch.float16
    a = torch.randn(m, k, device="cuda", dtype=torch.float16)
    out = poison_(torch.empty(m, n, device="cuda", dtype=torch.float16))
    got = quantgemm.mm(a, b, scales, g, out=out, schedule=schedule, group_zeros=zeros)
    ref = mm_reference(a, w_q, scales, g, zeros, weight_type=weight_type, schedule=schedule)
    assert_gemm_close(got, ref, k, a.abs().max().item(), w_max)


@requires_hopper
@pytest.mark.parametrize("weight_type", ["u4b8", "u4"])
@pytest.mark.parametrize("n,k,g", [(384, 320, 64), (4096, 4096, 128)])
def test_mm_fp16_matches_reference(weight_type, n, k, g):
    for schedule in quantgemm.supported_schedules(weight_type, torch.float16):
        assert "_fp16_" in schedule
        for m in (1, 37, 130):
            check_mm_fp16(m, n, k, g, weight_type, schedule)


@requires_hopper
@pytest.mark.parametrize("weight_type", ["u4b8", "u4"])
@pytest.mark.parametrize("m", [1, 16, 64, 257])
def test_mm_fp16_heuristic_matches_reference(weight_type, m):
    built_schedules(weight_type, torch.float16)
    check_mm_fp16(m, 28672, 8192, 128, weight_type)


EIGHT_BIT = [("u8b128", torch.bfloat16), ("u8", torch.bfloat16), ("u8b128", torch.float16), ("u8", torch.float16)]


def check_mm_typed(m, n, k, g, weight_type, dtype, schedule=None, a=None):
    """mm of any weight type and activation dtype against the reference, on a fresh weight (and a
    fresh Gaussian activation unless `a` is given)."""
    gen = torch.Generator(device="cuda").manual_seed(n * 11 + k + g)
    w = torch.randn(n, k, device="cuda", dtype=dtype, generator=gen) / k ** 0.5 + 0.01
    w_q, scales, *zeros = QUANTIZERS[weight_type](w, g)
    zeros = zeros[0] if zeros else None
    zero_point = mixed_input.ZERO_POINTS[weight_type]
    w_max = reference._dequantize(w_q, scales, zeros, g, zero_point).abs().max().item()
    if a is None:
        a = torch.randn(m, k, device="cuda", dtype=dtype)
    out = poison_(torch.empty(m, n, device="cuda", dtype=dtype))
    got = quantgemm.mm(a, quantgemm.prepack_b(w_q, weight_type), scales, g, out=out, schedule=schedule,
                       group_zeros=zeros)
    ref = mm_reference(a, w_q, scales, g, zeros, weight_type=weight_type, schedule=schedule)
    assert_gemm_close(got, ref, k, a.abs().max().item(), w_max)


def built_schedules(weight_type, dtype, group_size=128):
    """The compiled schedules of a family; a (subset) build without them skips the test."""
    schedules = quantgemm.supported_schedules(weight_type, dtype, group_size=group_size)
    if not schedules:
        pytest.skip(f"no {weight_type} x {dtype} kernels for groups of {group_size} in this (subset) build")
    return schedules


@requires_hopper
@pytest.mark.parametrize("weight_type,dtype", [("u4b8", torch.bfloat16), ("u4", torch.bfloat16),
                                               ("u4b8", torch.float16), ("u4", torch.float16),
                                               ("u8b128", torch.float16), ("u8", torch.float16)])
def test_8_token_tiles_on_activations_far_from_zero_mean(weight_type, dtype):
    # the 8-token tiles sum biased codes (bf16 128 + q, fp16 64 + q or 1024 + q) times the
    # activation and subtract the bias times its column sums per group (docs/kernel.md): an
    # activation whose mean dominates it makes that cancellation largest
    tiles = [s for s in built_schedules(weight_type, dtype) if mixed_input.exact_weight(1, 1, 1, schedule=s)]
    if not tiles:
        pytest.skip("no 8-token tiles in this build")
    k = 14336
    a = torch.randn(8, k, device="cuda", dtype=dtype) * 0.25 + 2.0
    for schedule in tiles:
        check_mm_typed(8, 4096, k, 128, weight_type, dtype, schedule=schedule, a=a)


@requires_hopper
@pytest.mark.parametrize("weight_type,dtype", EIGHT_BIT)
@pytest.mark.parametrize("n,k,g", [(384, 320, 64), (200, 328, -1), (4096, 4096, 128)])
def test_mm_8bit_every_schedule_matches_reference(weight_type, dtype, n, k, g):
    for schedule in built_schedules(weight_type, dtype):
        for m in (1, 37, 130):
            check_mm_typed(m, n, k, g, weight_type, dtype, schedule)


@requires_hopper
@pytest.mark.parametrize("weight_type,dtype", EIGHT_BIT)
@pytest.mark.parametrize("m", [1, 16, 64, 257])
def test_mm_8bit_heuristic_matches_reference(weight_type, dtype, m):
    built_schedules(weight_type, dtype)
    check_mm_typed(m, 28672, 8192, 128, weight_type, dtype)


def run_chain(x, layers, outs):
    """outs[i] = mm(outs[i - 1], layer i), x feeding the first: each call reads what the one before wrote."""
    for g, (_, scales, b, _), out in zip(CHAIN_GROUPS, layers, outs):
        quantgemm.mm(x, b, scales, g, out=out)
        x = out


def check_chain(x, layers, outs):
    for g, (w_q, scales, _, w_max), a, out in zip(CHAIN_GROUPS, layers, [x] + outs[:-1], outs):
        assert_gemm_close(out, mm_reference(a, w_q, scales, g), a.shape[1], a.abs().max().item(), w_max)


@requires_hopper
@pytest.mark.parametrize("m", [1, 64])
def test_mm_back_to_back_calls_read_each_others_output(m):
    # launches overlap (programmatic dependent launch): each must still read the finished output of
    # the one before it, eagerly and in a replayed CUDA graph, with stream-K splits (M = 1)
    layers = [gpu_weight(4096, 4096, g) for g in CHAIN_GROUPS]
    x = torch.randn(m, 4096, device="cuda", dtype=torch.bfloat16)
    outs = [poison_(torch.empty(m, 4096, device="cuda", dtype=torch.bfloat16)) for _ in layers]
    run_chain(x, layers, outs)
    check_chain(x, layers, outs)

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream):
        run_chain(x, layers, outs)  # the capturing stream's workspace
        with torch.cuda.graph(graph, stream=stream):
            run_chain(x, layers, outs)
    torch.cuda.current_stream().wait_stream(stream)
    for out in outs:
        poison_(out)
    x.copy_(torch.randn_like(x))
    graph.replay()
    torch.cuda.synchronize()
    check_chain(x, layers, outs)


@requires_hopper
def test_mm_rejects_misaligned_and_foreign_inputs():
    _, scales, b, _ = gpu_weight(256, 128, 128)
    a = torch.randn(4, 128, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="a must have unit stride"):
        quantgemm.mm(torch.randn(128, 4, device="cuda", dtype=torch.bfloat16).t(), b, scales, 128)
    odd = torch.randn(4 * 129 + 1, device="cuda", dtype=torch.bfloat16)[1:].view(4, 129)[:, :128]
    with pytest.raises(ValueError, match="a must have a row stride"):
        quantgemm.mm(odd, b, scales, 128)
    with pytest.raises(ValueError, match="group_scales must be on cuda"):
        quantgemm.mm(a, b, scales.cpu(), 128)
    with pytest.raises(ValueError, match="b must be on cuda"):
        quantgemm.mm(a, b.to("cpu"), scales, 128)


def test_compiled_dispatch_matches_the_rules():
    from codegen.schedules import U4B8_BF16
    from test_codegen import M_BUCKETS, SHAPES as LAYER_SHAPES
    built = set(quantgemm.supported_schedules())
    for n, k in LAYER_SHAPES:
        for m in M_BUCKETS:
            want = U4B8_BF16.select(m, n, k).name(U4B8_BF16.name)
            if want in built:  # a subset build falls back to what it has
                assert quantgemm.select_schedule(m, n, k) == want, (m, n, k)


def test_explain_names_the_pick_its_rule_and_every_refusal():
    from codegen.schedules import U4B8_BF16
    e = quantgemm.explain(1, 28672, 8192)
    assert e.schedule == quantgemm.select_schedule(1, 28672, 8192) and not e.refused
    built = set(quantgemm.supported_schedules())
    rule = next(r for r in U4B8_BF16.rules if r.admits(1, 28672, 8192) and r.schedule.name(U4B8_BF16.name) in built)
    if rule.m_max is not None and not SUBSET_BUILD:  # (a subset build's last rule kept admits any problem)
        assert f"M <= {rule.m_max}" in e.rule
    assert e.schedules[e.schedule] == "picked" and set(e.schedules) == built
    assert e.schedule in str(e)
    bad = quantgemm.explain(4, 204, 100, group_size=96)
    assert bad.schedule is None
    assert any("N=204" in r for r in bad.refused) and any("K=100" in r for r in bad.refused)
    assert all(why.startswith("cannot") for why in bad.schedules.values())
    assert quantgemm.explain(0, 256, 128).notes and quantgemm.explain(0, 256, 128).schedule is None
    named = quantgemm.explain(16, 4096, 4096, schedule=sorted(built)[0])
    assert named.schedule == sorted(built)[0] and named.rule == "named by the caller"
    assert quantgemm.explain(16, 4096, 4096, schedule="nope").refused


def test_a_family_left_out_of_the_build_is_named():
    if quantgemm.supported_schedules("u8b128"):
        pytest.skip("this build has the u8b128 kernels (a default build)")
    assert "this build has no u8b128_bf16 kernels" in quantgemm.explain(2, 128, 64, -1, weight_type="u8b128").refused[0]


@requires_hopper
def test_mm_names_a_family_left_out_of_the_build():
    if quantgemm.supported_schedules("u8b128"):
        pytest.skip("this build has the u8b128 kernels (a default build)")
    b = quantgemm.prepack_b(torch.randint(0, 256, (128, 64), dtype=torch.uint8, device="cuda"), "u8b128")
    scales = torch.ones(1, 128, dtype=torch.bfloat16, device="cuda")
    with pytest.raises(ValueError, match="this build has no u8b128_bf16 kernels"):
        quantgemm.mm(torch.randn(2, 64, dtype=torch.bfloat16, device="cuda"), b, scales, -1)


TYPES = [(w, d) for d in (torch.bfloat16, torch.float16) for w in mixed_input.WEIGHT_TYPES]


@requires_hopper
@pytest.mark.parametrize("weight_type,dtype", TYPES)
@pytest.mark.parametrize("n,k", [(384, 320), (200, 96), (4096, 4096)])
def test_mm_group_32_every_schedule_matches_reference(weight_type, dtype, n, k):
    # (K = 96: the last 64-deep block holds one group, its second scale row falls past the scales)
    schedules = built_schedules(weight_type, dtype, group_size=32)
    assert all("_g32_" in s for s in schedules)
    for schedule in schedules:
        for m in (1, 37, 130):
            check_mm_typed(m, n, k, 32, weight_type, dtype, schedule)


@requires_hopper
@pytest.mark.parametrize("weight_type,dtype", TYPES)
@pytest.mark.parametrize("m", [1, 16, 64, 257])
def test_mm_group_32_heuristic_matches_reference(weight_type, dtype, m):
    built_schedules(weight_type, dtype, group_size=32)
    assert "_g32_" in quantgemm.select_schedule(m, 8192, 4096, weight_type, dtype, group_size=32)
    check_mm_typed(m, 8192, 4096, 32, weight_type, dtype)


def test_group_32_has_kernels_of_its_own():
    built_schedules("u4b8", torch.bfloat16, group_size=32)  # (skips without them)
    built_schedules("u4b8", torch.bfloat16)
    e = quantgemm.explain(16, 4096, 4096, group_size=32)
    assert not e.refused and all("_g32_" in name for name in e.schedules)
    assert not any("_g32_" in name for name in quantgemm.explain(16, 4096, 4096, group_size=64).schedules)
    one_group = quantgemm.explain(16, 4096, 32, group_size=32)  # K = 32: one group, the usual kernels
    assert not one_group.refused and not any("_g32_" in name for name in one_group.schedules)
    with pytest.raises(ValueError, match="schedule must be one of"):
        a, b, s, _ = cpu_problem()
        quantgemm.mm(a, b, s.repeat_interleave(2, 0), 32, schedule=quantgemm.supported_schedules()[0])
