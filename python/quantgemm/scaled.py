"""W8A8 GEMMs: FP8 e4m3 or INT8 activations and weights, fp32 scales per tensor, token or channel,
and bias and INT8 zero-point corrections applied in the kernel's epilogue (docs/math.md):

    out = sa * sb * (a @ b^T - azp[m] * azp_adj[n]) + bias[n]      (out bf16 or fp16)

b is the [N, K] weight (as nn.Linear stores it), not its transpose.
"""

from __future__ import annotations

import torch

from . import _checks
from ._native import compiled_schedules, native
from .mixed_input import _STATUS_WORKSPACE_TOO_SMALL, _workspace
from .quantize import quantize_fp8, quantize_int8

OPERANDS = {torch.float8_e4m3fn: "fp8", torch.int8: "int8"}
OUT_DTYPES = (torch.bfloat16, torch.float16)  # the kernels take either at run time
K_ALIGN = 16  # operand rows 16-byte aligned for the TMA
N_ALIGN = 8   # output rows 16-byte aligned


def family(dtype: torch.dtype, use_fast_accum: bool = True) -> str:
    """The kernel family of a problem: fp8fast (the tensor core's fast accumulation), fp8 (promoted
    into fp32 every 128 of K) or int8. Each family's kernels take the output dtype at run time."""
    kind = OPERANDS[dtype]
    return "fp8fast" if kind == "fp8" and use_fast_accum else kind


def _scale(name: str, x, length: int, what: str) -> bool:
    """Checks a scale (fp32, one value or `length` of them); True when it is a vector."""
    _checks.tensor(name, x, dtype=torch.float32)
    if x.numel() not in (1, length) or (x.dim() > 1 and max(x.shape) != x.numel()):
        raise ValueError(f"{name} must hold one value or {length} ({what}), got shape {tuple(x.shape)}")
    _checks.contiguous(name, x)
    return x.numel() == length and length > 1


def _vector(name: str, x, length: int, dtype: torch.dtype, what: str) -> None:
    _checks.tensor(name, x, dtype=dtype)
    if x.numel() != length or (x.dim() > 1 and max(x.shape) != length):
        raise ValueError(f"{name} must hold {length} values ({what}), got shape {tuple(x.shape)}")
    _checks.contiguous(name, x)


def check_scaled_mm_args(a, b, scale_a, scale_b, bias=None, out_dtype=torch.bfloat16, out=None, azp_adj=None,
                         azp=None, schedule=None, use_fast_accum=True) -> tuple[str, bool, bool]:
    """scaled_mm's checks of what the arguments are (not where they live): they need no GPU and run
    on fake tensors too. Returns (family, scale_a is per token, scale_b is per channel)."""
    _checks.tensor("a", a, ndim=2)
    if a.dtype not in OPERANDS:
        raise TypeError(f"a must have dtype torch.float8_e4m3fn or torch.int8, got {a.dtype}")
    m, n, k = _checks.weight_operand(a, b)
    if out_dtype not in OUT_DTYPES:
        raise TypeError(f"out_dtype must be torch.bfloat16 or torch.float16, got {out_dtype}")
    per_token = _scale("scale_a", scale_a, m, "per tensor, or per token: M")
    per_channel = _scale("scale_b", scale_b, n, "per tensor, or per channel: N")
    if bias is not None:
        _vector("bias", bias, n, out_dtype, "one per output channel, in out_dtype")
    if azp_adj is not None or azp is not None:
        if a.dtype != torch.int8:
            raise TypeError(f"zero points are for int8 operands, got {a.dtype}")
        if azp_adj is None:
            raise ValueError("azp_adj must be given with azp (azp_adj[n] = sum_k b[n, k])")
        _vector("azp_adj", azp_adj, n, torch.int32, "one per output channel")
        if azp is not None:
            _vector("azp", azp, m, torch.int32, "one per token")
    if out is not None:
        _checks.tensor("out", out, dtype=out_dtype, ndim=2)
        _checks.shape("out", out, (m, n))
    fam = family(a.dtype, use_fast_accum)
    if schedule is not None and schedule not in supported_schedules(fam):
        raise ValueError(f"schedule must be one of {supported_schedules(fam)}, got {schedule!r}")
    return fam, per_token, per_channel


def supported_schedules(family_name: str) -> list[str]:
    """The schedules compiled for a W8A8 family (family() names it)."""
    return list(compiled_schedules(family_name))


def select_schedule(m: int, n: int, k: int, dtype: torch.dtype = torch.float8_e4m3fn,
                    use_fast_accum: bool = True) -> str:
    """The schedule the dispatch picks for an M x N x K problem."""
    return native().select(family(dtype, use_fast_accum), m, _round_up(n, N_ALIGN), _round_up(k, K_ALIGN))


def _round_up(x: int, to: int) -> int:
    return (x + to - 1) // to * to


def _pad(x: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    """x zero-padded to [rows, cols] (a copy)."""
    padded = x.new_zeros((rows, cols))
    padded[: x.shape[0], : x.shape[1]] = x
    return padded


def _aligned(x: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    """x if the TMA can read it as a [rows, cols] operand (16-byte aligned base and row stride), else
    a zero-padded copy of that shape."""
    ok = (x.shape[1] == cols and x.data_ptr() % 16 == 0
          and (x.shape[0] == 1 or (x.stride(0) * x.element_size()) % 16 == 0))
    return x if ok else _pad(x, rows, cols)


def _out_buffer(out: torch.Tensor, n_pad: int) -> torch.Tensor:
    """out if the kernel can store into it (n_pad columns, 16-byte aligned rows), else a scratch
    [M, n_pad] the caller copies from."""
    m, n = out.shape
    if n_pad == n and out.data_ptr() % 16 == 0 and (m == 1 or (out.stride(0) * out.element_size()) % 16 == 0):
        return out
    return torch.empty((m, n_pad), dtype=out.dtype, device=out.device)


def _ld(x: torch.Tensor, cols: int) -> int:
    """The row stride the kernel reads x with (a one-row tensor's own may be anything)."""
    return x.stride(0) if x.shape[0] > 1 else cols


def _launch(index: int, call) -> None:
    """call(workspace, stream) -> (status, bytes needed) on torch's current stream, once more with a
    workspace grown to what it asks."""
    stream = torch._C._cuda_getCurrentRawStream(index)
    status, need = call(_workspace.get(index, stream)[0], stream)
    if status == _STATUS_WORKSPACE_TOO_SMALL:
        call(_workspace.get(index, stream, need)[0], stream)


def _pad_vector(x: torch.Tensor | None, length: int, vector: bool) -> torch.Tensor | None:
    if x is None or not vector or x.numel() == length:
        return x
    return torch.nn.functional.pad(x.reshape(-1), (0, length - x.numel()))


def scaled_mm(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor,
              bias: torch.Tensor | None = None, out_dtype: torch.dtype = torch.bfloat16,
              out: torch.Tensor | None = None, use_fast_accum: bool = True, schedule: str | None = None,
              azp_adj: torch.Tensor | None = None, azp: torch.Tensor | None = None) -> torch.Tensor:
    """out[M, N] = scale_a * scale_b * (a @ b^T) + bias, with fp32 accumulation (int32 for int8).

    a: [M, K] torch.float8_e4m3fn or torch.int8 on a Hopper GPU, unit stride along K.
    b: [N, K] weight of a's dtype, unit stride along K.
    scale_a: fp32, one value (per tensor) or M values (per token; [M] or [M, 1]).
    scale_b: fp32, one value (per tensor) or N values (per channel; [N], [N, 1] or [1, N]).
    bias: optional [N] in out_dtype. out_dtype: torch.bfloat16 or torch.float16.
    out: optional [M, N] destination (unit stride along N); allocated otherwise.
    use_fast_accum: FP8 only: the tensor core's own accumulation (faster at large M) rather than
    promoting into fp32 every 128 of K (docs/math.md has the accuracy of each).
    azp_adj, azp: see scaled_mm_azp.
    K not a multiple of 16 and N not a multiple of 8 work by zero-padding copies of the operands for
    the call (pad the weight once, up front, to avoid the copy); row strides that are not a multiple
    of 16 bytes are copied likewise. Runs on torch's current stream without synchronizing the host.
    """
    fam, per_token, per_channel = check_scaled_mm_args(a, b, scale_a, scale_b, bias, out_dtype, out, azp_adj, azp,
                                                       schedule, use_fast_accum)
    m, k = a.shape
    n = b.shape[0]
    index = _checks.cuda_index("a", a)
    for name, x in (("b", b), ("scale_a", scale_a), ("scale_b", scale_b), ("bias", bias), ("azp_adj", azp_adj),
                    ("azp", azp), ("out", out)):
        if x is not None:
            _checks.same_device(name, x, index)
    if out is None:
        out = torch.empty((m, n), dtype=out_dtype, device=a.device)
    if m == 0:
        return out
    _checks.hopper("scaled_mm", index)
    if a.stride(1) != 1 and k > 1:
        raise ValueError(f"a must have unit stride along K, got strides {a.stride()}")
    if b.stride(1) != 1 and k > 1:
        raise ValueError(f"b must have unit stride along K, got strides {b.stride()}")
    if out.stride(1) != 1 and n > 1:
        raise ValueError(f"out must have unit stride along N, got strides {out.stride()}")
    k_pad, n_pad = _round_up(k, K_ALIGN), _round_up(n, N_ALIGN)
    a_run = _aligned(a, m, k_pad)
    b_run = _aligned(b, n_pad, k_pad)
    out_run = _out_buffer(out, n_pad)
    scale_b_run = _pad_vector(scale_b, n_pad, per_channel)
    bias_run = _pad_vector(bias, n_pad, True)
    azp_adj_run = _pad_vector(azp_adj, n_pad, True)
    _launch(index, lambda ws, stream: native().mm_scaled(
        fam, schedule or "", a_run.data_ptr(), _ld(a_run, k_pad), b_run.data_ptr(), _ld(b_run, k_pad),
        scale_a.data_ptr(), per_token, scale_b_run.data_ptr(), per_channel,
        0 if bias_run is None else bias_run.data_ptr(), 0 if azp_adj_run is None else azp_adj_run.data_ptr(),
        0 if azp is None else azp.data_ptr(), out_dtype == torch.float16, out_run.data_ptr(), _ld(out_run, n_pad),
        m, n_pad, k_pad, ws.data_ptr(), ws.numel(), index, stream))
    if out_run is not out:
        out.copy_(out_run[:, :n])
    return out


def scaled_mm_azp(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor,
                  azp_adj: torch.Tensor, azp: torch.Tensor | None = None, bias: torch.Tensor | None = None,
                  out_dtype: torch.dtype = torch.bfloat16, out: torch.Tensor | None = None,
                  schedule: str | None = None) -> torch.Tensor:
    """INT8 with asymmetric activations, a = round(x / sa) + azp:

        out = sa * sb * (a @ b^T - azp[m] * azp_adj[n]) + bias[n]

    azp_adj: int32 [N], sum_k b[n, k] (azp_adjust(b)); with a per-tensor zero point and azp None,
    azp_adj may carry it (azp * sum_k b[n, k]). azp: optional int32 [M], the zero point of each token.
    The correction is exact (int32) before the scales. Otherwise as scaled_mm.
    """
    return scaled_mm(a, b, scale_a, scale_b, bias, out_dtype, out, schedule=schedule, azp_adj=azp_adj, azp=azp)


def quantize_activation(x: torch.Tensor, dtype: torch.dtype = torch.float8_e4m3fn):
    """(a, scale_a): x quantized per token, symmetrically, to `dtype` (e4m3 or int8), for scaled_mm."""
    return quantize_fp8(x) if dtype == torch.float8_e4m3fn else quantize_int8(x)


def azp_adjust(b: torch.Tensor, azp: int | None = None) -> torch.Tensor:
    """azp_adj for scaled_mm_azp: sum_k b[n, k] as int32 [N], times `azp` if given (a per-tensor
    zero point folded in)."""
    adj = b.to(torch.int32).sum(dim=1, dtype=torch.int32)
    return adj if azp is None else adj * int(azp)
