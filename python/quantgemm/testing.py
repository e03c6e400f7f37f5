"""The tolerance policy of quantgemm's tests (docs/testing.md gives the reasoning).

A kernel result `out` (bf16/fp16) is compared with the fp32 reference `ref` of reference.py, which
mirrors every rounding the kernel does before its fp32 accumulation. What is left:
- the rounding of the output to its 16-bit dtype: at most one unit roundoff of |ref| (2^-8 for
  bf16, 2^-11 for fp16), allowed twice over: rtol = 2 u;
- the fp32 summation order, which differs between the tensor core and torch: a few fp32 roundoffs
  per term, growing like sqrt(K) for random data: atol = 2^-16 * sqrt(K) * max|a| * max|w|,
  still 2^-8 below a single wrong or missing term of typical size.
Everything else (a wrong nibble, scale, row or stride) moves elements by about one term or more
and fails.

W8A8 (scaled_mm): a_max and w_max include the scales (max|a| * max sa, max|b| * max sb). INT8
accumulates exactly in int32, so the policy above holds. FP8's products are exact, but the tensor
core keeps its running sum in fewer mantissa bits (about 13; DeepSeek-V3's report measures it) and
truncates, an error that grows with the length L of each tensor-core accumulation rather than its
square root: L = 128 when the kernel promotes into fp32 every 128 of K, L = K with fast
accumulation. atol = 2^-13 * L * sqrt(K / L) * max|a| * max|w| (fp8_chunk=L); it still catches a
term of typical size misplaced for K up to a few thousand, and any layout error at every K.
"""

from __future__ import annotations

import math

import torch

from . import mixed_input, reference

UNIT_ROUNDOFF = {torch.bfloat16: 2.0 ** -8, torch.float16: 2.0 ** -11, torch.float32: 2.0 ** -24}


def gemm_tolerance(out_dtype: torch.dtype, k: int, a_max: float, w_max: float,
                   fp8_chunk: int | None = None) -> tuple[float, float]:
    """(rtol, atol) for an output of `out_dtype` from a K-long fp32 accumulation, or an FP8 one
    that the tensor core accumulates over fp8_chunk of K at a time."""
    if fp8_chunk:
        chunk = min(k, fp8_chunk)
        return 2.0 * UNIT_ROUNDOFF[out_dtype], 2.0 ** -13 * chunk * math.sqrt(k / chunk) * a_max * w_max
    return 2.0 * UNIT_ROUNDOFF[out_dtype], 2.0 ** -16 * math.sqrt(k) * a_max * w_max


def assert_gemm_close(out: torch.Tensor, ref: torch.Tensor, k: int, a_max: float, w_max: float,
                      fp8_chunk: int | None = None) -> None:
    """Every element within the policy, and no NaN or Inf."""
    rtol, atol = gemm_tolerance(out.dtype, k, a_max, w_max, fp8_chunk)
    got = out.float().cpu()
    want = ref.float().cpu()
    if not torch.isfinite(got).all():
        bad = (~torch.isfinite(got)).nonzero()[:5].tolist()
        raise AssertionError(f"non-finite output at {bad}")
    err = (got - want).abs()
    limit = rtol * want.abs() + atol
    if (err > limit).any():
        idx = (err - limit).argmax()
        r, c = divmod(idx.item(), want.shape[1])
        raise AssertionError(
            f"{int((err > limit).sum())} of {err.numel()} elements out of tolerance (rtol={rtol:.3g}, "
            f"atol={atol:.3g}); worst at [{r}, {c}]: got {got[r, c].item():.6g}, want {want[r, c].item():.6g}")


def poison_(out: torch.Tensor) -> torch.Tensor:
    """Fill with NaN so that any element the kernel leaves unwritten fails the comparison."""
    return out.fill_(float("nan"))


def replay_in_graph(call, out: torch.Tensor) -> torch.Tensor:
    """Captures `call()` (which writes `out`) into a CUDA graph on a side stream, poisons `out`,
    replays the graph and returns `out`: what a captured decode step would produce."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        call()  # warm up outside the capture: workspaces, module loading
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            call()
    torch.cuda.current_stream().wait_stream(stream)
    poison_(out)
    graph.replay()
    torch.cuda.synchronize()
    return out


def mm_reference(a: torch.Tensor, w_q: torch.Tensor, scales: torch.Tensor, group_size: int,
                 zeros: torch.Tensor | None = None, channel_scales: torch.Tensor | None = None,
                 token_scales: torch.Tensor | None = None, *, weight_type: str = "u4b8",
                 schedule: str | None = None, layout: str = "sm90") -> torch.Tensor:
    """reference.mm_quantized of what quantgemm.mm computes from `a` and prepack_b(w_q, weight_type,
    layout=layout) with `schedule` (or the heuristic's pick): the weight rounded to the scales' dtype
    or left exact, as that kernel does (mixed_input.exact_weight)."""
    m, k = a.shape
    exact = mixed_input.exact_weight(m, w_q.shape[0], k, weight_type, scales.dtype, group_size, layout, schedule)
    return reference.mm_quantized(a, w_q, scales, group_size, zeros, channel_scales, token_scales,
                                  zero_point=mixed_input.ZERO_POINTS[weight_type], exact_weight=exact)
