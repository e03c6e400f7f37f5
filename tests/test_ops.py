"""quantgemm's torch.library operators: opcheck, fake implementations that refuse what eager
refuses, torch.compile(fullgraph=True) of QuantLinear stacks, and (on a Hopper GPU) CUDA-graph
capture on a side stream."""

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import quantgemm
from quantgemm import reference
from quantgemm.nn import QuantLinear
from quantgemm.testing import mm_reference

from conftest import hopper_available, requires_hopper


def problem(weight_type="u4b8", dtype=torch.bfloat16, m=5, n=136, k=192, g=64, device="cpu", seed=0):
    torch.manual_seed(seed)
    w = (torch.randn(n, k) / k ** 0.5).to(dtype)
    if weight_type == "u4":
        w_q, scales, zeros = quantgemm.quantize_u4(w, g)
    else:
        (w_q, scales), zeros = quantgemm.quantize_u4b8(w, g), None
    b = quantgemm.prepack_b(w_q.to(device), weight_type)
    a = torch.randn(m, k, dtype=dtype, device=device)
    zeros = None if zeros is None else zeros.to(device)
    args = (a, b.data, n, k, weight_type, scales.to(device), g, zeros, None)
    return args, w_q


@pytest.mark.parametrize("weight_type", ["u4b8", "u4"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_mm_op_is_the_reference_on_cpu(weight_type, dtype):
    args, w_q = problem(weight_type, dtype)
    a, _, _, _, _, scales, g, zeros, _ = args
    got = torch.ops.quantgemm.mm(*args)
    want = mm_reference(a, w_q, scales, g, zeros, weight_type=weight_type).to(dtype)
    assert got.dtype == dtype and torch.equal(got, want)


@pytest.mark.parametrize("weight_type", ["u4b8", "u4"])
def test_opcheck(weight_type):
    args, w_q = problem(weight_type)
    torch.library.opcheck(torch.ops.quantgemm.mm.default, args)
    torch.library.opcheck(torch.ops.quantgemm.prepack_b.default, (w_q, weight_type))


def test_fake_implementations_refuse_what_eager_refuses():
    args, w_q = problem()
    bad = (args[0].float(),) + args[1:]
    with pytest.raises(TypeError, match="a must have dtype torch.bfloat16 or torch.float16"):
        torch.ops.quantgemm.mm(*bad)
    with FakeTensorMode() as mode:
        fake = tuple(mode.from_tensor(x) if isinstance(x, torch.Tensor) else x for x in bad)
        with pytest.raises(TypeError, match="a must have dtype torch.bfloat16 or torch.float16"):
            torch.ops.quantgemm.mm(*fake)
        out = torch.ops.quantgemm.mm(*(mode.from_tensor(x) if isinstance(x, torch.Tensor) else x for x in args))
        assert out.shape == (5, 136) and out.dtype == torch.bfloat16
        with pytest.raises(ValueError, match="N=100 is not supported"):
            torch.ops.quantgemm.prepack_b(mode.from_tensor(torch.zeros(100, 64, dtype=torch.uint8)))
        assert torch.ops.quantgemm.prepack_b(mode.from_tensor(w_q)).shape == (256 * 192 // 2,)


def stack(device="cpu"):
    """u4b8, u4 and W4A8 (activations quantized to e4m3 in the forward) QuantLinear layers."""
    torch.manual_seed(1)
    layers = [torch.nn.Linear(256, 384, dtype=torch.bfloat16), torch.nn.Linear(384, 256, dtype=torch.bfloat16),
              torch.nn.Linear(256, 128, dtype=torch.bfloat16)]
    return torch.nn.Sequential(QuantLinear.from_linear(layers[0], 128),
                               torch.nn.ReLU(),
                               QuantLinear.from_linear(layers[1], 64, weight_type="u4"),
                               QuantLinear.from_linear(layers[2], 128, layout="sm90_e4m3")).to(device)


def test_compile_fullgraph_matches_eager_on_cpu():
    model = stack()
    x = torch.randn(3, 7, 256, dtype=torch.bfloat16)
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager", dynamic=True)
    assert torch.equal(compiled(x), model(x))
    assert torch.equal(compiled(x[:, :2]), model(x[:, :2]))  # another M, no recompilation needed


@requires_hopper
def test_opcheck_and_compile_on_the_gpu():
    args, _ = problem("u4", device="cuda", m=9)
    torch.library.opcheck(torch.ops.quantgemm.mm.default, args)
    model = stack("cuda")
    x = torch.randn(4, 256, dtype=torch.bfloat16, device="cuda")
    compiled = torch.compile(model, fullgraph=True)
    assert torch.equal(compiled(x), model(x))


@requires_hopper
def test_cuda_graph_on_a_side_stream_replays_eager():
    model = stack("cuda")
    x = torch.randn(6, 256, dtype=torch.bfloat16, device="cuda")
    eager = model(x)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream):
        model(x)  # the capturing stream's workspace
        with torch.cuda.graph(graph, stream=stream):
            y = model(x)
    torch.cuda.current_stream().wait_stream(stream)
    y.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(y, eager)


def scaled_problem(dtype=torch.float8_e4m3fn, m=5, n=48, k=64, device="cpu", azp=False):
    torch.manual_seed(2)
    x, w = torch.randn(m, k, device=device), torch.randn(n, k, device=device)
    if dtype == torch.int8:
        (a, sa, zp), (b, sb) = quantgemm.quantize_int8(x, symmetric=False), quantgemm.quantize_int8(w)
    else:
        (a, sa), (b, sb), zp = quantgemm.quantize_fp8(x), quantgemm.quantize_fp8(w), None
    bias = torch.randn(n, dtype=torch.bfloat16, device=device)
    adj = quantgemm.azp_adjust(b) if azp else None
    return (a, b, sa, sb.reshape(-1), bias, torch.bfloat16, True, adj, zp if azp else None)


def opcheck_scaled(args):
    # torch's schema check compares the inputs with arithmetic that float8 tensors lack on the CPU
    # ("mul_cpu_reduced_float" not implemented for Float8_e4m3fn): every other check runs for FP8
    tests = ("test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic")
    if args[0].dtype == torch.int8:
        tests = ("test_schema",) + tests
    torch.library.opcheck(torch.ops.quantgemm.scaled_mm.default, args, test_utils=tests)


@pytest.mark.parametrize("dtype,azp", [(torch.float8_e4m3fn, False), (torch.int8, False), (torch.int8, True)])
def test_scaled_mm_op_is_the_reference_on_cpu_and_passes_opcheck(dtype, azp):
    args = scaled_problem(dtype, azp=azp)
    got = torch.ops.quantgemm.scaled_mm(*args)
    a, b, sa, sb, bias, out_dtype, _, adj, zp = args
    assert torch.equal(got, reference.scaled_mm(a, b, sa, sb, bias, adj, zp).to(out_dtype))
    opcheck_scaled(args)


def test_scaled_mm_fake_refuses_what_eager_refuses():
    args = scaled_problem()
    bad = (args[0], args[1].to(torch.int8)) + args[2:]
    with FakeTensorMode() as mode:
        fake = tuple(mode.from_tensor(x) if isinstance(x, torch.Tensor) else x for x in bad)
        with pytest.raises(TypeError, match="b must have dtype torch.float8_e4m3fn"):
            torch.ops.quantgemm.scaled_mm(*fake)
        out = torch.ops.quantgemm.scaled_mm(*(mode.from_tensor(x) if isinstance(x, torch.Tensor) else x for x in args))
        assert out.shape == (5, 48) and out.dtype == torch.bfloat16


@requires_hopper
@pytest.mark.parametrize("dtype,azp", [(torch.float8_e4m3fn, False), (torch.int8, True)])
def test_scaled_mm_opcheck_and_compile_on_the_gpu(dtype, azp):
    args = scaled_problem(dtype, m=9, n=256, k=512, device="cuda", azp=azp)
    opcheck_scaled(args)
    fn = torch.compile(lambda *xs: torch.ops.quantgemm.scaled_mm(*xs) * 2, fullgraph=True)
    assert torch.equal(fn(*args), torch.ops.quantgemm.scaled_mm(*args) * 2)


def entry_points(device):
    """{name: (call, its float inputs)}: every public GPU entry point on fresh operands of one small
    problem, each call taking its floating-point operands as arguments (so that they can be passed as
    parameters that require grad)."""
    torch.manual_seed(3)
    x = torch.randn(5, 256, dtype=torch.bfloat16, device=device)
    w = torch.randn(384, 256, dtype=torch.bfloat16, device=device) / 16
    w_q, s = quantgemm.quantize_u4b8(w, 128)
    b = quantgemm.prepack_b(w_q)
    a8, sa = quantgemm.quantize_fp8(x)
    b8, sb = quantgemm.quantize_fp8(w)
    ag, sag = quantgemm.quantize_fp8_groups(x)
    bb, sbb = quantgemm.quantize_fp8_blocks(w)
    linear = torch.nn.Linear(256, 384, dtype=torch.bfloat16, device=device)
    quant = QuantLinear.from_linear(linear)
    scaled_layer = quantgemm.nn.ScaledLinear.from_linear(linear, torch.float8_e4m3fn)
    block_layer = quantgemm.nn.BlockScaledLinear.from_linear(linear)
    return {
        "mm": (lambda x, s: quantgemm.mm(x, b, s, 128), (x, s)),
        "mm op": (lambda x, s: torch.ops.quantgemm.mm(x, b.data, 384, 256, "u4b8", s, 128), (x, s)),
        "scaled_mm": (lambda sa, sb: quantgemm.scaled_mm(a8, b8, sa, sb.reshape(-1)), (sa, sb)),
        "block_scaled_mm": (lambda sag, sbb: quantgemm.block_scaled_mm(ag, sag, bb, sbb), (sag, sbb)),
        "quantize_fp8": (lambda x: quantgemm.quantize_fp8(x)[0].float(), (x,)),
        "quantize_int8": (lambda x: quantgemm.quantize_int8(x)[0], (x,)),
        "quantize_fp8_groups": (lambda x: quantgemm.quantize_fp8_groups(x)[0].float(), (x,)),
        "QuantLinear": (quant, (x,)),
        "ScaledLinear": (scaled_layer, (x,)),
        "BlockScaledLinear": (block_layer, (x,)),
    }


GPU_ONLY = {"mm", "scaled_mm", "block_scaled_mm"}  # (the others take the reference path on the CPU)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=requires_hopper)])
def test_parameters_that_require_grad_are_read_as_values(device):
    for name, (call, inputs) in entry_points(device).items():
        if device == "cpu" and name in GPU_ONLY:
            continue
        want = call(*inputs)
        got = call(*(torch.nn.Parameter(t.clone()) for t in inputs))
        assert torch.equal(got, want), name


@requires_hopper
def test_no_entry_point_synchronizes_the_host():
    calls = entry_points("cuda")
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")  # a synchronizing CUDA call in torch now raises
    try:
        for name, (call, inputs) in calls.items():
            for _ in range(2):  # the first call (workspaces, one-time setup) and a later one
                call(*inputs)
    finally:
        torch.cuda.set_sync_debug_mode(0)


@pytest.mark.skipif(not (hopper_available() and torch.cuda.device_count() > 1), reason="needs two sm_90 GPUs")
def test_operands_on_a_device_that_is_not_current():
    calls = entry_points("cuda:1")
    with torch.cuda.device(1):
        want = {name: call(*inputs) for name, (call, inputs) in calls.items()}
    with torch.cuda.device(0):
        got = {name: call(*inputs) for name, (call, inputs) in calls.items()}
        assert torch.cuda.current_device() == 0
    torch.cuda.synchronize(1)
    for name in calls:
        assert got[name].device == torch.device("cuda:1") and torch.equal(got[name], want[name]), name
