"""quantgemm.nn.QuantLinear: built from nn.Linear and from GPTQ tensors, against the reference;
the CPU forward is the reference path, the GPU forward quantgemm.mm."""

import pytest
import torch

import quantgemm
from quantgemm import checkpoint, reference
from quantgemm.nn import QuantLinear
from quantgemm.testing import assert_gemm_close, mm_reference
from test_checkpoint import AWQ_ORDER, gptq_layer, pack_along

from conftest import requires_hopper


def linear(n=256, k=192, bias=True, seed=0):
    torch.manual_seed(seed)
    lin = torch.nn.Linear(k, n, bias=bias, dtype=torch.bfloat16)
    return lin


def test_from_linear_matches_the_reference_on_cpu():
    lin = linear()
    q = QuantLinear.from_linear(lin, group_size=64)
    x = torch.randn(3, 5, 192, dtype=torch.bfloat16)
    y = q(x)
    assert y.shape == (3, 5, 256) and y.dtype == torch.bfloat16
    want = mm_reference(x.reshape(-1, 192), q.weight_codes(), q.scales, 64) + lin.bias.float()
    assert torch.allclose(y.reshape(-1, 256).float(), want, rtol=2**-7, atol=1e-3)
    # and close to the unquantized layer: 4-bit round to nearest
    err = (y.float() - lin(x).float()).norm() / lin(x).float().norm()
    assert 0 < err < 0.15


def test_buffers_move_with_the_module_and_save():
    q = QuantLinear.from_linear(linear(bias=False), group_size=64)
    assert q.bias is None and set(dict(q.named_buffers())) == {"qweight", "scales"}
    state = q.state_dict()
    r = QuantLinear(192, 256, group_size=64)
    r.load_state_dict(state)
    x = torch.randn(4, 192, dtype=torch.bfloat16)
    assert torch.equal(r(x), q(x))


def test_from_gptq_symmetric_and_refusals():
    n, k, group = 128, 256, 128
    zeros = torch.full((k // group, n), 8, dtype=torch.uint8)
    qweight, qzeros, scales, g_idx, w = gptq_layer(n, k, group, zeros)
    q = QuantLinear.from_gptq(qweight, qzeros, scales, g_idx)
    x = torch.randn(2, k, dtype=torch.bfloat16)
    want = mm_reference(x, q.weight_codes(), q.scales, group)
    assert torch.allclose(q(x).float(), want, rtol=2**-7, atol=1e-3)
    with pytest.raises(ValueError, match="x must have 256 features"):
        q(torch.randn(2, 255, dtype=torch.bfloat16))


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=requires_hopper)])
@pytest.mark.parametrize("symmetric", [True, False])
def test_from_gptq_act_order(device, symmetric):
    n, k, group = 256, 512, 128
    g = torch.Generator().manual_seed(5)
    zeros = torch.full((k // group, n), 8, dtype=torch.uint8) if symmetric else \
        torch.randint(0, 16, (k // group, n), generator=g, dtype=torch.uint8)
    qweight, qzeros, scales, g_idx, _ = gptq_layer(n, k, group, zeros, act_order=True)
    q = QuantLinear.from_gptq(qweight, qzeros, scales, g_idx).to(device)
    assert q.perm is not None and not torch.equal(q.perm.cpu(), torch.arange(k))
    conv = checkpoint.from_gptq(qweight, qzeros, scales, g_idx)
    x = torch.randn(9, k, dtype=torch.bfloat16)
    y = q(x.to(device))
    # the kernel's math on the activation's columns in the weight's order ...
    zeros_q = None if q.zeros is None else q.zeros.cpu()
    want = mm_reference(x[:, conv.perm], conv.codes, q.scales.cpu(), group, zeros_q, weight_type=q.weight_type)
    w_max = reference._dequantize(conv.codes, q.scales.cpu(), zeros_q, group).abs().max().item()
    assert_gemm_close(y, want, k, x.float().abs().max().item(), w_max)
    # ... which is the checkpoint's weight in its own input order (up to the scales' rounding to bf16)
    ckpt = x.float() @ conv.dequantize().t()
    assert ((y.float().cpu() - ckpt).norm() / ckpt.norm()).item() < 1e-2
    if device == "cuda" and conv.zeros is None:  # the direct API: the permutation kept with the prepacked weight
        b = quantgemm.prepack_b(conv.codes.cuda(), perm=conv.perm)
        out = quantgemm.mm(x.cuda(), b, q.scales, group)
        assert_gemm_close(out, want, k, x.float().abs().max().item(), w_max)
    # a saved act-order layer loads into one built with act_order=True
    r = QuantLinear(k, n, group, weight_type=q.weight_type, act_order=True).to(device)
    r.load_state_dict(q.state_dict())
    assert torch.equal(r(x.to(device)), y)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=requires_hopper)])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float8_e4m3fn], ids=["bf16", "fp16", "e4m3"])
def test_gather_columns_is_index_select(device, dtype):
    """The act-order gather (mixed_input.gather_columns): quantgemm's kernel on a GPU, index_select
    elsewhere and for what the kernel does not take (a column stride, a K off 8), bit for bit."""
    from quantgemm.mixed_input import gather_columns

    def bits(x):  # (fp8 compared as its bytes)
        return x.view(torch.uint8) if x.element_size() == 1 else x.view(torch.int16)

    k = 1032
    perm = torch.randperm(k, generator=torch.Generator().manual_seed(1)).to(device)
    wide = torch.randn(37, k + 24).to(dtype).to(device)
    for a in (wide[:, :k], wide[:1, 8:8 + k], wide[:0, :k], wide[:, :k].t().contiguous().t(),
              torch.randn(3, 12).to(dtype).to(device)):
        p = perm if a.shape[1] == k else torch.randperm(12).to(device)
        got = gather_columns(a, p)
        assert got.dtype == dtype and got.shape == a.shape
        assert torch.equal(bits(got), bits(a).index_select(1, p))


def test_prepack_refuses_a_perm_that_is_not_a_permutation():
    codes = torch.zeros(128, 64, dtype=torch.uint8)
    with pytest.raises(ValueError, match="perm must be a permutation of 0..63"):
        quantgemm.prepack_b(codes, perm=torch.zeros(64, dtype=torch.int64))
    with pytest.raises(ValueError, match=r"perm must have shape \(64,\)"):
        quantgemm.prepack_b(codes, perm=torch.arange(32))


def test_from_gptq_asymmetric_is_u4():
    n, k, group = 128, 256, 64
    zeros = torch.randint(0, 16, (k // group, n), generator=torch.Generator().manual_seed(3), dtype=torch.uint8)
    q = QuantLinear.from_gptq(*gptq_layer(n, k, group, zeros)[:4])
    assert q.weight_type == "u4" and torch.equal(q.zeros, zeros.to(torch.bfloat16))
    x = torch.randn(2, k, dtype=torch.bfloat16)
    want = mm_reference(x, q.weight_codes(), q.scales, group, q.zeros, weight_type="u4")
    assert torch.allclose(q(x).float(), want, rtol=2**-7, atol=1e-3)


def awq_layer(n, k, group, seed=1):
    g = torch.Generator().manual_seed(seed)
    codes = torch.randint(0, 16, (n, k), generator=g, dtype=torch.uint8)
    zeros = torch.randint(0, 16, (k // group, n), generator=g, dtype=torch.uint8)
    scales = (torch.rand(k // group, n, generator=g) + 0.5).half() / 64
    return pack_along(codes.t(), dim=1, order=AWQ_ORDER), pack_along(zeros, dim=1, order=AWQ_ORDER), scales


def test_from_awq_and_from_linear_u4():
    q = QuantLinear.from_awq(*awq_layer(64, 256, 128))
    assert q.weight_type == "u4" and set(dict(q.named_buffers())) == {"qweight", "scales", "zeros"}
    x = torch.randn(3, 256, dtype=torch.bfloat16)
    want = mm_reference(x, q.weight_codes(), q.scales, 128, q.zeros, weight_type="u4")
    assert torch.allclose(q(x).float(), want, rtol=2**-7, atol=1e-3)
    lin = linear()
    u4 = QuantLinear.from_linear(lin, group_size=64, weight_type="u4")
    err = (u4(x[:, :192]).float() - lin(x[:, :192]).float()).norm() / lin(x[:, :192]).float().norm()
    assert 0 < err < 0.15
    r = QuantLinear(192, 256, group_size=64, bias=True, weight_type="u4")
    r.load_state_dict(u4.state_dict())
    assert torch.equal(r(x[:, :192]), u4(x[:, :192]))


@requires_hopper
def test_gpu_forward_of_u4_layers():
    q = QuantLinear.from_awq(*awq_layer(576, 512, 128)).cuda()
    x = torch.randn(5, 512, dtype=torch.bfloat16, device="cuda")
    w = reference.dequantize_u4(q.weight_codes(), q.scales.cpu(), q.zeros.cpu(), 128)
    want = mm_reference(x, q.weight_codes().cuda(), q.scales, 128, q.zeros, weight_type="u4")
    assert_gemm_close(q(x), want, 512, x.abs().max().item(), w.abs().max().item())


@requires_hopper
def test_gpu_forward_is_quantgemm_mm():
    lin = linear(n=512, k=256, bias=False).cuda()
    q = QuantLinear.from_linear(lin, group_size=128)
    assert q.qweight.is_cuda
    x = torch.randn(7, 256, dtype=torch.bfloat16, device="cuda")
    w = reference.dequantize_u4b8(q.weight_codes(), q.scales.cpu(), 128)
    want = mm_reference(x, q.weight_codes().cuda(), q.scales, 128)
    assert_gemm_close(q(x), want, 256, x.abs().max().item(), w.abs().max().item())


def test_w4a8_layer_quantizes_its_activation_per_token_on_cpu():
    lin = linear(n=256, k=384)
    q = QuantLinear.from_linear(lin, group_size=128, layout="sm90_e4m3")
    assert q.layout == "sm90_e4m3" and q.weight_type == "u4b8"
    x = torch.randn(2, 3, 384, dtype=torch.bfloat16)
    y = q(x)
    assert y.shape == (2, 3, 256) and y.dtype == torch.bfloat16
    a, sa = quantgemm.quantize_fp8(x.reshape(-1, 384))
    want = reference.mm_quantized(a.float(), q.weight_codes(), q.scales, 128, token_scales=sa.reshape(-1),
                                  exact_weight=True).to(torch.bfloat16) + q.bias
    assert torch.equal(y.reshape(-1, 256), want)
    err = (y.float() - lin(x).float()).norm() / lin(x).float().norm()
    assert 0 < err < 0.15
    r = QuantLinear(384, 256, group_size=128, bias=True, layout="sm90_e4m3")
    r.load_state_dict(q.state_dict())
    assert torch.equal(r(x), y)


def test_w4a8_layers_take_u4b8_weights_and_quantize_model_skips_what_they_cannot_serve():
    with pytest.raises(ValueError, match="weight_type must be one of .'u4b8',. for the sm90_e4m3 layout"):
        QuantLinear(384, 256, weight_type="u4", layout="sm90_e4m3")
    with pytest.raises(ValueError, match="group_size must be a multiple of 128 or -1 for W4A8"):
        QuantLinear(384, 256, group_size=64, layout="sm90_e4m3")
    with pytest.raises(ValueError, match="K=200 is not supported for W4A8"):
        QuantLinear(200, 256, group_size=-1, layout="sm90_e4m3")
    model = torch.nn.Sequential(torch.nn.Linear(384, 256), torch.nn.Linear(256, 200),  # K = 256: groups of 128
                                torch.nn.Linear(200, 384),                            # K = 200: no group of 128
                                torch.nn.Linear(384, 136))
    assert quantgemm.quantize_model(model, "w4a8") == 3
    assert [type(m).__name__ for m in model] == ["QuantLinear", "QuantLinear", "Linear", "QuantLinear"]
    assert quantgemm.models.unsupported_reason(256, 200, -1, "sm90_e4m3").startswith("K=200 is not supported for W4A8")


@requires_hopper
def test_w4a8_gpu_forward_is_quantize_fp8_and_mm():
    lin = linear(n=512, k=256, bias=False).cuda()
    q = QuantLinear.from_linear(lin, group_size=128, layout="sm90_e4m3")
    x = torch.randn(7, 256, dtype=torch.bfloat16, device="cuda")
    a, sa = quantgemm.quantize_fp8(x)
    w = reference.dequantize_u4b8(q.weight_codes(), q.scales.cpu(), 128)
    want = reference.mm_quantized(a.float(), q.weight_codes().cuda(), q.scales, 128, token_scales=sa.reshape(-1),
                                  exact_weight=True)
    a_max = a.float().abs().max().item() * sa.max().item()
    assert_gemm_close(q(x), want, 256, a_max, w.abs().max().item(), fp8_chunk=128)


@pytest.mark.parametrize("weight_dtype", [torch.float8_e4m3fn, torch.int8], ids=["fp8", "int8"])
def test_scaled_linear_matches_the_reference_on_cpu(weight_dtype):
    from quantgemm.nn import ScaledLinear
    from quantgemm.scaled import quantize_activation

    lin = linear(n=96, k=160)
    q = ScaledLinear.from_linear(lin, weight_dtype)
    assert q.weight.dtype == weight_dtype and q.weight_scale.shape == (96,)
    x = torch.randn(2, 3, 160, dtype=torch.bfloat16)
    y = q(x)
    assert y.shape == (2, 3, 96) and y.dtype == torch.bfloat16
    a, sa = quantize_activation(x.reshape(-1, 160), weight_dtype)
    want = reference.scaled_mm(a, q.weight, sa, q.weight_scale, q.bias)
    assert torch.equal(y.reshape(-1, 96), want.to(torch.bfloat16))
    err = (y.float() - lin(x).float()).norm() / lin(x).float().norm()
    assert 0 < err < 0.05


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_block_scaled_linear_matches_the_reference_on_cpu(dtype):
    from quantgemm.nn import BlockScaledLinear

    lin = torch.nn.Linear(300, 200, bias=True, dtype=dtype)  # N and K off the 128 blocks
    q = BlockScaledLinear.from_linear(lin)
    assert q.weight.dtype == torch.float8_e4m3fn and q.weight_scale_inv.shape == (2, 3) and q.dtype == dtype
    x = torch.randn(2, 3, 300, dtype=dtype)
    y = q(x)
    assert y.shape == (2, 3, 200) and y.dtype == dtype
    a, sa = quantgemm.quantize_fp8_groups(x.reshape(-1, 300))
    want = reference.block_scaled_mm(a, sa, q.weight, q.weight_scale_inv).to(torch.bfloat16).to(dtype) + q.bias
    assert torch.equal(y.reshape(-1, 200), want)
    err = (y.float() - lin(x).float()).norm() / lin(x).float().norm()
    assert 0 < err < 0.05


def test_block_scaled_linear_from_a_checkpoint():
    from quantgemm.nn import BlockScaledLinear

    w = torch.randn(256, 384) / 20
    q, s = quantgemm.quantize_fp8_blocks(w)  # DeepSeek-V3 stores weight and weight_scale_inv so
    layer = BlockScaledLinear.from_fp8_checkpoint(q, s)
    assert torch.equal(layer.weight.view(torch.uint8), q.view(torch.uint8)) and torch.equal(layer.weight_scale_inv, s)
    with pytest.raises(ValueError, match=r"weight_scale_inv must have shape \(2, 3\)"):
        BlockScaledLinear.from_fp8_checkpoint(q, s[:, :2])
    with pytest.raises(TypeError, match="weight must be a 2-D torch.float8_e4m3fn"):
        BlockScaledLinear.from_fp8_checkpoint(w, s)


@requires_hopper
def test_block_scaled_linear_gpu_forward_is_block_scaled_mm():
    from quantgemm.nn import BlockScaledLinear

    layer = BlockScaledLinear.from_linear(linear(n=2112, k=1536).cuda())
    x = torch.randn(5, 1536, device="cuda", dtype=torch.bfloat16)
    a, sa = quantgemm.quantize_fp8_groups(x)
    want = quantgemm.block_scaled_mm(a, sa, layer.weight, layer.weight_scale_inv) + layer.bias
    assert torch.equal(layer(x), want)
