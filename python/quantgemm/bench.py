"""The main job: quantgemm's W4A16 GEMM against torch bf16 matmul (cuBLAS) over real layer shapes
(--dtype fp16: fp16 activations, scales and output, against torch fp16 matmul);
with --kind, its W8A8 GEMMs against torch._scaled_mm (FP8, rowwise scales) or torch._int_mm (INT8),
or its block-scaled FP8 GEMM (DeepSeek-V3's shapes by default) against torch._scaled_mm with the
same 1 x 128 / 128 x 128 scales where this torch and cuBLAS offer it, else rowwise.

    python -m quantgemm.bench [--models llama3-8b,llama3-70b] [--m 1,16,64] [--csv out.csv]
    python -m quantgemm.bench --kind fp8|fp8fast|int8|fp8block [...]

Times are medians of CUDA-graph replays; each replay runs the op over enough weight copies that the
weights cannot stay in the L2 between calls, and the peer runs in the same process on the same
activations. The floor is the weight-and-scale bytes over the bandwidth of a read-only stream
measured in the same run. torch._int_mm needs M > 16: below, it is timed at M = 17.
"""

from __future__ import annotations

import argparse
import csv
import math
import statistics
import sys
from dataclasses import dataclass

import torch

from . import block_scaled, mixed_input, reference, scaled
from ._native import native
from .models import DEFAULT_MODELS, MODELS, parse_models, unsupported_reason
from .quantize import QUANTIZERS, quantize_fp8, quantize_fp8_blocks, quantize_fp8_groups, quantize_u4b8

DEFAULT_M = (1, 2, 4, 8, 16, 32, 48, 64, 128, 256, 512, 1024, 4096)


@dataclass
class Row:
    model: str
    layer: str
    n: int
    k: int
    m: int
    quantgemm_us: float
    torch_us: float
    floor_us: float
    schedule: str

    @property
    def speedup(self) -> float:
        return self.torch_us / self.quantgemm_us

    @property
    def over_floor(self) -> float:
        return self.quantgemm_us / self.floor_us


def graph_time_us(fns, replays: int = 30, min_calls: int = 20) -> float:
    """Median time of one call, over CUDA-graph replays of calls cycling through `fns`."""
    calls = max(min_calls, len(fns))
    for f in fns:  # warm up: compile, size workspaces, load modules
        f()
    torch.cuda.synchronize()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream):
        for f in fns:  # workspaces of the capturing stream
            f()
        with torch.cuda.graph(graph, stream=stream):
            for i in range(calls):
                fns[i % len(fns)]()
    torch.cuda.synchronize()
    times = []
    for _ in range(replays):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) * 1e3 / calls)
    return statistics.median(times)


def read_bandwidth(device: torch.device, nbytes: int = 2 << 30) -> float:
    """Bytes per second of a read-only stream over a buffer far larger than the L2."""
    buf = torch.randint(0, 255, (nbytes,), dtype=torch.uint8, device=device)
    sink = torch.empty(1024, dtype=torch.int32, device=device)

    def read():
        native().stream_read(buf.data_ptr(), nbytes, sink.data_ptr(), device.index,
                             torch.cuda.current_stream(device).cuda_stream)

    us = graph_time_us([read], replays=20, min_calls=5)
    return nbytes / (us * 1e-6)


def copies_for(nbytes: int, l2_bytes: int) -> int:
    """Weight copies to rotate through so that the L2 never holds the next call's weights."""
    return max(2, math.ceil(3 * l2_bytes / max(nbytes, 1)))


def quantized_copies(w: torch.Tensor, group_size: int, l2_bytes: int, weight_type: str = "u4b8",
                     layout: str = "sm90", perm: torch.Tensor | None = None):
    """(w_q, scales, zeros or None, bytes of one copy, [(prepacked, scales, zeros)] copies to rotate
    through) of a real weight quantized to `weight_type`, prepacked in `layout` (with the act-order
    permutation `perm`, if given)."""
    w_q, scales, *zeros = QUANTIZERS[weight_type](w, group_size)
    zeros = zeros[0] if zeros else None
    qbytes = w.shape[0] * w.shape[1] * mixed_input.BITS[weight_type] // 8 \
        + (1 + (zeros is not None)) * scales.numel() * scales.element_size()
    copies = [(mixed_input.prepack_b(w_q, weight_type, perm=perm, layout=layout), scales.clone(),
               None if zeros is None else zeros.clone())
              for _ in range(copies_for(qbytes, l2_bytes))]
    return w_q, scales, zeros, qbytes, copies


def scaled_copies(w: torch.Tensor, dtype: torch.dtype, l2_bytes: int):
    """(bytes of one copy, [(b, scale_b)] copies to rotate through) of a real weight quantized per
    channel to `dtype` (e4m3 or int8)."""
    b, sb = scaled.quantize_activation(w, dtype)
    nbytes = b.numel() + sb.numel() * 4
    return nbytes, [(b.clone(), sb.reshape(-1).clone()) for _ in range(copies_for(nbytes, l2_bytes))]


def scaled_peer(kind: str, a: torch.Tensor, sa: torch.Tensor, b: torch.Tensor, sb: torch.Tensor):
    """The peer call of a W8A8 problem (`kind`: fp8, fp8fast or int8): torch._scaled_mm with rowwise
    scales, or torch._int_mm (int32 out; its M must exceed 16, so shorter activations are padded once here)."""
    if kind == "int8":
        a_peer = a if a.shape[0] > 16 else torch.cat([a, a.new_zeros(17 - a.shape[0], a.shape[1])])
        return lambda: torch._int_mm(a_peer, b.t())
    return lambda: torch._scaled_mm(a, b.t(), scale_a=sa, scale_b=sb.reshape(1, -1), out_dtype=torch.bfloat16,
                                    use_fast_accum=kind == "fp8fast")


def bench_scaled_shape(model, layer, n, k, ms, kind, bandwidth, l2_bytes, check=True, schedules=(None,)) -> list[Row]:
    """W8A8 (`kind`: fp8, fp8fast or int8) against torch._scaled_mm / torch._int_mm."""
    dtype = torch.int8 if kind == "int8" else torch.float8_e4m3fn
    fast = kind == "fp8fast"
    torch.manual_seed(0)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / math.sqrt(k)
    nbytes, copies = scaled_copies(w, dtype, l2_bytes)
    del w
    rows = []
    for m in ms:
        a, sa = scaled.quantize_activation(torch.randn(m, k, device="cuda", dtype=torch.bfloat16), dtype)
        out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        tt = graph_time_us([scaled_peer(kind, a, sa, b, sb) for b, sb in copies])
        for sched in schedules:
            if check:
                b, sb = copies[0]
                scaled.scaled_mm(a, b, sa, sb, out=out, use_fast_accum=fast, schedule=sched)
                ref = reference.scaled_mm(a, b, sa, sb)
                rel = ((out.float() - ref).norm() / ref.norm()).item()
                if not rel < 1e-2:
                    raise RuntimeError(f"{model} {layer} M={m}: relative error {rel:.3g} against the reference")
            qg = graph_time_us([lambda b=b, sb=sb: scaled.scaled_mm(a, b, sa, sb, out=out, use_fast_accum=fast,
                                                                    schedule=sched) for b, sb in copies])
            rows.append(Row(model, layer, n, k, m, qg, tt, nbytes / bandwidth * 1e6,
                            sched or scaled.select_schedule(m, n, k, dtype, use_fast_accum=fast)))
            print(format_row(rows[-1]), flush=True)
    return rows


def _blockwise_peer(a, sa, b, sb):
    """torch._scaled_mm with DeepSeek-V3's block scales (cuBLAS's 1 x 128 / 128 x 128 scaling), in
    the scale layouts it takes, or None where this torch or cuBLAS lacks it."""
    for sa_run, sb_run in ((sa.t().contiguous().t(), sb.t().contiguous().t()), (sa.t().contiguous().t(), sb),
                           (sa, sb)):
        try:
            out = torch._scaled_mm(a, b.t(), scale_a=sa_run, scale_b=sb_run, out_dtype=torch.bfloat16)
        except (RuntimeError, ValueError, TypeError):
            continue
        ref = reference.block_scaled_mm(a, sa, b, sb)
        if ((out.float() - ref).norm() / ref.norm()).item() < 1e-2:
            return lambda b, sb, sa_run=sa_run, t=sb_run is not sb: torch._scaled_mm(
                a, b.t(), scale_a=sa_run, scale_b=sb.t().contiguous().t() if t else sb, out_dtype=torch.bfloat16)
    return None


def bench_block_scaled_shape(model, layer, n, k, ms, bandwidth, l2_bytes, check=True, schedules=(None,)) -> list[Row]:
    """Block-scaled FP8 against torch._scaled_mm: blockwise scales where available (the row's
    schedule is then marked "vs blockwise"), else per-token x per-channel rowwise FP8."""
    torch.manual_seed(0)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / math.sqrt(k)
    b, sb = quantize_fp8_blocks(w)
    b_row, sb_row = quantize_fp8(w)
    nbytes = b.numel() + sb.numel() * 4
    copies = [(b.clone(), sb.clone(), b_row.clone(), sb_row.reshape(1, -1).clone())
              for _ in range(copies_for(nbytes, l2_bytes))]
    del w
    rows = []
    for m in ms:
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        a, sa = quantize_fp8_groups(x)
        a_row, sa_row = quantize_fp8(x)
        out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        blockwise = _blockwise_peer(a, sa, b, sb) if m > 0 else None
        if blockwise is not None:
            peer = [lambda c=c: blockwise(c[0], c[1]) for c in copies]
        else:
            peer = [lambda c=c: torch._scaled_mm(a_row, c[2].t(), scale_a=sa_row, scale_b=c[3],
                                                 out_dtype=torch.bfloat16) for c in copies]
        tt = graph_time_us(peer)
        for sched in schedules:
            if check:
                block_scaled.block_scaled_mm(a, sa, b, sb, out=out, schedule=sched)
                ref = reference.block_scaled_mm(a, sa, b, sb)
                rel = ((out.float() - ref).norm() / ref.norm()).item()
                if not rel < 1e-2:
                    raise RuntimeError(f"{model} {layer} M={m}: relative error {rel:.3g} against the reference")
            qg = graph_time_us([lambda c=c: block_scaled.block_scaled_mm(a, sa, c[0], c[1], out=out, schedule=sched)
                                for c in copies])
            name = sched or block_scaled.select_schedule(m, n, k)
            rows.append(Row(model, layer, n, k, m, qg, tt, nbytes / bandwidth * 1e6,
                            name + (" vs blockwise" if blockwise is not None else " vs rowwise")))
            print(format_row(rows[-1]), flush=True)
    return rows


#: DeepGEMM's published H800 figures (README of its first release, NVCC 12.8): (M, N, K) ->
#: (TFLOP/s, GB/s), beside quantgemm's block-scaled table for reference.
DEEPGEMM_H800 = {
    (64, 2112, 7168): (206, 1688), (64, 24576, 1536): (289, 2455), (64, 32768, 512): (219, 2143),
    (64, 7168, 16384): (336, 2668), (64, 4096, 7168): (287, 2320), (64, 7168, 2048): (295, 2470),
    (128, 2112, 7168): (352, 1509), (128, 24576, 1536): (535, 2448), (128, 32768, 512): (358, 2103),
    (128, 7168, 16384): (645, 2604), (128, 4096, 7168): (533, 2221), (128, 7168, 2048): (510, 2277),
    (4096, 2112, 7168): (1058, 527), (4096, 24576, 1536): (990, 786), (4096, 32768, 512): (590, 1232),
    (4096, 7168, 16384): (1358, 343), (4096, 4096, 7168): (1304, 500), (4096, 7168, 2048): (1025, 697),
}


def operand_bytes(m: int, n: int, k: int) -> int:
    """Bytes a block-scaled GEMM must move at least: both e4m3 operands, their fp32 scales, the bf16
    output (DeepGEMM's memory-bandwidth figure counts the same)."""
    kb, nb = -(-k // 128), -(-n // 128)
    return m * k + n * k + 4 * (m * kb + nb * kb) + 2 * m * n


def block_scaled_table(rows: list[Row]) -> str:
    lines = ["| layer | N | K | M | quantgemm us | TFLOP/s | operand TB/s | torch._scaled_mm us | speedup | "
             "DeepGEMM H800 TFLOP/s | DeepGEMM H800 TB/s | schedule |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        tflops = 2 * r.m * r.n * r.k / r.quantgemm_us / 1e6
        tbps = operand_bytes(r.m, r.n, r.k) / r.quantgemm_us / 1e6
        dg = DEEPGEMM_H800.get((r.m, r.n, r.k))
        lines.append(f"| {r.layer} | {r.n} | {r.k} | {r.m} | {r.quantgemm_us:.1f} | {tflops:.0f} | {tbps:.2f} | "
                     f"{r.torch_us:.1f} | {r.speedup:.2f} | {dg[0] if dg else ''} | "
                     f"{dg[1] / 1000 if dg else ''} | {r.schedule} |")
    return "\n".join(lines) + "\n"


def bench_shape(model, layer, n, k, ms, group_size, bandwidth, l2_bytes, check=True, schedules=(None,),
                weight_type="u4b8", layout="sm90", dtype=torch.bfloat16, act_order=False) -> list[Row]:
    """The mixed-input GEMM with `dtype` activations, scales and output against torch's matmul in
    that dtype; act_order: a GPTQ act-order weight (a random permutation of K kept with it), whose
    calls gather the activation's columns too."""
    device = torch.device("cuda")
    torch.manual_seed(0)
    w = (torch.randn(n, k, device=device, dtype=torch.bfloat16) / math.sqrt(k)).to(dtype)
    perm = torch.randperm(k, device=device) if act_order else None
    w_q, scales, zeros, qbytes, q_copies = quantized_copies(w, group_size, l2_bytes, weight_type, layout, perm)
    w_copies = [w.clone() for _ in range(copies_for(w.numel() * 2, l2_bytes))]
    del w
    rows = []
    for m in ms:
        a = torch.randn(m, k, device=device, dtype=dtype)
        out_q = torch.empty(m, n, device=device, dtype=dtype)
        out_t = torch.empty(m, n, device=device, dtype=dtype)
        tt = graph_time_us([lambda wc=wc: torch.matmul(a, wc.t(), out=out_t) for wc in w_copies])
        for sched in schedules:
            if check:
                b, s, z = q_copies[0]
                mixed_input.mm(a, b, s, group_size, out=out_q, schedule=sched, group_zeros=z)
                exact = mixed_input.exact_weight(m, n, k, weight_type, dtype, group_size, layout, sched)
                a_ref = a if perm is None else a.index_select(1, perm)  # (act-order: the weight's column order)
                ref = reference.mm_quantized(a_ref, w_q, scales, group_size, zeros,
                                             zero_point=mixed_input.ZERO_POINTS[weight_type], exact_weight=exact)
                rel = ((out_q.float() - ref).norm() / ref.norm()).item()
                if not rel < 1e-2:
                    raise RuntimeError(f"{model} {layer} M={m}: relative error {rel:.3g} against the reference")
            qg = graph_time_us([lambda b=b, s=s, z=z: mixed_input.mm(a, b, s, group_size, out=out_q, schedule=sched,
                                                                      group_zeros=z)
                                for b, s, z in q_copies])
            rows.append(Row(model, layer, n, k, m, qg, tt, qbytes / bandwidth * 1e6,
                            sched or mixed_input.select_schedule(m, n, k, weight_type, dtype, group_size, layout)))
            print(format_row(rows[-1]), flush=True)
    return rows


def bench_w4a8_shape(model, layer, n, k, ms, group_size, bandwidth, l2_bytes, check=True,
                     schedules=(None,)) -> list[Row]:
    """W4A8 (u4b8 weights, e4m3 activations quantized per token) against torch bf16 matmul on the bf16
    activations. quantgemm_us is the GEMM's time; the schedule column adds the time of quantizing
    the activation and the GEMM together, and the relative error of the W4A8 result against its
    fp32 reference (the dequantized weight and e4m3 activation) beside that of W4A16 against its own
    on the same weight (the bf16 activation)."""
    torch.manual_seed(0)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / math.sqrt(k)
    w_q, scales, _, qbytes, q_copies = quantized_copies(w, group_size, l2_bytes, "u4b8", mixed_input.E4M3)
    w_copies = [w.clone() for _ in range(copies_for(w.numel() * 2, l2_bytes))]
    b16 = mixed_input.prepack_b(w_q)
    # quantgemm's own FP8 W8A8 GEMM (fast accumulation) on the same shape, where this build has it
    fp8 = scaled_copies(w, torch.float8_e4m3fn, l2_bytes)[1] if scaled.supported_schedules("fp8fast") else None
    del w
    rows = []
    for m in ms:
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        a, ts = quantize_fp8(x)
        ts = ts.reshape(-1)
        out_q = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        out_t = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        tt = graph_time_us([lambda wc=wc: torch.matmul(x, wc.t(), out=out_t) for wc in w_copies])
        for sched in schedules:
            note = ""
            if check:
                b, s, _ = q_copies[0]
                mixed_input.mm(a, b, s, group_size, out=out_q, schedule=sched, token_scales=ts)
                ref = reference.mm_quantized(a.float(), w_q, scales, group_size, token_scales=ts, exact_weight=True)
                rel = ((out_q.float() - ref).norm() / ref.norm()).item()
                if not rel < 1e-2:
                    raise RuntimeError(f"{model} {layer} M={m}: relative error {rel:.3g} against the reference")
                w4a16 = mixed_input.mm(x, b16, scales, group_size).float()
                ref16 = reference.mm_quantized(x, w_q, scales, group_size,
                                               exact_weight=mixed_input.exact_weight(m, n, k, group_size=group_size))
                note = (f", rel. error vs its fp32 reference: W4A8 {rel:.2e}, "
                        f"W4A16 {((w4a16 - ref16).norm() / ref16.norm()).item():.2e}")
            qg = graph_time_us([lambda b=b, s=s: mixed_input.mm(a, b, s, group_size, out=out_q, schedule=sched,
                                                                 token_scales=ts) for b, s, _ in q_copies])

            def both(b, s):
                aq, sq = quantize_fp8(x)
                mixed_input.mm(aq, b, s, group_size, out=out_q, schedule=sched, token_scales=sq.reshape(-1))
            total = graph_time_us([lambda b=b, s=s: both(b, s) for b, s, _ in q_copies])
            if fp8 is not None:
                w8a8 = graph_time_us([lambda c=c: scaled.scaled_mm(a, c[0], ts, c[1], out=out_q) for c in fp8])
                note += f", FP8 W8A8 GEMM {w8a8:.1f} us"
            name = sched or mixed_input.select_schedule(m, n, k, "u4b8", group_size=group_size, layout=mixed_input.E4M3)
            rows.append(Row(model, layer, n, k, m, qg, tt, qbytes / bandwidth * 1e6,
                            f"{name} (quantize + GEMM {total:.1f} us{note})"))
            print(format_row(rows[-1]), flush=True)
    return rows


TIMELINE_EVENTS = ("start", "first stage", "first mainloop end", "last mainloop end", "last fixup end", "exit")


def timeline(n: int, k: int, m: int, group_size: int = 128, schedule: str | None = None, calls: int = 20,
             csv_path: str | None = None) -> str:
    """Where the time of one call goes, per CTA, with `calls` u4b8 calls replayed back to back in a
    CUDA graph as the benchmark runs them (a build with -DQUANTGEMM_TIMELINE, whose kernels record
    their events in the workspace): timeline_summary's table, and every CTA's record of every call
    in `csv_path` if given (timeline_rows)."""
    index = torch.cuda.current_device()
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / math.sqrt(k)
    l2 = getattr(torch.cuda.get_device_properties(index), "L2_cache_size", 60 << 20)
    *_, copies = quantized_copies(w, group_size, l2)
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    fns = [lambda c=c: mixed_input.mm(a, c[0], c[1], group_size, schedule=schedule) for c in copies]
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream):
        for f in fns:  # sizes this stream's workspace
            f()
        partials, _ = mixed_input._workspace.get(index, stream.cuda_stream)
        with torch.cuda.graph(graph, stream=stream):
            for i in range(calls):
                fns[i % len(fns)]()
    missing = RuntimeError("quantgemm.bench: no timeline recorded; build with "
                           "-Ccmake.define.CMAKE_CUDA_FLAGS=-DQUANTGEMM_TIMELINE")
    n_ctas, n_records, words, nbytes = native().TIMELINE_LAYOUT  # the region at the workspace's end
    if partials.numel() < nbytes:
        raise missing
    start = (partials.numel() - nbytes) // 8 * 8
    region = partials[start:start + nbytes]
    torch.cuda.synchronize()
    region.zero_()
    graph.replay()
    torch.cuda.synchronize()
    counts = region[:n_ctas * 4].view(torch.int32).cpu()
    records = region[n_ctas * 4:].view(torch.int64).view(n_ctas, n_records, words).cpu()
    ctas = [c for c in range(n_ctas) if counts[c] > 0]
    if not ctas or any(int(counts[c]) != calls for c in ctas):
        raise missing
    rows = timeline_rows({c: records[c, :calls].tolist() for c in ctas})
    if csv_path:
        with open(csv_path, "w", newline="") as f:
            out = csv.writer(f)
            out.writerow(TIMELINE_COLUMNS)
            out.writerows(rows)
    return f"{n} x {k}, M = {m}, {schedule or mixed_input.select_schedule(m, n, k)}: " + timeline_summary(rows)


#: timeline_rows' columns: times in us from the call's first CTA start (call_start: from the first call's)
TIMELINE_COLUMNS = ("call", "cta", "call_start") + tuple(e.replace(" ", "_") for e in TIMELINE_EVENTS) + (
    "segments", "clocks")


def timeline_rows(per_cta: dict[int, list[list[int]]]) -> list[list]:
    """One row (TIMELINE_COLUMNS) per CTA and call, from each CTA's records (TIMELINE_EVENTS in ns,
    then its segment count and clock64 lifetime) of the same calls: its j-th record by start time
    belongs to call j."""
    ordered = {c: sorted(records) for c, records in per_cta.items()}
    calls = len(next(iter(ordered.values())))
    first = min(records[0][0] for records in ordered.values())
    rows = []
    for j in range(calls):
        t0 = min(records[j][0] for records in ordered.values())
        for c, records in ordered.items():
            r = records[j]
            rows.append([j, c, (t0 - first) / 1e3] + [(x - t0) / 1e3 for x in r[:6]] + [r[6], r[7]])
    return rows


def _ranks(values: list[float]) -> list[float]:
    order = sorted(range(len(values)), key=values.__getitem__)
    ranks = [0.0] * len(values)
    for rank, i in enumerate(order):
        ranks[i] = float(rank)
    return ranks


def rank_correlation(x: list[float], y: list[float]) -> float:
    """Spearman's rank correlation of x and y (ties ranked in order; 0 where either is constant)."""
    rx, ry = _ranks(x), _ranks(y)
    mean = (len(x) - 1) / 2
    cov = sum((a - mean) * (b - mean) for a, b in zip(rx, ry))
    var = sum((a - mean) ** 2 for a in rx)
    return cov / var if var > 0 and len(set(x)) > 1 and len(set(y)) > 1 else 0.0


def timeline_summary(rows: list[list]) -> str:
    """timeline()'s table from timeline_rows: per event, the median over the calls (the first two
    left out) of its earliest, median and latest time over the CTAs; the calls' period and overlap,
    and how the CTAs' start order follows into their last mainloop end."""
    by_call: dict[int, list[list]] = {}
    for row in rows:
        by_call.setdefault(row[0], []).append(row)
    calls = [by_call[j] for j in sorted(by_call)]
    skip = 2 if len(calls) > 4 else 0
    starts = [call[0][2] for call in calls]
    exits = [starts[j] + max(r[8] for r in call) for j, call in enumerate(calls)]
    period = statistics.median(starts[j + 1] - starts[j] for j in range(skip, len(calls) - 1))
    overlap = statistics.median(starts[j] - exits[j - 1] for j in range(max(skip, 1), len(calls)))
    order = statistics.median(rank_correlation([r[3] for r in call], [r[6] for r in call]) for call in calls[skip:])
    lines = [f"{len(calls[0])} CTAs, a call every {period:.2f} us; a call's first CTA starts {overlap:+.2f} us after "
             f"the previous call's last exit; start against last mainloop end over the CTAs: rank "
             f"correlation {order:+.2f}",
             f"{'event (us from the call start)':32s} {'first':>7s} {'median':>7s} {'last':>7s}"]
    for e, event in enumerate(TIMELINE_EVENTS):
        spans = []
        for call in calls[skip:]:
            v = sorted(r[3 + e] for r in call)
            spans.append((v[0], statistics.median(v), v[-1]))
        first, median, last = (statistics.median(span[i] for span in spans) for i in range(3))
        lines.append(f"{event:32s} {first:7.2f} {median:7.2f} {last:7.2f}")
    return "\n".join(lines)


def host_overhead(n: int = 4096, k: int = 4096, calls: int = 200) -> None:
    """Host overhead per call at M = 1: the CPU time to issue a call (few enough calls that the
    launch queue never fills, so the GPU cannot hold the host back), and the eager wall time per call
    of a synchronised loop less the kernel's own time (CUDA-graph replays)."""
    import time

    from .nn import QuantLinear

    torch.manual_seed(0)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / math.sqrt(k)
    w_q, scales = quantize_u4b8(w, 128)
    b = mixed_input.prepack_b(w_q)
    a = torch.randn(1, k, device="cuda", dtype=torch.bfloat16)
    layer = QuantLinear.from_linear(torch.nn.Linear(k, n, bias=False, device="cuda", dtype=torch.bfloat16))
    ways = {"quantgemm.mm": lambda: mixed_input.mm(a, b, scales, 128),
            "torch.ops.quantgemm.mm": lambda: torch.ops.quantgemm.mm(a, b.data, b.n, b.k, b.weight_type, scales, 128),
            "QuantLinear": lambda: layer(a),
            "torch.matmul (cuBLAS, bf16)": lambda: torch.matmul(a, w.t())}
    print(f"host overhead per call, M = 1, {n} x {k}:")
    print(f"{'call':<28} {'issue us':>9} {'eager us':>9} {'kernel us':>10} {'eager - kernel':>15}")
    for name, f in ways.items():
        kernel = graph_time_us([f])
        for _ in range(3):
            torch.cuda.synchronize()
            start = time.perf_counter()
            for _ in range(calls):
                f()
            issue = (time.perf_counter() - start) / calls * 1e6
            torch.cuda.synchronize()
            eager = (time.perf_counter() - start) / calls * 1e6
        print(f"{name:<28} {issue:9.1f} {eager:9.1f} {kernel:10.1f} {eager - kernel:15.1f}", flush=True)


HEADER = f"{'model':<11} {'layer':<8} {'N':>6} {'K':>6} {'M':>5} {'quantgemm us':>12} {'torch us':>9} " \
         f"{'speedup':>7} {'floor us':>8} {'x floor':>7}  schedule"


def format_row(r: Row) -> str:
    return (f"{r.model:<11} {r.layer:<8} {r.n:>6} {r.k:>6} {r.m:>5} {r.quantgemm_us:>12.1f} {r.torch_us:>9.1f} "
            f"{r.speedup:>7.2f} {r.floor_us:>8.1f} {r.over_floor:>7.2f}  {r.schedule}")


PEERS = {"w4a16": "torch bf16", "w4a8": "torch bf16", "fp8": "torch._scaled_mm", "fp8fast": "torch._scaled_mm fast",
         "int8": "torch._int_mm",
         "fp8block": "torch._scaled_mm"}


def sustained(fn, seconds: float = 3.0) -> str:
    """Runs `fn` back to back for about `seconds` while nvidia-smi samples the SM clock, the board power
    and the throttle reasons every 50 ms: the time a call and the middle half of the samples' medians."""
    import subprocess
    import threading
    import time

    query = ["nvidia-smi", "--query-gpu=clocks.sm,power.draw,clocks_event_reasons.active",
             "--format=csv,noheader,nounits", "-i", str(torch.cuda.current_device())]
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    end.synchronize()
    calls = max(20, int(seconds * 1e3 / max(start.elapsed_time(end), 1e-3)))
    samples, stop = [], threading.Event()

    def sample():
        while not stop.is_set():
            out = subprocess.run(query, capture_output=True, text=True).stdout.strip().split(",")
            if len(out) == 3:
                samples.append((float(out[0]), float(out[1]), out[2].strip()))
            time.sleep(0.05)

    thread = threading.Thread(target=sample)
    thread.start()
    time.sleep(0.2)
    start.record()
    for _ in range(calls):
        fn()
    end.record()
    end.synchronize()
    stop.set()
    thread.join()
    return power_summary(start.elapsed_time(end) / calls * 1e3, samples)


def power_summary(us: float, samples: list[tuple[float, float, str]]) -> str:
    """A sustained run's time a call and the medians of the middle half of its (SM clock MHz, board W,
    throttle reasons) samples (the first and last quarter straddle the run's start and end)."""
    mid = samples[len(samples) // 4: 3 * len(samples) // 4] or samples
    if not mid:
        return f"{us:.1f} us a call (nvidia-smi gave no samples)"
    return (f"{us:.1f} us a call, SM clock {statistics.median(c for c, _, _ in mid):.0f} MHz, "
            f"{statistics.median(w for _, w, _ in mid):.0f} W, throttle reasons "
            f"{','.join(sorted({r for _, _, r in mid}))} ({len(mid)} samples)")


def power(kind: str, n: int, k: int, m: int, schedules) -> None:
    """--power: the W8A8 GEMM (each of `schedules`, or the heuristic's pick) and its peer run sustained
    (`sustained`), for where the power limit sets the clock."""
    dtype = torch.int8 if kind == "int8" else torch.float8_e4m3fn
    fast = kind == "fp8fast"
    torch.manual_seed(0)
    b, sb = scaled.quantize_activation(torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / math.sqrt(k), dtype)
    a, sa = scaled.quantize_activation(torch.randn(m, k, device="cuda", dtype=torch.bfloat16), dtype)
    out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    tflop = 2 * m * n * k / 1e12
    runs = {PEERS[kind]: scaled_peer(kind, a, sa, b, sb)}
    for sched in schedules:
        name = sched or scaled.select_schedule(m, n, k, dtype, use_fast_accum=fast)
        runs[name] = lambda sched=sched: scaled.scaled_mm(a, b, sa, sb, out=out, use_fast_accum=fast, schedule=sched)
    print(f"{kind} {n} x {k}, M = {m} ({tflop:.3g} TFLOP a call)")
    for name, fn in runs.items():
        print(f"  {name}: {sustained(fn)}", flush=True)


def markdown_table(rows: list[Row], peer: str = PEERS["w4a16"]) -> str:
    lines = [f"| model | layer | N | K | M | quantgemm us | {peer} us | speedup | floor us | x floor | schedule |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        lines.append(f"| {r.model} | {r.layer} | {r.n} | {r.k} | {r.m} | {r.quantgemm_us:.1f} | {r.torch_us:.1f} | "
                     f"{r.speedup:.2f} | {r.floor_us:.1f} | {r.over_floor:.2f} | {r.schedule} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default=None,
                        help=f"comma-separated, of {list(MODELS)} (default: {','.join(DEFAULT_MODELS)}; "
                             f"deepseek-v3-fp8 for fp8block)")
    parser.add_argument("--m", default=",".join(map(str, DEFAULT_M)), help="comma-separated M values")
    parser.add_argument("--group-size", type=int, default=128)
    parser.add_argument("--weight-type", default="u4b8", choices=mixed_input.WEIGHT_TYPES,
                        help="the weight type of --kind w4a16 (u4b8, u4 with zero points, u8b128, u8)")
    parser.add_argument("--dtype", default="bf16", choices=["bf16", "fp16"],
                        help="--kind w4a16: the activations', scales' and output's dtype (and the peer matmul's)")
    parser.add_argument("--layout", default="sm90", choices=list(mixed_input.LAYOUTS),
                        help="--kind w4a16: the weight's prepacked layout, so the kernels: sm90 (Hopper's "
                             "wgmma kernels) or sm80 (the mma.sync kernels for sm_80 and later)")
    parser.add_argument("--act-order", action="store_true",
                        help="GPTQ act-order weights (--kind w4a16): each call gathers the activation's columns too")
    parser.add_argument("--csv", default=None, help="write the rows to this CSV file")
    parser.add_argument("--markdown", default=None, help="write the rows as a Markdown table to this file")
    parser.add_argument("--no-check", action="store_true", help="skip the correctness check of each point")
    parser.add_argument("--schedules", default=None,
                        help="comma-separated schedules to time instead of the heuristic's pick")
    parser.add_argument("--profile", metavar="N,K,M", default=None,
                        help="only run that problem 4 times, untimed, for a profiler (ncu --launch-skip 3); "
                             "--kind w4a16, w4a8 or fp8block, the first of --schedules or the heuristic's pick")
    parser.add_argument("--timeline", metavar="N,K,M", default=None,
                        help="only print where the time of that problem's calls goes, CTA by CTA, in a CUDA graph "
                             "(a build with -DQUANTGEMM_TIMELINE; the first of --schedules, else the heuristic's; "
                             "--csv: every CTA's record of every call)")
    parser.add_argument("--power", metavar="N,K,M", default=None,
                        help="only run that W8A8 problem (--kind fp8, fp8fast or int8) and its peer back to back "
                             "for about 3 s each, printing the SM clock, board power and throttle reasons that "
                             "nvidia-smi samples meanwhile (--schedules: those, else the heuristic's pick)")
    parser.add_argument("--overhead", action="store_true", help="only measure the host overhead per call")
    parser.add_argument("--kind", default="w4a16", choices=["w4a16", "w4a8", "fp8", "fp8fast", "int8", "fp8block"],
                        help="w4a16 (u4b8 weights, against torch bf16 matmul), w4a8 (u4b8 x e4m3 "
                             "activations quantized per token, against torch bf16 matmul), or W8A8: fp8 (promoted "
                             "accumulation) and fp8fast against torch._scaled_mm, int8 against torch._int_mm, "
                             "or fp8block (1 x 128 / 128 x 128 scales) against torch._scaled_mm")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("quantgemm.bench: no CUDA GPU is visible; the benchmark needs a Hopper (sm_90) GPU.")
        return 1
    major, minor = torch.cuda.get_device_capability()
    if (major, minor) != (9, 0) and not (args.layout == "sm80" and args.kind == "w4a16" and major >= 8):
        print(f"quantgemm.bench: the GPU is sm_{major}{minor}; the benchmark needs a Hopper (sm_90) GPU "
              f"(or sm_80 and later with --layout sm80).")
        return 1
    if args.overhead:
        host_overhead()
        return 0
    if args.timeline:
        n, k, m = (int(x) for x in args.timeline.split(","))
        print(timeline(n, k, m, args.group_size, args.schedules.split(",")[0] if args.schedules else None,
                       csv_path=args.csv))
        return 0
    if args.power:
        if args.kind not in ("fp8", "fp8fast", "int8"):
            parser.error("--power runs --kind fp8, fp8fast or int8")
        n, k, m = (int(x) for x in args.power.split(","))
        power(args.kind, n, k, m, args.schedules.split(",") if args.schedules else (None,))
        return 0
    if args.profile:
        if args.kind not in ("w4a16", "w4a8", "fp8block"):
            parser.error("--profile runs --kind w4a16, w4a8 or fp8block")
        n, k, m = (int(x) for x in args.profile.split(","))
        sched = args.schedules.split(",")[0] if args.schedules else None
        if args.kind == "fp8block":
            a, sa = quantize_fp8_groups(torch.randn(m, k, device="cuda"))
            b, sb = quantize_fp8_blocks(torch.randn(n, k, device="cuda") / math.sqrt(k))
            for _ in range(4):
                block_scaled.block_scaled_mm(a, sa, b, sb, schedule=sched)
            torch.cuda.synchronize()
            return 0
        w_q, scales = quantize_u4b8(torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / math.sqrt(k),
                                    args.group_size)
        w4a8 = args.kind == "w4a8"
        b = mixed_input.prepack_b(w_q, layout=mixed_input.E4M3 if w4a8 else args.layout)
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        a, ts = quantize_fp8(a) if w4a8 else (a, None)
        for _ in range(4):
            mixed_input.mm(a, b, scales, args.group_size, schedule=sched,
                           token_scales=None if ts is None else ts.reshape(-1))
        torch.cuda.synchronize()
        return 0
    try:
        models = parse_models(args.models or ("deepseek-v3-fp8" if args.kind == "fp8block"
                                              else ",".join(DEFAULT_MODELS)))
    except ValueError as e:
        parser.error(str(e))
    ms = [int(x) for x in args.m.split(",") if x.strip()]
    props = torch.cuda.get_device_properties(0)
    l2 = getattr(props, "L2_cache_size", 60 << 20)
    bandwidth = read_bandwidth(torch.device("cuda", torch.cuda.current_device()))
    what = {"w4a16": f"{args.weight_type} group {args.group_size}{' act-order' if args.act_order else ''}, "
                     f"{args.dtype}, {args.layout} kernels; peer torch {args.dtype} matmul",
            "w4a8": f"u4b8 group {args.group_size} x e4m3 per-token activations, bf16 out; peer torch bf16 matmul",
            "fp8": "FP8 e4m3 per-token x per-channel scales, bf16 out; peer torch._scaled_mm",
            "fp8fast": "FP8 e4m3 fast accumulation, per-token x per-channel, bf16 out; peer torch._scaled_mm "
                       "(use_fast_accum)",
            "int8": "INT8 per-token x per-channel scales, bf16 out; peer torch._int_mm (int32 out)",
            "fp8block": "FP8 e4m3, 1 x 128 activation and 128 x 128 weight scales, bf16 out; peer "
                        "torch._scaled_mm (blockwise where available, else rowwise)"}[args.kind]
    print(f"{props.name}, {props.multi_processor_count} SMs, L2 {l2 >> 20} MB, "
          f"read-only stream {bandwidth / 1e12:.2f} TB/s; {what}")
    print(HEADER.replace("torch us", "peer us") if args.kind not in ("w4a16", "w4a8") else HEADER)
    rows = []
    for model in models:
        for layer in MODELS[model]:
            if args.kind == "fp8block":
                rows += bench_block_scaled_shape(model, layer.name, layer.n, layer.k, ms, bandwidth, l2,
                                                 check=not args.no_check,
                                                 schedules=args.schedules.split(",") if args.schedules else (None,))
                continue
            if args.kind == "w4a8":
                rows += bench_w4a8_shape(model, layer.name, layer.n, layer.k, ms, args.group_size, bandwidth, l2,
                                         check=not args.no_check,
                                         schedules=args.schedules.split(",") if args.schedules else (None,))
                continue
            if args.kind != "w4a16":
                rows += bench_scaled_shape(model, layer.name, layer.n, layer.k, ms, args.kind, bandwidth, l2,
                                           check=not args.no_check,
                                           schedules=args.schedules.split(",") if args.schedules else (None,))
                continue
            why = unsupported_reason(layer.n, layer.k, args.group_size)
            if why:
                print(f"{model} {layer.name}: skipped, {why}")
                continue
            rows += bench_shape(model, layer.name, layer.n, layer.k, ms, args.group_size, bandwidth, l2,
                                check=not args.no_check,
                                schedules=args.schedules.split(",") if args.schedules else (None,),
                                weight_type=args.weight_type, layout=args.layout,
                                dtype=torch.float16 if args.dtype == "fp16" else torch.bfloat16,
                                act_order=args.act_order)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(block_scaled_table(rows) if args.kind == "fp8block" else markdown_table(
                rows, f"torch {args.dtype}" if args.kind == "w4a16" else PEERS[args.kind]))
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["model", "layer", "N", "K", "M", "quantgemm_us", "torch_us", "speedup", "floor_us",
                             "x_floor", "schedule", "read_TBps"])
            for r in rows:
                writer.writerow([r.model, r.layer, r.n, r.k, r.m, f"{r.quantgemm_us:.2f}", f"{r.torch_us:.2f}",
                                 f"{r.speedup:.3f}", f"{r.floor_us:.2f}", f"{r.over_floor:.3f}", r.schedule,
                                 f"{bandwidth / 1e12:.3f}"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
