"""quantgemm.scaled_mm / scaled_mm_azp (W8A8, FP8 e4m3 and INT8): argument validation, quantizers
and the reference everywhere; on a Hopper GPU every family and schedule against the reference on
fresh random inputs with poisoned outputs."""

import pytest
import torch

import quantgemm
from quantgemm import reference, scaled
from quantgemm.quantize import quantize_fp8, quantize_int8
from quantgemm.testing import assert_gemm_close, poison_, replay_in_graph

from conftest import SUBSET_BUILD, requires_hopper

FP8 = torch.float8_e4m3fn

# ---------------------------------------------------------------- validation (no GPU needed)


def cpu_problem(m=4, n=32, k=64, dtype=FP8):
    if dtype == FP8:
        a, b = torch.randn(m, k).to(FP8), torch.randn(n, k).to(FP8)
    else:
        a, b = torch.randint(-128, 128, (m, k), dtype=torch.int8), torch.randint(-128, 128, (n, k), dtype=torch.int8)
    return a, b, torch.rand(m, 1), torch.rand(n)


@pytest.mark.parametrize("change,match", [
    (lambda a, b, sa, sb: (a.float(), b, sa, sb), "a must have dtype torch.float8_e4m3fn or torch.int8"),
    (lambda a, b, sa, sb: (a, b.to(torch.int8), sa, sb), "b must have dtype torch.float8_e4m3fn"),
    (lambda a, b, sa, sb: (a[None], b, sa, sb), "a must be 2-D"),
    (lambda a, b, sa, sb: (a, b[:, :32], sa, sb), "b must be the .N, K. weight with K=64"),
    (lambda a, b, sa, sb: (a, b, sa.double(), sb), "scale_a must have dtype torch.float32"),
    (lambda a, b, sa, sb: (a, b, sa[:3], sb), r"scale_a must hold one value or 4"),
    (lambda a, b, sa, sb: (a, b, sa, sb[:5]), r"scale_b must hold one value or 32"),
    (lambda a, b, sa, sb: (a, b, sa, sb.reshape(4, 8)), r"scale_b must hold one value or 32"),
])
def test_rejects_bad_operands_and_scales(change, match):
    a, b, sa, sb = change(*cpu_problem())
    with pytest.raises((TypeError, ValueError), match=match):
        quantgemm.scaled_mm(a, b, sa, sb)


def test_accepts_scales_of_any_vector_shape():
    a, b, sa, sb = cpu_problem()
    assert scaled.check_scaled_mm_args(a, b, sa, sb.reshape(1, 32))[1:] == (True, True)
    assert scaled.check_scaled_mm_args(a, b, sa.reshape(-1), sb.reshape(32, 1))[1:] == (True, True)
    assert scaled.check_scaled_mm_args(a, b, torch.ones(()), torch.ones(1, 1))[1:] == (False, False)


def test_rejects_a_scale_that_is_not_contiguous():
    a, b, sa, _ = cpu_problem()
    with pytest.raises(ValueError, match="scale_b must be contiguous"):
        quantgemm.scaled_mm(a, b, sa, torch.rand(64)[::2])


@pytest.mark.parametrize("kwargs,match", [
    (dict(bias=torch.rand(32)), "bias must have dtype torch.bfloat16"),
    (dict(bias=torch.rand(31, dtype=torch.bfloat16)), "bias must hold 32 values"),
    (dict(out_dtype=torch.float32), "out_dtype must be torch.bfloat16 or torch.float16"),
    (dict(out=torch.empty(4, 32)), "out must have dtype torch.bfloat16"),
    (dict(out=torch.empty(4, 16, dtype=torch.bfloat16)), r"out must have shape \(4, 32\)"),
    (dict(schedule="fp8fast_nope"), "schedule must be one of"),
    (dict(azp_adj=torch.zeros(32, dtype=torch.int32)), "zero points are for int8 operands"),
])
def test_rejects_bad_epilogue_arguments(kwargs, match):
    a, b, sa, sb = cpu_problem()
    with pytest.raises((TypeError, ValueError), match=match):
        quantgemm.scaled_mm(a, b, sa, sb, **kwargs)


@pytest.mark.parametrize("kwargs,match", [
    (dict(azp_adj=torch.zeros(32, dtype=torch.int64)), "azp_adj must have dtype torch.int32"),
    (dict(azp_adj=torch.zeros(32, dtype=torch.int32), azp=torch.zeros(3, dtype=torch.int32)), "azp must hold 4"),
])
def test_rejects_bad_zero_points(kwargs, match):
    a, b, sa, sb = cpu_problem(dtype=torch.int8)
    with pytest.raises((TypeError, ValueError), match=match):
        quantgemm.scaled_mm_azp(a, b, sa, sb, **kwargs)


def test_rejects_cpu_tensors():
    with pytest.raises(ValueError, match="a must be a CUDA tensor"):
        quantgemm.scaled_mm(*cpu_problem())


def test_family_names():
    assert scaled.family(FP8) == "fp8fast"
    assert scaled.family(FP8, use_fast_accum=False) == "fp8"
    assert scaled.family(torch.int8, use_fast_accum=False) == "int8"
    for fam in ("fp8fast", "fp8", "int8"):
        assert scaled.supported_schedules(fam) or SUBSET_BUILD, fam


# ---------------------------------------------------------------- quantizers and the reference


@pytest.mark.parametrize("per_row", [True, False])
def test_fp8_quantizer_round_trips(per_row):
    x = torch.randn(16, 256) * torch.logspace(-2, 2, 16)[:, None]
    q, s = quantize_fp8(x, per_row)
    assert q.dtype == FP8 and s.dtype == torch.float32 and s.shape == ((16, 1) if per_row else (1,))
    back = q.float() * s
    assert (q.float().abs().amax(1) <= 448).all()
    if per_row:
        assert torch.allclose(q.float().abs().amax(1), torch.full((16,), 448.0))
    # e4m3 keeps 3 mantissa bits: half a step is 1/16 of the value (relative), below the smallest normal absolute
    err = (back - x).abs()
    assert (err <= x.abs() / 16 + s * 2.0 ** -9 + 1e-30).all()


@pytest.mark.parametrize("per_row", [True, False])
def test_int8_quantizers_round_trip(per_row):
    x = torch.randn(16, 256) * torch.logspace(-2, 2, 16)[:, None] + 0.5
    q, s = quantize_int8(x, per_row)
    assert q.dtype == torch.int8
    assert ((q.float() * s - x).abs() <= s / 2 * 1.0001).all()
    q, s, azp = quantize_int8(x, per_row, symmetric=False)
    assert azp.dtype == torch.int32 and azp.shape == ((16,) if per_row else (1,))
    zp = azp.reshape(-1, 1).float() if per_row else azp.float()
    assert (((q.float() - zp) * s - x).abs() <= s / 2 * 1.0001 + 1e-6).all()


def test_reference_applies_the_zero_point_correction_exactly():
    a = torch.randint(-128, 128, (5, 96), dtype=torch.int8)
    b = torch.randint(-128, 128, (24, 96), dtype=torch.int8)
    azp = torch.randint(-20, 20, (5,), dtype=torch.int32)
    adj = scaled.azp_adjust(b)
    got = reference.scaled_mm(a, b, torch.ones(1), torch.ones(1), azp_adj=adj, azp=azp)
    want = (a.long() - azp.long()[:, None]) @ b.long().t()
    assert torch.equal(got.long(), want)
    per_tensor = reference.scaled_mm(a, b, torch.ones(1), torch.ones(1), azp_adj=scaled.azp_adjust(b, 7))
    assert torch.equal(per_tensor.long(), (a.long() - 7) @ b.long().t())


# ---------------------------------------------------------------- GPU: against the reference


def gpu_problem(m, n, k, dtype, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    if dtype == FP8:
        a = (torch.randn(m, k, device="cuda", generator=g) * 2).to(FP8)
        b = (torch.randn(n, k, device="cuda", generator=g) * 2).to(FP8)
    else:
        a = torch.randint(-128, 128, (m, k), device="cuda", dtype=torch.int8, generator=g)
        b = torch.randint(-128, 128, (n, k), device="cuda", dtype=torch.int8, generator=g)
    sa = torch.rand(m, 1, device="cuda", generator=g) * 0.01 + 0.001
    sb = torch.rand(n, device="cuda", generator=g) * 0.01 + 0.001
    return a, b, sa, sb


def check(out, a, b, sa, sb, bias=None, azp_adj=None, azp=None, fast_accum=False):
    """Against the reference, with the tolerance policy of quantgemm.testing (FP8: the tensor core
    accumulates K at a time with fast accumulation, 128 otherwise)."""
    ref = reference.scaled_mm(a, b, sa, sb, bias, azp_adj, azp)
    k = a.shape[1]
    a_max = a.float().abs().max().item() * sa.max().item()
    if azp is not None:
        a_max += azp.abs().max().item() * sa.max().item()
    w_max = b.float().abs().max().item() * sb.max().item()
    fp8_chunk = None if a.dtype == torch.int8 else (k if fast_accum else 128)
    assert_gemm_close(out, ref, k, max(a_max, 1e-30), max(w_max, 1e-30), fp8_chunk)


FAMILIES = [(FP8, True), (FP8, False), (torch.int8, False)]
FAMILY_IDS = ["fp8fast", "fp8", "int8"]


@requires_hopper
@pytest.mark.parametrize("dtype,fast", FAMILIES, ids=FAMILY_IDS)
@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("m", [1, 3, 16, 33, 64, 130])
@pytest.mark.parametrize("scales", ["tensor-tensor", "token-channel", "tensor-channel", "token-tensor"])
def test_heuristic_matches_reference(dtype, fast, out_dtype, m, scales):
    n, k = 384, 512
    a, b, sa, sb = gpu_problem(m, n, k, dtype, seed=m)
    if scales.startswith("tensor"):
        sa = sa[:1, 0].contiguous()
    if scales.endswith("tensor"):
        sb = sb[:1].contiguous()
    bias = torch.randn(n, device="cuda", dtype=out_dtype) if m % 2 else None  # bias on odd M
    out = poison_(torch.empty(m, n, device="cuda", dtype=out_dtype))
    quantgemm.scaled_mm(a, b, sa, sb, bias, out_dtype, out=out, use_fast_accum=fast)
    check(out, a, b, sa, sb, bias, fast_accum=fast)


def _every_schedule():
    out = []
    if torch.cuda.is_available():
        for fam in ("fp8fast", "fp8", "int8"):
            try:
                out += [(fam, s) for s in scaled.supported_schedules(fam)]
            except (ImportError, ValueError):  # no extension, or a subset build without this family
                pass
    return out


@requires_hopper
@pytest.mark.parametrize("family,schedule", _every_schedule(), ids=lambda x: x if isinstance(x, str) else "")
@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("m", [1, 64, 257])
def test_every_schedule_matches_reference(family, schedule, out_dtype, m):
    dtype = torch.int8 if family.startswith("int8") else FP8
    n, k = 512, 1024
    a, b, sa, sb = gpu_problem(m, n, k, dtype, seed=7)
    bias = torch.randn(n, device="cuda", dtype=out_dtype)
    out = poison_(torch.empty(m, n, device="cuda", dtype=out_dtype))
    fast = family.startswith("fp8fast")
    quantgemm.scaled_mm(a, b, sa, sb, bias, out_dtype, out=out, use_fast_accum=fast, schedule=schedule)
    check(out, a, b, sa, sb, bias, fast_accum=fast)


@requires_hopper
@pytest.mark.parametrize("dtype,fast", FAMILIES, ids=FAMILY_IDS)
@pytest.mark.parametrize("n,k", [(6144, 4096), (28672, 8192), (4096, 14336)])
@pytest.mark.parametrize("m", [16, 1024])
def test_real_shapes(dtype, fast, n, k, m):
    a, b, sa, sb = gpu_problem(m, n, k, dtype, seed=3)
    out = poison_(torch.empty(m, n, device="cuda", dtype=torch.bfloat16))
    quantgemm.scaled_mm(a, b, sa, sb, out=out, use_fast_accum=fast)
    check(out, a, b, sa, sb, fast_accum=fast)


@requires_hopper
@pytest.mark.parametrize("m", [1, 16, 130])
@pytest.mark.parametrize("per_token", [True, False])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_azp_matches_reference(m, per_token, bias, out_dtype):
    n, k = 256, 768
    x = torch.randn(m, k, device="cuda") + 0.7
    a, sa, azp = quantize_int8(x, per_row=per_token, symmetric=False)
    b, sb = quantize_int8(torch.randn(n, k, device="cuda"))
    bias_t = torch.randn(n, device="cuda", dtype=out_dtype) if bias else None
    out = poison_(torch.empty(m, n, device="cuda", dtype=out_dtype))
    if per_token:
        adj, azp_arg = scaled.azp_adjust(b), azp
    else:
        adj, azp_arg = scaled.azp_adjust(b, int(azp.item())), None
    quantgemm.scaled_mm_azp(a, b, sa, sb, adj, azp_arg, bias_t, out_dtype, out=out)
    azp_full = azp if per_token else azp.expand(m).contiguous()
    check(out, a, b, sa, sb, bias_t, scaled.azp_adjust(b), azp_full)
    # and it dequantizes: close to the fp32 product of the unquantized operands
    want = x @ (b.float() * sb).t() + (0 if bias_t is None else bias_t.float())
    assert ((out.float() - want).norm() / want.norm()).item() < 0.02


@requires_hopper
@pytest.mark.parametrize("dtype,fast", FAMILIES, ids=FAMILY_IDS)
@pytest.mark.parametrize("n,k", [(100, 40), (24, 200), (130, 4104)])
def test_unaligned_shapes_are_padded(dtype, fast, n, k):
    m = 5
    a, b, sa, sb = gpu_problem(m, n, k, dtype, seed=n)
    bias = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    out = poison_(torch.empty(m, n, device="cuda", dtype=torch.bfloat16))
    quantgemm.scaled_mm(a, b, sa, sb, bias, out=out, use_fast_accum=fast)
    check(out, a, b, sa, sb, bias, fast_accum=fast)


@requires_hopper
@pytest.mark.parametrize("dtype", [FP8, torch.int8], ids=["fp8", "int8"])
def test_honours_strides(dtype):
    m, n, k = 37, 256, 512
    big_a, big_b, sa, sb = gpu_problem(m, n + 64, k + 128, dtype)
    a, b = big_a[:, 64:64 + k], big_b[32:32 + n, :k]  # row strides k + 128, bases offset by 64 bytes
    big_out = poison_(torch.empty(m, n + 24, device="cuda", dtype=torch.bfloat16))
    out = big_out[:, 8:8 + n]
    quantgemm.scaled_mm(a, b, sa, sb[:n].contiguous(), out=out, use_fast_accum=False)
    check(out, a, b, sa, sb[:n], fast_accum=False)
    assert big_out[:, :8].isnan().all() and big_out[:, 8 + n:].isnan().all()
    with pytest.raises(ValueError, match="a must have unit stride along K"):
        quantgemm.scaled_mm(a.t().contiguous().t(), b, sa, sb[:n].contiguous())


@requires_hopper
def test_m_zero_returns_empty():
    a, b, sa, sb = gpu_problem(0, 256, 256, FP8)
    out = quantgemm.scaled_mm(a, b, torch.ones(1, device="cuda"), sb)
    assert out.shape == (0, 256) and out.dtype == torch.bfloat16


@requires_hopper
def test_cuda_graph_replay_matches_eager():
    a, b, sa, sb = gpu_problem(8, 1024, 2048, FP8)
    eager = quantgemm.scaled_mm(a, b, sa, sb)
    out = torch.empty_like(eager)
    assert torch.equal(replay_in_graph(lambda: quantgemm.scaled_mm(a, b, sa, sb, out=out), out), eager)


@requires_hopper
@pytest.mark.parametrize("fast", [True, False], ids=["fp8fast", "fp8"])
def test_each_call_reads_what_the_kernel_before_it_wrote(fast):
    """Programmatic dependent launch: a chain in which each kernel reads what the one before it
    wrote (the fused quantizer, then the GEMM, whose output the next quantizer reads), launched back
    to back, against the same chain with the host waiting after every kernel."""
    torch.manual_seed(0)
    n = 2048
    weights = [quantize_fp8(torch.randn(n, n, device="cuda") / n ** 0.5) for _ in range(4)]
    x0 = torch.randn(16, n, device="cuda", dtype=torch.bfloat16)

    def chain(wait):
        x = x0
        for b, sb in weights:
            a, sa = quantize_fp8(x)
            wait()
            x = quantgemm.scaled_mm(a, b, sa, sb.reshape(-1), use_fast_accum=fast)
            wait()
        return x

    assert torch.equal(chain(lambda: None), chain(torch.cuda.synchronize))


@requires_hopper
@pytest.mark.parametrize("dtype", [FP8, torch.int8], ids=["fp8", "int8"])
def test_quantized_linear_is_close_to_bf16(dtype):
    x = torch.randn(64, 2048, device="cuda")
    w = torch.randn(1024, 2048, device="cuda") / 45
    quant = quantize_fp8 if dtype == FP8 else quantize_int8
    a, sa = quant(x)
    b, sb = quant(w)
    out = quantgemm.scaled_mm(a, b, sa, sb.reshape(-1))
    want = x @ w.t()
    assert ((out.float() - want).norm() / want.norm()).item() < (0.05 if dtype == FP8 else 0.02)
