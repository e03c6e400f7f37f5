"""Mixed-input GEMM: 4- or 8-bit weights prepacked offline, bf16 or fp16 activations, group scales
(and zero points) in the K loop.

    out = a @ ((w_q - zero) * group_scales[k // group_size, n])^T     (fp32 accumulation, out in a's dtype)

    zero = 8 for u4b8 weights (GPTQ symmetric), 128 for u8b128 ones, group_zeros[k // group_size, n]
    for u4 and u8 weights.

W4A8: u4b8 weights prepacked in the "sm90_e4m3" layout against e4m3 activations (with their fp32
per-token scales as token_scales), on the fp8 tensor core; the output takes the group scales' dtype.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass

import torch

from . import _checks
from ._native import compiled_schedules, native
from .quantize import group_count

FAMILY = "u4b8_bf16"  # the family of the default weight type
WEIGHT_TYPES = ("u4b8", "u4", "u8b128", "u8")  # u4b8 / u8b128: zero point 8 / 128; u4 / u8: per group
BITS = {"u4b8": 4, "u4": 4, "u8b128": 8, "u8": 8}
#: the fixed zero point of a weight type (also the code the padding takes); None: zero points per group
ZERO_POINTS = {"u4b8": 8, "u4": None, "u8b128": 128, "u8": None}
#: signed codes prepack_b also takes (int8 two's complement: s4 -8..7, s8 -128..127): the same values as
#: the fixed-zero-point type they are stored as, code = q + zero point
SIGNED_TYPES = {"s4": "u4b8", "s8": "u8b128"}
DTYPES = {torch.bfloat16: "bf16", torch.float16: "fp16"}  # activations, scales, zero points, output
BLOCK_N = 128  # prepacked block: 128 weight rows ...
BLOCK_K = 64   # ... by 64 k
#: the prepacked layouts: "sm90", the wgmma kernels' (Hopper), and "sm80", the mma.sync kernels'
#: (sm_80 and later: Ampere, Ada, and Hopper too); each with its (rows, columns) block
#: and "sm90_e4m3", the W4A8 kernels' (Hopper, e4m3 activations; u4b8 weights only)
LAYOUTS = {"sm90": (BLOCK_N, BLOCK_K), "sm80": (64, 64), "sm90_e4m3": (BLOCK_N, BLOCK_K)}
E4M3 = "sm90_e4m3"
E4M3_WEIGHT_TYPES = ("u4b8",)
E4M3_GROUP = 128  # W4A8 groups: a multiple of 128 (one scale row a 128-deep stage) or all of K
ALIGN = 8      # N and K: rows of 16-bit activations and outputs 16-byte aligned for the TMA
_STATUS_WORKSPACE_TOO_SMALL = 2


class PrepackedWeight:
    """An [N, K] weight in one of quantgemm's prepacked layouts (docs/layout.md), zero-padded to whole
    blocks (`layout` "sm90": a multiple of 128 rows and 64 columns, for the Hopper kernels; "sm80":
    64 and 64, for the mma.sync kernels); opaque to users. `perm` ([K] int64, or None): for GPTQ
    act-order weights, column j of the weight is input channel perm[j], and mm takes the
    activation's columns in that order."""

    __slots__ = ("data", "n", "k", "weight_type", "perm", "layout")

    def __init__(self, data: torch.Tensor, n: int, k: int, weight_type: str, perm: torch.Tensor | None = None,
                 layout: str = "sm90"):
        self.data = data
        self.n = n
        self.k = k
        self.weight_type = weight_type
        self.perm = perm
        self.layout = layout

    @property
    def device(self) -> torch.device:
        return self.data.device

    @property
    def shape(self) -> tuple[int, int]:
        return (self.n, self.k)

    def to(self, device) -> "PrepackedWeight":
        return PrepackedWeight(self.data.to(device), self.n, self.k, self.weight_type,
                               None if self.perm is None else self.perm.to(device), self.layout)

    def __repr__(self) -> str:
        return f"PrepackedWeight({self.weight_type}, N={self.n}, K={self.k}, layout={self.layout}, device={self.device})"


def _check_weight_shape(n: int, k: int) -> None:
    if n <= 0 or k <= 0:
        raise ValueError(f"the weight must have N > 0 and K > 0, got N={n}, K={k}")
    for name, v in (("N", n), ("K", k)):
        if v % ALIGN != 0:
            raise ValueError(f"{name}={v} is not supported: the weight's {name} must be a multiple of {ALIGN} "
                             f"(activation and output rows must be 16-byte aligned)")


def _padded(n: int, k: int, layout: str = "sm90") -> tuple[int, int]:
    """The prepacked shape: N and K rounded up to whole blocks of `layout`."""
    block_n, block_k = LAYOUTS[layout]
    return -(-n // block_n) * block_n, -(-k // block_k) * block_k


def default_layout(device: torch.device | str) -> str:
    """The layout prepack_b picks for `device`: "sm90" on an sm_90 GPU (and on the CPU), "sm80" on
    any other GPU from sm_80 on."""
    device = torch.device(device)
    if device.type != "cuda":
        return "sm90"
    major, minor = torch.cuda.get_device_capability(device)
    if (major, minor) == (9, 0):
        return "sm90"
    if major >= 8:
        return "sm80"
    raise RuntimeError(f"prepack_b: quantgemm's kernels need an sm_80 or later GPU; {device} is sm_{major}{minor}")


def _check_layout(layout: str) -> None:
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {list(LAYOUTS)}, got {layout!r}")


GROUP_32 = BLOCK_K // 2  # groups of half a k-block: kernels of their own, two scale rows a block


def _check_group(k: int, group_size: int, layout: str = "sm90") -> int:
    """The number of scale rows; ValueError unless group_size is -1 (or K), 32, or a multiple of 64,
    dividing K (for the e4m3 layout: -1, K, or a multiple of 128)."""
    groups = group_count(k, group_size)
    if layout == E4M3:
        if groups > 1 and (k // groups) % E4M3_GROUP != 0:
            raise ValueError(f"group_size must be a multiple of {E4M3_GROUP} or -1 for W4A8 (e4m3 activations), "
                             f"got {group_size}")
    elif groups > 1 and (k // groups) % BLOCK_K != 0 and k // groups != GROUP_32:
        raise ValueError(f"group_size must be {GROUP_32}, a multiple of {BLOCK_K} or -1, got {group_size}")
    return groups


def _check_activation_k(k: int, layout: str) -> None:
    """ValueError unless the kernels of `layout` read activation rows of K values (W4A8's e4m3 rows:
    16-byte aligned, K a multiple of 16; the 16-bit ones: any K the weight takes)."""
    if layout == E4M3 and k % 16:
        raise ValueError(f"K={k} is not supported for W4A8: e4m3 activation rows must be 16-byte aligned "
                         f"(K a multiple of 16)")


def _two_scale_rows(k: int, group_size: int, layout: str = "sm90") -> bool:
    """Whether the problem takes the kernels for groups of 32 (two scale rows a 64-deep block; the
    e4m3 layout has none)."""
    return group_size == GROUP_32 and k != GROUP_32 and layout != E4M3


def check_layout_takes(weight_type: str, layout: str, types: tuple[str, ...] = WEIGHT_TYPES + tuple(SIGNED_TYPES)) -> None:
    """ValueError unless weights of `weight_type` (a signed one: as the type it is stored as) can be
    prepacked in `layout` (the e4m3 layout takes u4b8 codes only), naming those of `types` it takes."""
    if layout == E4M3 and SIGNED_TYPES.get(weight_type, weight_type) not in E4M3_WEIGHT_TYPES:
        takes = tuple(t for t in types if SIGNED_TYPES.get(t, t) in E4M3_WEIGHT_TYPES)
        raise ValueError(f"weight_type must be one of {takes} for the {E4M3} layout (W4A8), got {weight_type!r}")


def check_prepack_args(w_q: torch.Tensor, weight_type: str, perm: torch.Tensor | None = None,
                       layout: str = "sm90") -> tuple[int, int]:
    """prepack_b's checks of what its arguments are (no GPU, fake tensors too); the padded shape."""
    _check_layout(layout)
    if weight_type not in WEIGHT_TYPES + tuple(SIGNED_TYPES):
        raise ValueError(f"weight_type must be one of {WEIGHT_TYPES + tuple(SIGNED_TYPES)}, got {weight_type!r}")
    check_layout_takes(weight_type, layout)
    _checks.tensor("w_q", w_q, dtype=torch.int8 if weight_type in SIGNED_TYPES else torch.uint8, ndim=2)
    n, k = w_q.shape
    _check_weight_shape(n, k)
    if perm is not None:
        _checks.tensor("perm", perm, dtype=torch.int64, ndim=1)
        _checks.shape("perm", perm, (k,))
    return _padded(n, k, layout)


def prepack_b(w_q: torch.Tensor, weight_type: str = "u4b8", perm: torch.Tensor | None = None,
              layout: str | None = None) -> PrepackedWeight:
    """Rewrites [N, K] uint8 codes (one per byte: 0..15 for u4b8 and u4, 0..255 for u8b128 and u8)
    into the prepacked layout, on w_q's device. Signed codes, int8 [N, K] of -8..7 (weight_type
    "s4") or -128..127 ("s8"), are the values of u4b8 and u8b128 (q - 8, q - 128), and are stored
    as those: the returned weight's weight_type is "u4b8" or "u8b128", which mm takes.

    N and K must be multiples of 8; the layout pads them to whole 128 x 64 blocks, once, here: mm
    never copies the weight. Runs once per weight, offline: it checks the codes' range, which reads
    them back.

    perm: for GPTQ act-order (desc_act) weights, the input-channel order of w_q's columns (column j
    is input channel perm[j]; group_size consecutive columns share a scale row), as
    checkpoint.from_gptq returns it: it is kept with the prepacked weight, and mm gathers the
    activation's columns in that order.

    layout: "sm90" (the Hopper kernels) or "sm80" (the mma.sync kernels, for sm_80 and later
    GPUs); by default the one for w_q's device (default_layout). mm runs the kernels of the
    weight's layout. "sm90_e4m3" (u4b8 only): the W4A8 kernels, which take e4m3 activations.
    """
    if layout is None:
        layout = default_layout(w_q.device) if isinstance(w_q, torch.Tensor) else "sm90"
    n_pad, k_pad = check_prepack_args(w_q, weight_type, perm, layout)
    n, k = w_q.shape
    if weight_type in SIGNED_TYPES:
        w_q, weight_type = _offset_binary(w_q, weight_type)
    bits = BITS[weight_type]
    if bits == 4 and w_q.numel() and int(w_q.max()) > 15:
        raise ValueError(f"w_q must hold 4-bit codes (0..15) for {weight_type}, got a maximum of {int(w_q.max())}")
    if perm is not None:
        perm = perm.to(w_q.device)
        if not torch.equal(torch.sort(perm).values, torch.arange(k, device=perm.device)):
            raise ValueError(f"perm must be a permutation of 0..{k - 1}")
    pad_code = 8 if bits == 4 else 128  # (padding never shows in the output)
    codes = torch.nn.functional.pad(w_q, (0, k_pad - k, 0, n_pad - n), value=pad_code) \
        if (n_pad, k_pad) != (n, k) else w_q.contiguous()
    packed = torch.empty(n_pad * k_pad * bits // 8, dtype=torch.uint8, device=w_q.device)
    if w_q.device.type == "cuda":
        index = w_q.get_device()
        _checks.architecture("prepack_b", index, layout)
        native().prepack(layout, bits, codes.data_ptr(), n_pad, k_pad, packed.data_ptr(), index,
                         torch._C._cuda_getCurrentRawStream(index))
    else:
        native().prepack_host(layout, bits, codes.data_ptr(), n_pad, k_pad, packed.data_ptr())
    return PrepackedWeight(packed, n, k, weight_type, perm, layout)


def _offset_binary(w_q: torch.Tensor, signed_type: str) -> tuple[torch.Tensor, str]:
    """Signed codes (int8) as the codes of the type that stores them, q + its zero point."""
    stored = SIGNED_TYPES[signed_type]
    zero = ZERO_POINTS[stored]
    if stored == "u4b8" and w_q.numel() and (int(w_q.min()) < -8 or int(w_q.max()) > 7):
        raise ValueError(f"w_q must hold signed 4-bit codes (-8..7) for s4, got {int(w_q.min())}..{int(w_q.max())}")
    return (w_q.to(torch.int16) + zero).to(torch.uint8), stored


def unpack_b(b: PrepackedWeight) -> torch.Tensor:
    """Inverse of prepack_b (host reference): [N, K] uint8 codes on the CPU, without the padding."""
    data = b.data.cpu().contiguous()
    n_pad, k_pad = _padded(b.n, b.k, b.layout)
    codes = torch.empty(n_pad, k_pad, dtype=torch.uint8)
    native().unpack_host(b.layout, BITS[b.weight_type], data.data_ptr(), n_pad, k_pad, codes.data_ptr())
    return codes[:b.n, :b.k].contiguous()


_FAMILIES = {(w, d, g32, "sm90"): f"{w}{'_g32' if g32 else ''}_{name}"
             for w in WEIGHT_TYPES for d, name in DTYPES.items() for g32 in (False, True)}
_FAMILIES.update({(w, d, g32, "sm80"): f"sm80_{w}_{name}"  # (every group size on the same kernels)
                  for w in WEIGHT_TYPES for d, name in DTYPES.items() for g32 in (False, True)})
_FAMILIES.update({(w, d, False, E4M3): f"{w}_e4m3_{name}"  # (d: the output's dtype)
                  for w in E4M3_WEIGHT_TYPES for d, name in DTYPES.items()})


def _family(weight_type: str, dtype: torch.dtype = torch.bfloat16, group32: bool = False, layout: str = "sm90") -> str:
    """The kernel family of a weight type, an activation dtype (the output's, for the e4m3 layout),
    (group32) groups of 32 and a layout."""
    family = _FAMILIES.get((weight_type, dtype, group32, layout))
    if family is not None:
        return family
    if weight_type not in WEIGHT_TYPES:
        raise ValueError(f"weight_type must be one of {WEIGHT_TYPES}, got {weight_type!r}")
    _check_layout(layout)
    raise TypeError(f"dtype must be one of {list(DTYPES)}, got {dtype}")


def supported_schedules(weight_type: str = "u4b8", dtype: torch.dtype = torch.bfloat16,
                        group_size: int = 128, layout: str = "sm90") -> list[str]:
    """Every compiled schedule for `weight_type` weights, `dtype` activations, groups of
    `group_size` (on sm90, 32 has schedules of its own, every other size shares them) and a weight
    prepacked in `layout`, each usable as mm(..., schedule=...)."""
    return list(compiled_schedules(_family(weight_type, dtype, group_size == GROUP_32 and layout != E4M3, layout)))


def select_schedule(m: int, n: int, k: int, weight_type: str = "u4b8", dtype: torch.dtype = torch.bfloat16,
                    group_size: int = 128, layout: str = "sm90") -> str:
    """The schedule the heuristic picks for an M x N x K problem."""
    return native().select(_family(weight_type, dtype, _two_scale_rows(k, group_size, layout), layout), m, n, k)


#: the tile of an sm90 schedule name (<family>_<tile_n>x<tile_m>x<tile_k>_c<cluster>)
_SM90_TILE = re.compile(r"_(\d+)x(\d+)x\d+_c\d+x\d+x\d+$")
#: the sm90 token tile whose kernels run mma.sync and scale fp32 partial sums (the kernels' sm90_sync_mma)
SYNC_TILE_M = 8


def _sm90_tile(schedule: str) -> tuple[int, int]:
    """(tile_n, tile_m) of an sm90 mixed-input schedule name."""
    tile = _SM90_TILE.search(schedule)
    if tile is None:
        raise ValueError(f"{schedule!r} is not an sm90 mixed-input schedule name")
    return int(tile.group(1)), int(tile.group(2))


def w4a8_accumulation(schedule: str, k: int) -> int:
    """How much of K the fp8 tensor core accumulates before fp32 takes over, for a W4A8 schedule:
    128 on the tiles that promote each stage's partial sums, all of K on the wide ones (more than 64
    accumulators a thread: tile_n * tile_m > 128 * 128) that rescale their accumulators at each
    group change instead (docs/math.md). The kernel and the codegen say the same (tests/test_codegen.py)."""
    tile_n, tile_m = _sm90_tile(schedule)
    return k if tile_n * tile_m > 128 * 128 else min(k, 128)


def exact_weight(m: int, n: int, k: int, weight_type: str = "u4b8", dtype: torch.dtype = torch.bfloat16,
                 group_size: int = 128, layout: str = "sm90", schedule: str | None = None) -> bool:
    """Whether mm keeps the dequantized weight (q - zero) * s unrounded on this problem
    (reference.mm_quantized's exact_weight), with `schedule` or the heuristic's pick: the sm80 and
    W4A8 kernels and the sm90 8-token tiles (mma.sync) apply the group scales to fp32 partial
    sums; the other sm90 kernels scale each code in bf16/fp16, rounding it (docs/math.md)."""
    if layout != "sm90":
        return True
    if schedule is None:
        schedule = select_schedule(m, n, k, weight_type, dtype, group_size, layout)
    return _sm90_tile(schedule)[1] == SYNC_TILE_M


@dataclass
class Explanation:
    """What mm would do with an M x N x K problem, and why (explain())."""

    m: int
    n: int
    k: int
    group_size: int
    schedule: str | None       #: the kernel mm would launch (None: none, see refused and notes)
    rule: str | None           #: the dispatch rule that picked it
    refused: list[str]         #: why no kernel can take the problem
    schedules: dict[str, str]  #: every compiled schedule: picked, able, or why not
    notes: list[str]
    weight_type: str = "u4b8"
    dtype: torch.dtype = torch.bfloat16
    layout: str = "sm90"

    def __str__(self) -> str:
        kind = f"{self.weight_type} x {DTYPES.get(self.dtype, self.dtype)}, {self.layout} layout"
        lines = [f"quantgemm.mm, {kind}, M={self.m} N={self.n} K={self.k} group_size={self.group_size}:"]
        if self.schedule:
            lines.append(f"  runs {self.schedule} ({self.rule})")
        lines += [f"  refused: {r}" for r in self.refused] + [f"  note: {x}" for x in self.notes]
        lines += [f"  {name}: {why}" for name, why in self.schedules.items()]
        return "\n".join(lines)


def _rule_holds(condition: str, m: int, n: int, k: int) -> bool:
    values = {"M": m, "N": n, "K": k}
    terms = [t.strip() for t in condition.split("&&") if t.strip()]
    return all(values[var] <= int(bound) for var, bound in (re.fullmatch(r"([MNK]) <= (\d+)", t).groups()
                                                          for t in terms))


def explain(m: int, n: int, k: int, group_size: int = 128, schedule: str | None = None,
            weight_type: str = "u4b8", dtype: torch.dtype = torch.bfloat16, layout: str = "sm90") -> Explanation:
    """Which schedule mm picks for an M x N x K problem and the rule that picks it; for every compiled
    schedule, whether it could serve the problem, and if not, why. Needs no GPU."""
    refused = []
    if m < 0:
        refused.append(f"M must be >= 0, got {m}")
    for check in (lambda: _check_weight_shape(n, k), lambda: _check_group(k, group_size, layout)):
        try:
            check()
        except ValueError as e:
            refused.append(str(e))
    family = _family(weight_type, dtype, _two_scale_rows(k, group_size, layout), layout)
    compiled = list(compiled_schedules(family))
    if not compiled:
        refused.append(_not_built(family))
    elif schedule is not None and schedule not in compiled:
        refused.append(f"schedule must be one of {compiled}, got {schedule!r}")
    notes, picked, rule = [], None, None
    if not refused and m == 0:
        notes.append("M = 0: mm returns an empty [0, N] result and launches nothing")
    elif not refused:
        if schedule is not None:
            picked, rule = schedule, "named by the caller"
        else:
            picked = native().select(family, m, n, k)
            condition = next(c for c, name in native().rules(family) if _rule_holds(c, m, n, k))
            rule = f"rule: {condition or 'any problem'}"
        if layout == E4M3 and w4a8_accumulation(picked, k) > 128:
            notes.append(f"{picked} rescales its accumulators at each group: the fp8 tensor core accumulates "
                         f"over all of K={k} (docs/math.md); a 128 x 128 or narrower schedule promotes every 128")
    schedules = {}
    for name in compiled:
        if refused:
            schedules[name] = "cannot: the problem is refused"
        elif name == picked:
            schedules[name] = "picked"
        else:
            schedules[name] = "could serve it (every compiled schedule takes every accepted problem)"
    return Explanation(m, n, k, group_size, picked, rule, refused, schedules, notes, weight_type, dtype, layout)


class _Workspace:
    """Stream-K scratch per (device, stream): fp32 partials, and arrival counters that the kernel
    leaves at zero. Grown on demand, never shrunk; launches on one stream are ordered, so reuse is safe."""

    def __init__(self):
        self._lock = threading.Lock()
        self._buffers: dict[tuple[int, int], tuple[torch.Tensor, torch.Tensor]] = {}

    def get(self, device: int, stream: int, partial_bytes: int = 0, counters: int = 0):
        key = (device, stream)
        buffers = self._buffers.get(key)
        if buffers is not None and buffers[0].numel() >= partial_bytes and buffers[1].numel() >= counters:
            return buffers
        with self._lock:
            partials, counts = self._buffers.get(key, (None, None))
            if partials is None or partials.numel() < partial_bytes:
                partials = torch.empty(max(partial_bytes, 1 << 16), dtype=torch.uint8, device=f"cuda:{device}")
            if counts is None or counts.numel() < counters:
                counts = torch.zeros(max(counters, 1024), dtype=torch.int32, device=f"cuda:{device}")
            self._buffers[key] = (partials, counts)
            return partials, counts


_workspace = _Workspace()


def check_mm_args(a: torch.Tensor, b: PrepackedWeight, group_scales: torch.Tensor, group_size: int,
                  out: torch.Tensor | None = None, schedule: str | None = None,
                  group_zeros: torch.Tensor | None = None, channel_scales: torch.Tensor | None = None,
                  token_scales: torch.Tensor | None = None) -> tuple[str, int, int]:
    """mm's checks of what the arguments are (types, dtypes, shapes, layouts; not where they live):
    they need no GPU and run on fake tensors too. Returns (kernel family, M, N)."""
    if not isinstance(b, PrepackedWeight):
        raise TypeError(f"b must be a PrepackedWeight from quantgemm.prepack_b, got {type(b).__name__}")
    _checks.tensor("a", a, ndim=2)
    e4m3 = b.layout == E4M3
    if e4m3 and a.dtype != torch.float8_e4m3fn:
        raise TypeError(f"a must have dtype torch.float8_e4m3fn for a weight prepacked in the {E4M3} layout "
                        f"(W4A8), got {a.dtype}")
    if not e4m3 and a.dtype not in DTYPES:
        hint = (f" (or torch.float8_e4m3fn with a weight prepacked in the {E4M3} layout)"
                if a.dtype == torch.float8_e4m3fn else "")
        raise TypeError(f"a must have dtype torch.bfloat16 or torch.float16{hint}, got {a.dtype}")
    m, k = a.shape
    n = b.n
    if k != b.k:
        raise ValueError(f"a must have K={b.k} columns to match b ({b.n}x{b.k}), got shape {tuple(a.shape)}")
    _check_activation_k(k, b.layout)
    if not isinstance(group_size, int) or isinstance(group_size, bool):
        raise TypeError(f"group_size must be an int, got {type(group_size).__name__}")
    groups = _check_group(k, group_size, b.layout)
    out_dtype = a.dtype
    if e4m3:
        _checks.tensor("group_scales", group_scales)
        if group_scales.dtype not in DTYPES:
            raise TypeError(f"group_scales must have dtype torch.bfloat16 or torch.float16 (the output's), "
                            f"got {group_scales.dtype}")
        out_dtype = group_scales.dtype
    _checks.dense("group_scales", group_scales, out_dtype, (groups, n))
    if out is not None:
        _checks.tensor("out", out, dtype=out_dtype, ndim=2)
        _checks.shape("out", out, (m, n))
    family = _family(b.weight_type, out_dtype, _two_scale_rows(k, group_size, b.layout), b.layout)
    if ZERO_POINTS[b.weight_type] is None:
        if group_zeros is None:
            raise ValueError(f"group_zeros must be given for a {b.weight_type} weight (zero points per group and column)")
        _checks.dense("group_zeros", group_zeros, a.dtype, (groups, n))
    elif group_zeros is not None:
        raise ValueError(f"group_zeros must be None for a {b.weight_type} weight (its zero point is fixed)")
    if channel_scales is not None:
        _checks.dense("channel_scales", channel_scales, torch.float32, (n,))
    if token_scales is not None:
        _checks.dense("token_scales", token_scales, torch.float32, (m,))
    if schedule is not None and schedule not in compiled_schedules(family):
        raise ValueError(f"schedule must be one of {list(compiled_schedules(family))}, got {schedule!r}")
    return family, m, n


#: the activation dtypes gather_columns takes its kernel for
_GATHERED = (torch.bfloat16, torch.float16, torch.float8_e4m3fn)


def gather_columns(a: torch.Tensor, perm: torch.Tensor) -> torch.Tensor:
    """a.index_select(1, perm): the activation's columns in the order of a GPTQ act-order weight. On
    a GPU, rows of bf16, fp16 or e4m3 with unit column stride (and K a multiple of 8) take one kernel
    of quantgemm's, which lets the GEMM launched after it start streaming its weight while it gathers
    (programmatic dependent launch); anything else takes torch's index_select."""
    m, k = a.shape
    if not (a.is_cuda and a.dtype in _GATHERED and k % 8 == 0 and a.stride(1) == 1 and (m <= 1 or a.stride(0) >= k)
            and perm.is_cuda and perm.get_device() == a.get_device() and perm.dtype == torch.int64
            and perm.shape == (k,) and perm.is_contiguous() and perm.data_ptr() % 16 == 0):
        if a.dtype == torch.float8_e4m3fn:  # (torch's gathers of fp8 as the bytes they are)
            return a.view(torch.uint8).index_select(1, perm).view(a.dtype)
        return a.index_select(1, perm)
    out = torch.empty((m, k), dtype=a.dtype, device=a.device)
    index = a.get_device()
    native().gather_columns(a.data_ptr(), a.element_size(), a.stride(0) if m > 1 else k, m, k, perm.data_ptr(),
                            out.data_ptr(), k, index, torch._C._cuda_getCurrentRawStream(index))
    return out


def _not_built(family: str) -> str:
    return (f"this build has no {family} kernels (a subset build; a default one has them, or add "
            f"-Ccmake.define.QUANTGEMM_SCHEDULES=\"...;{family}\")")


def mm(a: torch.Tensor, b: PrepackedWeight, group_scales: torch.Tensor, group_size: int,
       out: torch.Tensor | None = None, schedule: str | None = None,
       group_zeros: torch.Tensor | None = None, channel_scales: torch.Tensor | None = None,
       token_scales: torch.Tensor | None = None) -> torch.Tensor:
    """out[M, N] = a @ ((w_q - zero) * group_scales[k // group_size, n])^T, zero = 8 for u4b8 weights,
    128 for u8b128 ones and group_zeros[k // group_size, n] for u4 and u8 weights.

    a: [M, K] bf16 or fp16 on a GPU that runs b's layout's kernels (sm90: Hopper; sm80: sm_80 and
    later), unit stride along K, row stride a multiple of 8 elements; the scales, zero points and
    output have a's dtype.
    b: prepack_b(w_q) of the [N, K] codes, on a's device; its layout picks the kernels.
    group_scales: [K / group_size, N], a's dtype, contiguous.
    group_size: a multiple of 64 dividing K, 32 dividing K (kernels of their own, which load two
    scale rows per 64-deep block), or -1 for one group over K.
    out: optional [M, N] destination in a's dtype (same stride rules as a); allocated by torch otherwise.
    schedule: a name from supported_schedules(b.weight_type, a.dtype, group_size) to override the heuristic.
    group_zeros: for u4 and u8 weights (and only for them), the zero points [K / group_size, N] as
    integers (0..15, 0..255) in a's dtype, contiguous. The kernel computes (q - zero) exactly; the
    wgmma tiles multiply it by the scale in a's dtype (rounded once), the 8-token tiles (M up to 8)
    apply the scale to fp32 partial sums instead (exact_weight tells which).
    channel_scales, token_scales: optional fp32 [N] and [M], contiguous: the fp32 sum is multiplied
    by channel_scales[n] * token_scales[m] before its one rounding to a's dtype.
    An act-order weight (prepack_b(..., perm=...)) costs one gather of a's columns (M x K) per call
    (gather_columns: a kernel that the GEMM overlaps).
    W4A8: with b prepacked in the "sm90_e4m3" layout (u4b8), a is torch.float8_e4m3fn (K and the row
    stride multiples of 16; quantize.quantize_fp8 gives it and its per-token scales, to pass as
    token_scales), group_size a multiple of 128 or -1, and group_scales, out and the result are
    bf16 or fp16 (group_scales' dtype). The codes are exact in e4m3; each 128 of k accumulates on the
    fp8 tensor core and is added in fp32 times its group scale.
    Runs on torch's current stream, without synchronizing the host. The kernel may start while the
    previous kernel on the stream finishes (programmatic dependent launch): it reads a and writes out
    only after that kernel has completed, but starts streaming b and group_scales at once, so a
    kernel that writes those two and lets its dependents launch early must not directly precede
    it (QUANTGEMM_PDL=0 in the environment turns the overlap off).
    """
    family, m, n = check_mm_args(a, b, group_scales, group_size, out, schedule, group_zeros, channel_scales,
                                 token_scales)
    k, groups = b.k, group_scales.shape[0]
    index = _checks.cuda_index("a", a)
    _checks.same_device("b", b.data, index)
    if b.perm is not None:  # act-order: the activation's columns in the weight's order (an M x K gather)
        _checks.same_device("b.perm", b.perm, index)
        a = gather_columns(a, b.perm)
    _checks.same_device("group_scales", group_scales, index)
    if group_zeros is not None:
        _checks.same_device("group_zeros", group_zeros, index)
    if channel_scales is not None or token_scales is not None:
        for name, x in (("channel_scales", channel_scales), ("token_scales", token_scales)):
            if x is not None:
                _checks.same_device(name, x, index)
    allocated = out is None
    if allocated:
        # (new_empty is cheaper to issue than torch.empty with keywords)
        out = a.new_empty((m, n)) if a.dtype in DTYPES else group_scales.new_empty((m, n))
    else:
        _checks.same_device("out", out, index)
    if m == 0:
        return out
    _checks.architecture("mm", index, b.layout)
    _checks.row_major("a", a)
    if not allocated:
        _checks.row_major("out", out)
    _checks.aligned16("group_scales", group_scales)
    if group_zeros is not None:
        _checks.aligned16("group_zeros", group_zeros)
    _checks.aligned16("b", b.data)
    lda = a.stride(0) if m > 1 else k  # a single row's stride is never used
    ldo = out.stride(0) if m > 1 else n
    stream = torch._C._cuda_getCurrentRawStream(index)
    partials, counters = _workspace.get(index, stream)
    for _ in range(2):
        try:
            status, need_bytes, need_counters = native().mm_mixed_input(
                family, schedule or "", a.data_ptr(), lda, b.data.data_ptr(), group_scales.data_ptr(),
                0 if group_zeros is None else group_zeros.data_ptr(),
                0 if channel_scales is None else channel_scales.data_ptr(),
                0 if token_scales is None else token_scales.data_ptr(), out.data_ptr(), ldo, m, n, k, k // groups,
                partials.data_ptr(), partials.numel(), counters.data_ptr(), counters.numel(), index, stream)
        except ValueError as e:  # (a family left out of a subset build is "unknown" to the dispatch)
            if not compiled_schedules(family):
                raise ValueError(_not_built(family)) from e
            raise
        if status != _STATUS_WORKSPACE_TOO_SMALL:
            return out
        partials, counters = _workspace.get(index, stream, need_bytes, need_counters)
    raise RuntimeError("quantgemm: stream-K workspace could not be sized")  # unreachable
