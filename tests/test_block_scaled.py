"""quantgemm.block_scaled_mm (FP8 with 1 x 128 activation and 128 x 128 weight scales): validation,
the quantizers and the reference everywhere; on a Hopper GPU the heuristic and every schedule
against the reference (fresh random inputs, poisoned outputs), over the DeepSeek-V3 shapes."""

import pytest
import torch

import quantgemm
from quantgemm import block_scaled, reference
from quantgemm.quantize import quantize_fp8_blocks, quantize_fp8_groups
from quantgemm.testing import assert_gemm_close, poison_, replay_in_graph

from conftest import requires_hopper

FP8 = torch.float8_e4m3fn

#: (N, K) of DeepSeek-V3's dense layers
DEEPSEEK_V3 = [(2112, 7168), (24576, 1536), (32768, 512), (7168, 16384), (4096, 7168), (7168, 2048), (576, 7168)]


def calc_diff(x: torch.Tensor, y: torch.Tensor) -> float:
    """1 - 2 sum(x y) / sum(x^2 + y^2): 0 for equal tensors, scale-free."""
    x, y = x.double(), y.double()
    return (1 - 2 * (x * y).sum() / (x * x + y * y).sum()).item()


def problem(m, n, k, device="cpu", seed=0):
    torch.manual_seed(seed)
    x = torch.randn(m, k, device=device)
    w = torch.randn(n, k, device=device) / k ** 0.5
    # scales that differ from block to block, so that a misplaced scale shows
    x = x * torch.rand(m, (k + 127) // 128, device=device).repeat_interleave(128, dim=1)[:, :k].add(0.5)
    a, sa = quantize_fp8_groups(x)
    b, sb = quantize_fp8_blocks(w)
    return a, sa, b, sb


def check(out, a, sa, b, sb):
    ref = reference.block_scaled_mm(a, sa, b, sb)
    assert calc_diff(out.float(), ref) < 1e-3
    a_max = reference.dequantize_blocks(a, sa, 1, 128).abs().max().item()
    w_max = reference.dequantize_blocks(b, sb, 128, 128).abs().max().item()
    assert_gemm_close(out, ref, a.shape[1], a_max, w_max, fp8_chunk=128)


# ---------------------------------------------------------------- CPU: validation, quantizers, reference


@pytest.mark.parametrize("change,error,match", [
    (lambda a, sa, b, sb: (a.float(), sa, b, sb), TypeError, "a must have dtype torch.float8_e4m3fn"),
    (lambda a, sa, b, sb: (a, sa, b.to(torch.int8), sb), TypeError, "b must have dtype torch.float8_e4m3fn"),
    (lambda a, sa, b, sb: (a[None], sa, b, sb), ValueError, "a must be 2-D"),
    (lambda a, sa, b, sb: (a, sa, b[:, :128], sb), ValueError, r"b must be the \[N, K\] weight with K=300"),
    (lambda a, sa, b, sb: (a, sa.double(), b, sb), TypeError, "a_scales must have dtype torch.float32"),
    (lambda a, sa, b, sb: (a, sa[:, :2], b, sb), ValueError, r"a_scales must have shape \(5, 3\)"),
    (lambda a, sa, b, sb: (a, sa.t(), b, sb), ValueError, r"a_scales must have shape \(5, 3\)"),
    (lambda a, sa, b, sb: (a, sa, b, sb[:1]), ValueError, r"b_scales must have shape \(2, 3\)"),
    (lambda a, sa, b, sb: (a, sa, b, sb.reshape(-1)), ValueError, "b_scales must be 2-D"),
])
def test_rejects_bad_operands_and_scales(change, error, match):
    with pytest.raises(error, match=match):
        quantgemm.block_scaled_mm(*change(*problem(5, 200, 300)))


def test_rejects_bad_out_and_cpu_tensors():
    a, sa, b, sb = problem(5, 200, 300)
    with pytest.raises(TypeError, match="out must have dtype torch.bfloat16"):
        quantgemm.block_scaled_mm(a, sa, b, sb, out=torch.empty(5, 200))
    with pytest.raises(ValueError, match=r"out must have shape \(5, 200\)"):
        quantgemm.block_scaled_mm(a, sa, b, sb, out=torch.empty(5, 201, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match="a must be a CUDA tensor"):
        quantgemm.block_scaled_mm(a, sa, b, sb)


@pytest.mark.parametrize("rows,cols,block", [(3, 300, (1, 128)), (200, 300, (128, 128)), (128, 256, (128, 128))])
def test_fp8_block_quantizers_round_trip(rows, cols, block):
    torch.manual_seed(1)
    x = torch.randn(rows, cols) * torch.logspace(-3, 3, cols)  # blocks of very different magnitude
    if block == (1, 128):
        q, s = quantize_fp8_groups(x)
    else:
        q, s = quantize_fp8_blocks(x)
    assert q.dtype == FP8 and q.shape == x.shape and s.dtype == torch.float32
    assert s.shape == (-(-rows // block[0]), -(-cols // block[1])) and s.is_contiguous()
    deq = reference.dequantize_blocks(q, s, *block)
    scale = s.repeat_interleave(block[0], 0)[:rows].repeat_interleave(block[1], 1)[:, :cols]
    # e4m3 keeps 3 mantissa bits: half a step is 2^-4 relative, and 2^-9 of the scale near zero
    assert ((deq - x).abs() <= x.abs() * 2 ** -4 + scale * 2 ** -9 * 448 / 448).all()
    # each block's largest value maps to 448 exactly
    blocks = q.float().abs()
    assert blocks.max().item() == 448.0


def test_quantizers_keep_an_all_zero_block_finite():
    q, s = quantize_fp8_groups(torch.zeros(2, 256))
    assert torch.isfinite(s).all() and (q.float() == 0).all()


def test_reference_is_the_blockwise_sum():
    """The reference (dequantize, then one matmul) against the kernel's formula: per 128-wide k block,
    the e4m3 dot product times both scales, summed in float64."""
    a, sa, b, sb = problem(3, 260, 300)
    want = torch.zeros(3, 260, dtype=torch.float64)
    for kb in range(3):
        ks = slice(128 * kb, 128 * (kb + 1))
        part = a[:, ks].double() @ b[:, ks].double().t()
        want += part * sa[:, kb:kb + 1].double() * sb[:, kb].double().repeat_interleave(128)[:260][None]
    got = reference.block_scaled_mm(a, sa, b, sb)
    assert torch.allclose(got.double(), want, rtol=1e-5, atol=1e-5)


def test_block_scales_row_major_copies_only_other_layouts():
    s = torch.rand(4, 3)
    assert block_scaled.block_scales_row_major(s) is s
    column_major = torch.rand(3, 4).t()  # DeepGEMM's layout
    converted = block_scaled.block_scales_row_major(column_major)
    assert converted.is_contiguous() and torch.equal(converted, column_major)


@pytest.mark.parametrize("tiles,k,want", [
    (17, 7168, 7),     # 2112 x 7168 on 128-row tiles: 56 blocks, at most 7 slices in 132 CTAs
    (5, 7168, 14),     # 576 x 7168: 70 CTAs (28 slices would need 140)
    (56, 2048, 2),     # 7168 x 2048
    (1, 1536, 12),     # one tile: a slice a block
    (132, 7168, 1),    # the tiles fill the GPU alone
    (17, 7000, 1),     # K not whole 128-wide blocks
    (3, 128, 1),       # one block
])
def test_split_k_slices_divide_k_blocks_within_one_wave(tiles, k, want):
    from quantgemm._native import native

    assert native().block_scaled_splits(tiles, k, 132) == want


def test_op_is_the_reference_on_cpu_and_passes_opcheck():
    args = problem(5, 200, 300)
    got = torch.ops.quantgemm.block_scaled_mm(*args)
    assert torch.equal(got, reference.block_scaled_mm(*args).to(torch.bfloat16))
    # (torch's schema check needs arithmetic that float8 lacks on the CPU, as for scaled_mm)
    torch.library.opcheck(torch.ops.quantgemm.block_scaled_mm.default, args,
                          test_utils=("test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic"))


def test_quantizer_ops_pass_opcheck():
    x = torch.randn(5, 300)
    torch.library.opcheck(torch.ops.quantgemm.quantize_fp8_groups.default, (x, 128),
                          test_utils=("test_autograd_registration", "test_faketensor"))
    torch.library.opcheck(torch.ops.quantgemm.quantize_fp8_blocks.default, (x, 128),
                          test_utils=("test_autograd_registration", "test_faketensor"))
    torch.library.opcheck(torch.ops.quantgemm.quantize_fp8.default, (x, True),
                          test_utils=("test_autograd_registration", "test_faketensor"))
    torch.library.opcheck(torch.ops.quantgemm.quantize_int8.default, (x, False))


# ---------------------------------------------------------------- GPU


@requires_hopper
@pytest.mark.parametrize("n,k", DEEPSEEK_V3)
@pytest.mark.parametrize("m", [1, 3, 64, 65, 128, 1026, 4096])
def test_deepseek_v3_shapes_match_reference(m, n, k):
    a, sa, b, sb = problem(m, n, k, "cuda", seed=m)
    out = poison_(torch.empty(m, n, device="cuda", dtype=torch.bfloat16))
    quantgemm.block_scaled_mm(a, sa, b, sb, out=out)
    check(out, a, sa, b, sb)


def _every_schedule():
    try:
        return block_scaled.supported_schedules() if torch.cuda.is_available() else []
    except (ImportError, ValueError):  # no extension, or a build without the family
        return []


@requires_hopper
@pytest.mark.parametrize("schedule", _every_schedule())
@pytest.mark.parametrize("m,n,k", [(1, 576, 7168), (65, 2112, 1536), (257, 1000, 520)])
def test_every_schedule_matches_reference(schedule, m, n, k):
    a, sa, b, sb = problem(m, n, k, "cuda", seed=3)
    out = poison_(torch.empty(m, n, device="cuda", dtype=torch.bfloat16))
    quantgemm.block_scaled_mm(a, sa, b, sb, out=out, schedule=schedule)
    check(out, a, sa, b, sb)


@requires_hopper
@pytest.mark.parametrize("schedule", [s for s in _every_schedule() if s.endswith("_splitk")])
def test_split_k_honours_strides_and_replays_in_a_graph(schedule):
    """The slices' operand and scale strides with a row-sliced activation, column-major activation
    scales and a padded output, bit for bit the same in a CUDA graph (the slices sum in order)."""
    m, n, k = 40, 2112, 7168
    a, sa, b, sb = problem(m, n, k, "cuda", seed=5)
    wide = torch.zeros(m, k + 128, device="cuda").to(FP8)
    wide[:, :k] = a
    out_wide = poison_(torch.empty(m, n + 8, device="cuda", dtype=torch.bfloat16))
    quantgemm.block_scaled_mm(wide[:, :k], sa.t().contiguous().t(), b, sb, out=out_wide[:, :n], schedule=schedule)
    check(out_wide[:, :n], a, sa, b, sb)
    assert out_wide[:, n:].isnan().all()
    out = poison_(torch.empty(m, n, device="cuda", dtype=torch.bfloat16))
    assert torch.equal(replay_in_graph(lambda: quantgemm.block_scaled_mm(a, sa, b, sb, out=out, schedule=schedule),
                                       out), out_wide[:, :n])


@requires_hopper
@pytest.mark.parametrize("m,n,k", [(5, 100, 200), (33, 2112, 7000), (7, 24, 40)])
def test_unaligned_shapes_are_padded(m, n, k):
    a, sa, b, sb = problem(m, n, k, "cuda")
    out = poison_(torch.empty(m, n, device="cuda", dtype=torch.bfloat16))
    quantgemm.block_scaled_mm(a, sa, b, sb, out=out)
    check(out, a, sa, b, sb)


@requires_hopper
def test_honours_strides_and_scale_layouts():
    a, sa, b, sb = problem(70, 2112, 1024, "cuda")
    wide = torch.zeros(70, 1024 + 64, device="cuda").to(FP8)
    wide[:, :1024] = a
    out_wide = poison_(torch.empty(70, 2112 + 8, device="cuda", dtype=torch.bfloat16))
    column_major_sa = sa.t().contiguous().t()  # DeepGEMM's layout
    quantgemm.block_scaled_mm(wide[:, :1024], column_major_sa, b, sb, out=out_wide[:, :2112])
    check(out_wide[:, :2112], a, sa, b, sb)
    assert out_wide[:, 2112:].isnan().all()
    with pytest.raises(ValueError, match="a must have unit stride along its last dimension"):
        quantgemm.block_scaled_mm(a.t().contiguous().t(), sa, b, sb)


@requires_hopper
def test_m_zero_returns_empty():
    a, sa, b, sb = problem(0, 576, 7168, "cuda")
    out = quantgemm.block_scaled_mm(a, sa, b, sb)
    assert out.shape == (0, 576) and out.dtype == torch.bfloat16


@requires_hopper
def test_cuda_graph_on_a_side_stream_and_compile():
    a, sa, b, sb = problem(8, 2112, 7168, "cuda")
    eager = quantgemm.block_scaled_mm(a, sa, b, sb)
    out = torch.empty_like(eager)
    assert torch.equal(replay_in_graph(lambda: quantgemm.block_scaled_mm(a, sa, b, sb, out=out), out), eager)
    fn = torch.compile(lambda x, w, sw: torch.ops.quantgemm.block_scaled_mm(
        *torch.ops.quantgemm.quantize_fp8_groups(x, 128), w, sw), fullgraph=True)
    x = torch.randn(8, 7168, device="cuda")
    want = quantgemm.block_scaled_mm(*quantize_fp8_groups(x), b, sb)
    assert torch.equal(fn(x, b, sb), want)


@requires_hopper
@pytest.mark.parametrize("schedule", [None] + [s for s in _every_schedule() if s.endswith("_splitk")][:1])
def test_each_call_reads_what_the_kernel_before_it_wrote(schedule):
    """Programmatic dependent launch: quantizer, GEMM (and its split-K reduction), quantizer...,
    each reading what the kernel before it wrote, launched back to back, against the same chain with
    the host waiting after every call."""
    torch.manual_seed(0)
    n = 2048
    weights = [quantize_fp8_blocks(torch.randn(n, n, device="cuda") / n ** 0.5) for _ in range(4)]
    x0 = torch.randn(16, n, device="cuda")

    def chain(wait):
        x = x0
        for b, sb in weights:
            a, sa = quantize_fp8_groups(x)
            wait()
            x = quantgemm.block_scaled_mm(a, sa, b, sb, schedule=schedule)
            wait()
        return x

    assert torch.equal(chain(lambda: None), chain(torch.cuda.synchronize))


@requires_hopper
def test_quantized_linear_is_close_to_fp32():
    x = torch.randn(64, 7168, device="cuda")
    w = torch.randn(2112, 7168, device="cuda") / 85
    out = quantgemm.block_scaled_mm(*quantize_fp8_groups(x), *quantize_fp8_blocks(w))
    want = x @ w.t()
    assert calc_diff(out.float(), want) < 1e-3
