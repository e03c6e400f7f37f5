"""The round-to-nearest quantizer and the reference dequant-matmul."""

import pytest
import torch

import quantgemm
from quantgemm import reference
from quantgemm.quantize import quantize_fp8

from conftest import requires_hopper


@pytest.mark.parametrize("group_size", [64, 128, -1])
def test_quantizer_rounds_to_nearest(group_size):
    torch.manual_seed(1)
    w = torch.randn(256, 512, dtype=torch.bfloat16)
    w_q, scales = quantgemm.quantize_u4b8(w, group_size)
    groups = 1 if group_size == -1 else 512 // group_size
    assert w_q.dtype == torch.uint8 and w_q.shape == (256, 512)
    assert scales.dtype == torch.bfloat16 and scales.shape == (groups, 256)
    assert int(w_q.max()) <= 15
    deq = reference.dequantize_u4b8(w_q, scales, group_size)
    s = scales.float().repeat_interleave(512 // groups, dim=0).t()
    # within half a step of the stored scale (plus the bf16 rounding of the dequantized value)
    assert ((deq - w.float()).abs() <= 0.5 * s * (1 + 2 ** -7) + w.float().abs() * 2 ** -8).all()
    # and codes span the range
    assert int(w_q.min()) == 0 or int(w_q.max()) == 15


def test_quantizer_zero_group():
    w = torch.zeros(128, 128, dtype=torch.bfloat16)
    w[:, 64:] = 1.0
    w_q, scales = quantgemm.quantize_u4b8(w, 64)
    assert torch.isfinite(scales.float()).all()
    assert (w_q[:, :64] == 8).all()
    assert torch.allclose(reference.dequantize_u4b8(w_q, scales, 64), w.float(), atol=0.07)


def test_quantizer_validation():
    with pytest.raises(ValueError, match="group_size"):
        quantgemm.quantize_u4b8(torch.randn(128, 100), 64)
    with pytest.raises(TypeError, match="floating-point"):
        quantgemm.quantize_u4b8(torch.zeros(128, 128, dtype=torch.int32))


def test_reference_matches_direct_computation():
    torch.manual_seed(2)
    n, k, m, g = 256, 384, 5, 128
    w_q = torch.randint(0, 16, (n, k), dtype=torch.uint8)
    scales = (torch.rand(k // g, n) + 0.5).to(torch.bfloat16)
    a = torch.randn(m, k, dtype=torch.bfloat16)
    got = reference.mm_u4b8(a, w_q, scales, g)
    w = torch.empty(n, k, dtype=torch.float64)
    for kk in range(k):
        w[:, kk] = (w_q[:, kk].double() - 8) * scales[kk // g].double()
    w = w.to(torch.bfloat16).double()  # the kernel rounds the dequantized weight to bf16 once
    want = a.double() @ w.t()
    assert torch.allclose(got.double(), want, rtol=1e-5, atol=1e-4)


def test_quantize_then_reference_approximates_the_float_matmul():
    torch.manual_seed(3)
    w = torch.randn(512, 1024) / 32
    a = torch.randn(8, 1024)
    w_q, scales = quantgemm.quantize_u4b8(w.to(torch.bfloat16), 128)
    got = reference.mm_u4b8(a.to(torch.bfloat16), w_q, scales, 128)
    want = a @ w.t()
    rel = (got - want).norm() / want.norm()
    assert rel < 0.15  # 4-bit RTN on Gaussian weights: about 0.1


def test_quantize_u4_zero_points_and_error():
    torch.manual_seed(2)
    w = torch.randn(96, 256) * 0.02 + 0.01  # groups off centre: the zero points move
    w_q, scales, zeros = quantgemm.quantize_u4(w, 64)
    assert w_q.dtype == torch.uint8 and int(w_q.max()) <= 15
    assert scales.shape == zeros.shape == (4, 96) and scales.dtype == zeros.dtype == torch.bfloat16
    assert torch.equal(zeros, zeros.round()) and zeros.min() >= 0 and zeros.max() <= 15
    deq = reference.dequantize_u4(w_q, scales, zeros, 64)
    step = scales.float().repeat_interleave(64, dim=0).t()
    assert ((deq - w).abs() <= step * 1.01).all()  # at most a step: half from rounding, half from the zero's
    assert (deq - w).norm() / w.norm() < 0.1


def test_quantize_u8b128_rounds_to_nearest_and_approximates_the_matmul():
    torch.manual_seed(4)
    w = torch.randn(256, 512, dtype=torch.bfloat16)
    w_q, scales = quantgemm.quantize_u8b128(w, 128)
    assert w_q.dtype == torch.uint8 and scales.shape == (4, 256) and int(w_q.min()) >= 0
    assert int(w_q.max()) > 200 or int(w_q.min()) < 55  # the 8-bit range is used
    deq = reference._dequantize(w_q, scales, None, 128, zero_point=128)
    s = scales.float().repeat_interleave(128, dim=0).t()
    assert ((deq - w.float()).abs() <= 0.5 * s * (1 + 2 ** -7) + w.float().abs() * 2 ** -8).all()
    a = torch.randn(8, 512, dtype=torch.bfloat16)
    got = reference.mm_quantized(a, w_q, scales, 128, zero_point=128)
    want = a.float() @ w.float().t()
    assert (got - want).norm() / want.norm() < 0.01  # 8-bit: about 16x more accurate than 4-bit


def test_quantize_u8_zero_points():
    torch.manual_seed(5)
    w = torch.randn(96, 256) * 0.02 + 0.01
    w_q, scales, zeros = quantgemm.quantize_u8(w, 64)
    assert scales.shape == zeros.shape == (4, 96) and torch.equal(zeros, zeros.round())
    assert zeros.min() >= 0 and zeros.max() <= 255
    deq = reference._dequantize(w_q, scales, zeros, 64)
    step = scales.float().repeat_interleave(64, dim=0).t()
    assert ((deq - w).abs() <= step * 1.01 + w.abs() * 2 ** -8).all()
    assert (deq - w).norm() / w.norm() < 0.01


@requires_hopper
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("rows,k,ld", [(1, 8, 8), (5, 4096, 4096), (64, 8192, 8256), (0, 512, 512), (3, 120, 128),
                                       (4, 16384, 16384), (3, 20000, 20008), (2, 40000, 40000)])
def test_gpu_fp8_quantizer_matches_the_torch_expression(dtype, rows, k, ld):
    """The fused per-token kernel gives the bits of the torch expression (run here on the CPU)."""
    torch.manual_seed(rows + k)
    x = (torch.randn(rows, ld, device="cuda") * 3).to(dtype)[:, :k]
    if rows > 2:
        x[1] = 0  # an all-zero row: scale 1e-12 / 448, codes zero
    q, scale = quantize_fp8(x)
    assert q.dtype == torch.float8_e4m3fn and q.shape == (rows, k) and scale.shape == (rows, 1) and q.is_cuda
    xf = x.cpu().float()
    want_scale = xf.abs().amax(dim=1, keepdim=True).clamp(min=1e-12) / 448.0
    want_q = (xf / want_scale).clamp(-448.0, 448.0).to(torch.float8_e4m3fn)
    assert torch.equal(scale.cpu(), want_scale)
    assert torch.equal(q.cpu().view(torch.uint8), want_q.view(torch.uint8))
