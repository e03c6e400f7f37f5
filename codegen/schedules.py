"""The dispatch heuristic of quantgemm, as typed data.

A family is one GEMM kind (weight type x activation type). Its rules are read in order; the first
rule whose bounds admit the problem (M <= m_max, N <= n_max, K <= k_max, a None bound admitting
anything) names the schedule. The last rule of a family admits everything. A default build
instantiates exactly the schedules the rules name; `candidates` are further schedules that only a
build asking for them by name (or for "all") compiles, for the tuner to measure.

The rules themselves live in a rules file per family, `codegen/rules/<family>.json`, written by
`python -m quantgemm.tune` on the GPU at hand (docs/tuning.md); a build can take another file.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

RULES_DIR = Path(__file__).resolve().parent / "rules"

#: Activation-row tile sizes the sm90 mixed-input kernel supports (the wgmma N).
MIXED_INPUT_TILE_M = (8, 16, 32, 64, 96, 128, 192, 256)


#: CTAs a tile's k is split over (a thread-block cluster, partials reduced in its shared memory);
#: 1: stream-K over the whole grid. At most 8, the portable cluster size.
MIXED_INPUT_CLUSTER_K = (1, 2, 3, 4, 5, 6, 7, 8)


@dataclass(frozen=True, order=True)
class Schedule:
    """One compiled kernel configuration of the transposed problem out^T = W a^T."""

    tile_n: int  #: weight rows per CTA tile (the wgmma M, two consumer warpgroups of 64)
    tile_m: int  #: activation rows per CTA tile (the wgmma N)
    tile_k: int = 64  #: k per pipeline stage (one or two prepacked 64-deep blocks)
    #: (c, 1, 1): each tile's k split over a cluster of c CTAs (c > 1; no stream-K), else stream-K
    cluster: tuple[int, int, int] = (1, 1, 1)

    def name(self, family: str) -> str:
        c = "x".join(str(v) for v in self.cluster)
        return f"{family}_{self.tile_n}x{self.tile_m}x{self.tile_k}_c{c}"

    @staticmethod
    def parse(name: str, family: str) -> "Schedule":
        """The schedule `name` (as name() writes it) of family `family`."""
        m = re.fullmatch(re.escape(family) + r"_(\d+)x(\d+)x(\d+)_c(\d+)x(\d+)x(\d+)", name)
        if not m:
            raise ValueError(f"{name!r} is not a schedule name of family {family} "
                             f"({family}_<tile_n>x<tile_m>x<tile_k>_c<cluster>)")
        v = [int(x) for x in m.groups()]
        return Schedule(tile_n=v[0], tile_m=v[1], tile_k=v[2], cluster=(v[3], v[4], v[5]))

    def w4a8_rescales(self) -> bool:
        """Whether this tile, as a W4A8 schedule, rescales its accumulators at each group instead of
        promoting fp32 partial sums (more than 64 accumulators a consumer thread leave no room for
        them): the kernel's `w4a8_rescales` (collective/sm90_mma_w4a8.hpp, checked against this in
        each generated W4A8 translation unit) and `quantgemm.mixed_input.w4a8_accumulation` (checked
        by tests/test_codegen.py)."""
        return self.tile_m * self.tile_n > 128 * 128

    def problems(self, e4m3: bool = False) -> list[str]:
        """Why this schedule cannot be compiled, if it cannot (e4m3: as a W4A8 schedule)."""
        out = []
        if self.tile_n not in (128, 256):
            out.append(f"tile_n must be 128 or 256 (one or two prepacked block rows), got {self.tile_n}")
        if self.tile_m not in MIXED_INPUT_TILE_M:
            out.append(f"tile_m must be one of {MIXED_INPUT_TILE_M}, got {self.tile_m}")
        if self.cluster[1:] != (1, 1) or self.cluster[0] not in MIXED_INPUT_CLUSTER_K:
            out.append(f"cluster must be (c, 1, 1) with c in {MIXED_INPUT_CLUSTER_K} (the CTAs a tile's k is "
                       f"split over), got {self.cluster}")
        if e4m3:
            if self.tile_k != 128:
                out.append(f"W4A8 stages are 128 deep (one group-scale row a stage), got tile_k {self.tile_k}")
            if self.w4a8_rescales() and self.tile_n != 128:
                out.append(f"W4A8 tiles of more than 128 x 128 must have 128 weight rows (the accumulators of one "
                           f"block row are rescaled at each group), got {self.tile_n} x {self.tile_m}")
            if self.cluster[0] > 1 and self.tile_m * self.tile_n // 128 > 64:
                out.append(f"W4A8 split-K tiles need tile_m * tile_n / 128 <= 64 (the partials beside the "
                           f"stages), got {self.tile_n} x {self.tile_m}")
        elif self.tile_k not in (64, 128):
            out.append(f"tile_k must be 64 or 128, got {self.tile_k}")
        elif self.tile_k == 128 and self.tile_m * self.tile_n // 128 > 64:
            out.append(f"tile_k 128 needs tile_m * tile_n / 128 <= 64 (two 128-deep A buffers beside the "
                       f"accumulators must fit in the registers), got {self.tile_n} x {self.tile_m}")
        return out


#: sm80 mixed-input tiles: weight rows per CTA (64 a warp along N, the rest of the 8 warps split each
#: stage's k) and token tiles (n8 mma tiles).
SM80_TILE_N = (128, 256, 512)
SM80_TILE_M = (8, 16, 32)


@dataclass(frozen=True, order=True)
class Sm80Schedule:
    """One configuration of the sm80 mixed-input kernel (mma.sync on out^T = W a^T; stages from the
    shared-memory budget)."""

    tile_n: int  #: weight rows per CTA tile
    tile_m: int  #: activation rows per CTA tile

    def name(self, family: str) -> str:
        return f"{family}_{self.tile_n}x{self.tile_m}"

    @staticmethod
    def parse(name: str, family: str) -> "Sm80Schedule":
        m = re.fullmatch(re.escape(family) + r"_(\d+)x(\d+)", name)
        if not m:
            raise ValueError(f"{name!r} is not a schedule name of family {family} ({family}_<tile_n>x<tile_m>)")
        return Sm80Schedule(int(m.group(1)), int(m.group(2)))

    def problems(self) -> list[str]:
        out = []
        if self.tile_n not in SM80_TILE_N:
            out.append(f"tile_n must be one of {SM80_TILE_N}, got {self.tile_n}")
        if self.tile_m not in SM80_TILE_M:
            out.append(f"tile_m must be one of {SM80_TILE_M}, got {self.tile_m}")
        return out


#: Token tiles (the GEMM's N when swapped) and k depths of the W8A8 schedules.
SCALED_TILE_N = (16, 32, 64, 128, 192, 256)
SCALED_TILE_K = (64, 128, 256)


@dataclass(frozen=True, order=True)
class ScaledSchedule:
    """One compiled configuration of the W8A8 GEMM (CUTLASS's TMA warp-specialized kernel), in the
    coordinates of the GEMM the kernel computes: with swap_ab that is out^T = b a^T, so tile_m then
    counts weight rows and tile_n tokens."""

    tile_m: int
    tile_n: int
    tile_k: int = 128
    cluster: tuple[int, int, int] = (1, 1, 1)
    kernel: str = "coop"  #: "coop": two consumer warpgroups share a tile; "pp": ping-pong, a tile each
    swap_ab: bool = False
    stream_k: bool = False  #: split K across CTAs (stream-K) rather than one CTA a tile
    #: split K into equal slices, one batch of the launch each, summed by a second kernel
    #: (block-scaled only: the scales are applied in the K loop, so the slices' sums are the output's)
    split_k: bool = False

    def name(self, family: str) -> str:
        c = "x".join(str(v) for v in self.cluster)
        split = "_sk" if self.stream_k else "_splitk" if self.split_k else ""
        return (f"{family}_{'swap_' if self.swap_ab else ''}{self.tile_m}x{self.tile_n}x{self.tile_k}_c{c}_"
                f"{self.kernel}{split}")

    @staticmethod
    def parse(name: str, family: str) -> "ScaledSchedule":
        m = re.fullmatch(re.escape(family) + r"_(swap_)?(\d+)x(\d+)x(\d+)_c(\d+)x(\d+)x(\d+)_(coop|pp)(_sk|_splitk)?",
                         name)
        if not m:
            raise ValueError(f"{name!r} is not a schedule name of family {family} "
                             f"({family}_[swap_]<tile_m>x<tile_n>x<tile_k>_c<cluster>_<coop|pp>[_sk|_splitk])")
        v = [int(x) for x in m.groups()[1:7]]
        return ScaledSchedule(v[0], v[1], v[2], (v[3], v[4], v[5]), m.group(8), bool(m.group(1)),
                              m.group(9) == "_sk", m.group(9) == "_splitk")

    def problems(self) -> list[str]:
        out = []
        if self.kernel not in ("coop", "pp"):
            out.append(f"kernel must be coop or pp, got {self.kernel!r}")
        elif self.tile_m not in ((128, 256) if self.kernel == "coop" else (64, 128)):
            out.append(f"tile_m must be {'128 or 256' if self.kernel == 'coop' else '64 or 128'} for {self.kernel}, "
                       f"got {self.tile_m}")
        if self.tile_n not in SCALED_TILE_N:
            out.append(f"tile_n must be one of {SCALED_TILE_N}, got {self.tile_n}")
        if self.tile_k not in SCALED_TILE_K:
            out.append(f"tile_k must be one of {SCALED_TILE_K}, got {self.tile_k}")
        if self.stream_k and self.kernel != "coop":
            out.append("stream_k needs the coop kernel")
        if self.stream_k and self.split_k:
            out.append("stream_k and split_k are two ways to split K: one at most")
        if self.cluster[0] not in (1, 2) or self.cluster[1] not in (1, 2) or self.cluster[2] != 1:
            out.append(f"cluster must be (1|2, 1|2, 1), got {self.cluster}")
        return out

    def token_tile(self) -> int:
        """Tokens per CTA tile."""
        return self.tile_n if self.swap_ab else self.tile_m


@dataclass(frozen=True)
class Rule:
    """Take `schedule` when M <= m_max, N <= n_max and K <= k_max (None: no bound)."""

    schedule: Schedule | ScaledSchedule | Sm80Schedule
    m_max: int | None = None
    n_max: int | None = None
    k_max: int | None = None

    def admits(self, m: int, n: int, k: int) -> bool:
        return all(bound is None or value <= bound
                   for value, bound in ((m, self.m_max), (n, self.n_max), (k, self.k_max)))

    def is_catch_all(self) -> bool:
        return self.m_max is None and self.n_max is None and self.k_max is None


@dataclass(frozen=True)
class Family:
    name: str          #: prefix of schedule and function names
    weight: str        #: C++ weight type in namespace quantgemm
    rules: tuple[Rule, ...] = field(default_factory=tuple)
    space: tuple[Schedule, ...] = field(default_factory=tuple)  #: every tiling the tuner measures
    rules_source: str = ""  #: where the rules came from (the rules file's "source")
    activation: str = "cutlass::bfloat16_t"  #: C++ type of the activations, scales and output
    #: "mixed_input" (quantgemm's sm90 mainloop, Schedule), "sm80_mixed_input" (the mma.sync kernel
    #: for sm_80 and later, Sm80Schedule), "scaled_mm" (W8A8, ScaledSchedule: weight is
    #: the operands' C++ type; the output dtype is a runtime argument) or "block_scaled_mm" (block-scaled FP8,
    #: ScaledSchedule: activation is the output's C++ type)
    kind: str = "mixed_input"
    epilogue: str = ""  #: scaled_mm: the epilogue/scaled.hpp formula
    kernel_suffix: str = ""  #: scaled_mm: the CUTLASS kernel schedule's suffix ("FP8FastAccum" or "")
    #: mixed_input: group-scale rows per 64-deep k-block, 1 (groups of 64 and more) or 2 (groups of 32)
    scale_rows: int = 1
    #: mixed_input: the activations' C++ type where it is not `activation` (which then is the scales'
    #: and output's): "cutlass::float_e4m3_t" for the W4A8 kernels
    input: str = ""

    @property
    def schedule_type(self):
        return {"mixed_input": Schedule, "sm80_mixed_input": Sm80Schedule}.get(self.kind, ScaledSchedule)

    def schedules(self) -> list[Schedule]:
        """The schedules the rules name: what a default build compiles."""
        return sorted({r.schedule for r in self.rules})

    def candidates(self) -> list[Schedule]:
        """The tilings of the space the rules do not name: compiled only on request."""
        return sorted(set(self.space) - {r.schedule for r in self.rules})

    def all_schedules(self) -> list[Schedule]:
        """The rules' schedules and the candidates."""
        return sorted({r.schedule for r in self.rules} | set(self.space))

    def select(self, m: int, n: int, k: int) -> Schedule:
        for rule in self.rules:
            if rule.admits(m, n, k):
                return rule.schedule
        raise LookupError(f"{self.name}: no rule admits M={m}, N={n}, K={k}")

    def problems(self) -> list[str]:
        """Why this rule list is malformed, if it is."""
        out = []
        if not self.rules or not self.rules[-1].is_catch_all():
            out.append(f"{self.name}: the last rule must admit every problem")
        m_only = [r.m_max for r in self.rules if r.n_max is None and r.k_max is None and r.m_max is not None]
        if m_only != sorted(set(m_only)):
            out.append(f"{self.name}: M-only bounds must be strictly increasing, got {m_only}")
        for r in self.rules:
            for bound in (r.m_max, r.n_max, r.k_max):
                if bound is not None and bound < 1:
                    out.append(f"{self.name}: bound {bound} admits nothing")
        for sched in self.all_schedules():
            out += [f"{self.name} {sched}: {p}" for p in (sched.problems(e4m3=True) if self.input
                                                           else sched.problems())]
            if self.scale_rows == 2 and sched.tile_k != 64:
                out.append(f"{self.name} {sched}: two scale rows a k-block need tile_k 64, got {sched.tile_k}")
            if self.kind == "block_scaled_mm":
                out += [f"{self.name} {sched}: {p}" for p in block_scaled_problems(sched)]
            elif isinstance(sched, ScaledSchedule) and sched.split_k:
                out.append(f"{self.name} {sched}: split_k is for block-scaled families (the W8A8 epilogue "
                           f"applies its scales and bias to the whole sum)")
        return out


def load_rules(path: Path, family: str, schedule_type=Schedule) -> tuple[Rule, ...]:
    """The rules of `family` in the rules file at `path` (JSON: {"family", "rules": [{"schedule",
    "m_max", "n_max", "k_max"}, ...]}, absent bounds admitting anything)."""
    data = json.loads(Path(path).read_text())
    if data.get("family") != family:
        raise ValueError(f"{path}: rules of family {data.get('family')!r}, expected {family!r}")
    return tuple(Rule(schedule_type.parse(r["schedule"], family), r.get("m_max"), r.get("n_max"), r.get("k_max"))
                 for r in data["rules"])


def with_rules(family: Family, path: Path) -> Family:
    """`family` with the rules of the file at `path`."""
    return replace(family, rules=load_rules(path, family.name, family.schedule_type),
                   rules_source=json.loads(Path(path).read_text()).get("source", ""))


def _tile(n: int, m: int, k: int = 64, split: int = 1) -> Schedule:
    return Schedule(tile_n=n, tile_m=m, tile_k=k, cluster=(split, 1, 1))


def _split_k_tiles(k: int) -> tuple[Schedule, ...]:
    """Split-K over a cluster of 2 to 8, for layers with fewer tiles than SMs: tiles of 8 to 64
    tokens with k-deep stages, as many as leave room for the partials (m * n / 128 <= 64); clusters
    of 5 to 8 for the decode tiles of 8 and 16 tokens only (16 tiles of 256 rows over 6 CTAs fill
    the SMs that 4 leave idle, on the 4096-row layers)."""
    return tuple(_tile(n, m, k, c) for n in (128, 256) for m in (8, 16, 32, 64)
                 for c in (MIXED_INPUT_CLUSTER_K[1:] if m <= 16 else (2, 3, 4))
                 if m * n // 128 <= 64)


#: Split-K over 2 CTAs for 96- and 128-token tiles (48 or 64 KB of partials beside the stages): the
#: layers of 32 to 96 such tiles at M = 96 to 256, where stream-K's fixup of a wide partial costs more.
_WIDE_SPLIT_K_TILES = (_tile(128, 96, 64, 2), _tile(128, 128, 64, 2))

#: Stream-K tiles of 8 to 64 tokens, 64- or 128-deep (128: where two A buffers fit, m * n / 128 <= 64).
_NARROW_TILES = tuple(_tile(n, m, k) for n in (128, 256) for m in (8, 16, 32, 64) for k in (64, 128)
                      if not (k == 128 and m * n // 128 > 64))

#: Stream-K tiles of 96 to 256 tokens, 64-deep. 96 and 192 serve M = 65 ... 96 and 129 ... 192 with
#: no token rows past the problem (a 128- or 256-token tile computes and streams a third or a
#: quarter of zeros there).
_PREFILL_TILES = (_tile(128, 96), _tile(128, 128), _tile(128, 192), _tile(128, 256), _tile(256, 128))

#: u4b8 weights (GPTQ symmetric 4-bit) x bf16 activations, group scales in the K loop.
U4B8_BF16 = with_rules(Family(
    name="u4b8_bf16",
    weight="u4b8",
    space=(_NARROW_TILES + _PREFILL_TILES + _split_k_tiles(128) + _WIDE_SPLIT_K_TILES),
), RULES_DIR / "u4b8_bf16.json")

# The other weight and activation types run the same mainloop (u4: one more shared-memory row, the
# zero points, beside each scale row; fp16: other constants in the converter). u4 x bf16 has rules
# of its own (its tuner timings up to M = 64, u4b8's beyond). The fp16 families' rules come from
# their weight type's bf16 timings over the 16 schedules that serve those best together
# (`quantgemm.tune --max-schedules`), which keeps the default build short.

#: u4 weights with a zero point per group and column (AWQ, GPTQ without sym) x bf16 activations.
U4_BF16 = with_rules(replace(U4B8_BF16, name="u4_bf16", weight="u4"), RULES_DIR / "u4_bf16.json")
#: the same two weight types against fp16 activations (and fp16 scales, zero points and output).
U4B8_FP16 = with_rules(replace(U4B8_BF16, name="u4b8_fp16", activation="cutlass::half_t"),
                       RULES_DIR / "u4b8_fp16.json")
U4_FP16 = with_rules(replace(U4_BF16, name="u4_fp16", activation="cutlass::half_t"), RULES_DIR / "u4_fp16.json")

# 8-bit codes (u8b128: GPTQ's symmetric 8-bit format; u8: zero points per group) run the same
# mainloop with two 128-bit loads a block and PRMT converters (numeric/u8.hpp), with split-K tiles
# 64- and 128-deep (but for 256 x 32 x 128 over 4 CTAs: its three ranks' partials leave room for
# two 8-bit stages, and the mainloop needs three). u8b128 x bf16 and u8 x bf16 have rules from the
# tuner, the fp16 8-bit families from their bf16 timings, as the fp16 4-bit ones.
U8_SPACE = (_NARROW_TILES + tuple(t for t in _PREFILL_TILES if t.tile_n == 128) + _split_k_tiles(64)
            + tuple(s for s in _split_k_tiles(128) if s != _tile(256, 32, 128, 4)) + _WIDE_SPLIT_K_TILES)
U8B128_BF16 = with_rules(Family(name="u8b128_bf16", weight="u8b128", space=U8_SPACE),
                         RULES_DIR / "u8b128_bf16.json")
U8_BF16 = with_rules(replace(U8B128_BF16, name="u8_bf16", weight="u8"), RULES_DIR / "u8_bf16.json")
U8B128_FP16 = with_rules(replace(U8B128_BF16, name="u8b128_fp16", activation="cutlass::half_t"),
                         RULES_DIR / "u8b128_fp16.json")
U8_FP16 = with_rules(replace(U8_BF16, name="u8_fp16", activation="cutlass::half_t"), RULES_DIR / "u8_fp16.json")


def group32(family: Family) -> Family:
    """`family` for groups of 32, half a k-block: the mainloop loads and applies two scale (and
    zero-point) rows per 64-deep block, one for each pair of k16 steps, so 64-deep tiles only: the
    stream-K and split-K tiles of 8 to 64 tokens and three prefill tiles."""
    weight, activation = family.name.split("_")
    space = (tuple(s for s in _NARROW_TILES if s.tile_k == 64) + _split_k_tiles(64)
             + (_tile(128, 128), _tile(128, 256), _tile(256, 128)))
    name = f"{weight}_g32_{activation}"
    return with_rules(replace(family, name=name, scale_rows=2, space=space), RULES_DIR / f"{name}.json")


#: Rules from the tuner: the bf16 families on their own timings (u4b8 and u8b128 over 12 schedules,
#: u4 over 11, u8 over 8), the fp16 ones over 8 of the same tiles from their code width's u4b8 or
#: u8b128 timings.
MIXED_INPUT_G32 = tuple(group32(f) for f in (U4B8_BF16, U4_BF16, U4B8_FP16, U4_FP16, U8B128_BF16, U8_BF16,
                                             U8B128_FP16, U8_FP16))


#: W4A8: u4b8 weights (in their own prepacked layout) x e4m3 activations with fp32 token scales, on the
#: fp8 tensor core; group scales (a multiple of 128 or K) applied to fp32 partial sums every stage, or
#: on the 128 x 256 tile by rescaling the accumulators at each group. Rules from the tuner.
U4B8_E4M3_BF16 = with_rules(Family(
    name="u4b8_e4m3_bf16", weight="u4b8", input="cutlass::float_e4m3_t",
    space=tuple(_tile(n, m, 128) for n in (128, 256) for m in (8, 16, 32, 64, 128) if m * n // 128 <= 128)
    + (_tile(128, 256, 128),) + _split_k_tiles(128)),
    RULES_DIR / "u4b8_e4m3_bf16.json")
#: the same with fp16 group scales and output: five of the bf16 family's tuned tiles (decode, M up to 32,
#: 64 and 128, prefill), to keep the default build short, until tuned on its own
U4B8_E4M3_FP16 = replace(U4B8_E4M3_BF16, name="u4b8_e4m3_fp16", activation="cutlass::half_t",
                         rules=(Rule(_tile(256, 8, 128), m_max=8), Rule(_tile(256, 32, 128), m_max=32),
                                Rule(_tile(128, 64, 128), m_max=64), Rule(_tile(128, 128, 128), m_max=128),
                                Rule(_tile(128, 256, 128))),
                         rules_source="hand-set from the u4b8_e4m3_bf16 rules, until tuned on its own")


def sm80(family: Family, rules: tuple[Rule, ...] = (), rules_source: str = "") -> Family:
    """The sm80 kernel's family of `family`'s weight and activation types: its prepacked layout
    (layout/prepacked_b_sm80.hpp) and mma.sync kernel serve GPUs from sm_80 on, every group size
    included. 8-bit codes take twice the bytes a stage: no 512-row tiles (three stages in 96 KB)."""
    if family.weight.startswith("u8"):
        space = tuple(Sm80Schedule(n, m) for n in (128, 256) for m in (8, 16)) + (Sm80Schedule(128, 32),)
    else:
        space = tuple(Sm80Schedule(n, m) for n in SM80_TILE_N for m in SM80_TILE_M)
    return replace(family, name=f"sm80_{family.name}", kind="sm80_mixed_input", space=space, rules=rules,
                   rules_source=rules_source)


#: u4b8 x bf16 on the sm80 kernel, rules from the tuner; the other 4-bit families borrow them
SM80_U4B8_BF16 = with_rules(sm80(U4B8_BF16), RULES_DIR / "sm80_u4b8_bf16.json")
_SM80_U8_RULES = (Rule(Sm80Schedule(256, 8), m_max=8), Rule(Sm80Schedule(256, 16), m_max=16),
                  Rule(Sm80Schedule(128, 32)))
MIXED_INPUT_SM80 = (SM80_U4B8_BF16,) + tuple(
    sm80(f, SM80_U4B8_BF16.rules, "the sm80_u4b8_bf16 rules (the same kernel), until tuned on its own")
    for f in (U4_BF16, U4B8_FP16, U4_FP16)
) + tuple(sm80(f, _SM80_U8_RULES, "hand-set, until tuned") for f in (U8B128_BF16, U8_BF16, U8B128_FP16, U8_FP16))


def _scaled(m: int, n: int, k: int = 128, cluster=(1, 1, 1), kernel: str = "coop", swap: bool = False,
            stream_k: bool = False, split_k: bool = False) -> ScaledSchedule:
    return ScaledSchedule(m, n, k, cluster, kernel, swap, stream_k, split_k)


#: The W8A8 tilings the tuner measures: swapped narrow token tiles (small M, stream-K or ping-pong)
#: and the wide tiles of prefill.
SCALED_SPACE = (
    _scaled(128, 16, swap=True, stream_k=True), _scaled(128, 32, swap=True, stream_k=True),
    _scaled(128, 64, swap=True, stream_k=True), _scaled(64, 16, 256, kernel="pp", swap=True),
    _scaled(64, 32, 256, kernel="pp", swap=True), _scaled(64, 64, kernel="pp", swap=True),
    _scaled(64, 128, kernel="pp"), _scaled(128, 128, kernel="pp"), _scaled(128, 128, cluster=(2, 1, 1)),
    _scaled(128, 128, stream_k=True), _scaled(128, 256, cluster=(2, 1, 1)), _scaled(256, 128, cluster=(2, 1, 1)),
    _scaled(128, 128, kernel="pp", cluster=(2, 1, 1)), _scaled(256, 128, cluster=(1, 2, 1)),
    _scaled(128, 256, cluster=(1, 2, 1)), _scaled(256, 128, cluster=(2, 2, 1)),
)

#: FP8 e4m3 x e4m3, fp32 scales, the tensor core's fast accumulation. The W8A8 kernels take the
#: output dtype (bf16 or fp16) at run time (epilogue/scaled.hpp), so one family serves both.
FP8FAST = with_rules(Family(
    name="fp8fast", weight="cutlass::float_e4m3_t", space=SCALED_SPACE, kind="scaled_mm",
    epilogue="ScaledAccBias", kernel_suffix="FP8FastAccum"), RULES_DIR / "fp8fast.json")
#: The W8A8 tilings of at most 64 x 128 accumulators per consumer warpgroup, 128-deep.
_NARROW_SCALED_SPACE = tuple(s for s in SCALED_SPACE
                             if s.tile_k == 128 and s.tile_m * s.tile_n // (2 if s.kernel == "coop" else 1) <= 64 * 128)
#: FP8 with the accumulators promoted into fp32 every 128 of K (CUTLASS's two-level accumulation):
#: the second set of accumulators spills beyond 64 x 192 per consumer warpgroup (ptxas: none on
#: 128 x 192 cooperative tiles, 900 bytes a thread on 256 x 128), and the promotion interval (4 wgmma
#: k-steps) must be whole tiles, so tile_k 128.
FP8 = with_rules(replace(
    FP8FAST, name="fp8", kernel_suffix="",
    space=_NARROW_SCALED_SPACE + (_scaled(128, 192), _scaled(128, 192, cluster=(2, 1, 1)),
                                  _scaled(128, 192, stream_k=True))),
    RULES_DIR / "fp8.json")
#: INT8 x INT8, int32 accumulation, the zero-point epilogue (azp and azp_adj optional).
INT8 = with_rules(replace(FP8, name="int8", weight="int8_t", epilogue="AzpTokenScaledAccBias",
                          space=_NARROW_SCALED_SPACE), RULES_DIR / "int8.json")


def block_scaled_problems(s: ScaledSchedule) -> list[str]:
    """What the blockwise-scaling mainloop further asks of a schedule: the scales' 128-wide k blocks
    are whole stages (tile_k 128); the weight's 128-row scale blocks tile its side of the tile (the
    kernel's M when swapped, else its N); the three accumulator sets of the overlapped promotion
    (collective/sm90_blockwise_fp8_overlapped.hpp) fit when a consumer warpgroup holds at most
    64 x 128 accumulators (ptxas: no spills there)."""
    out = []
    if s.tile_k != 128:
        out.append(f"tile_k must be 128 (one scale block a stage), got {s.tile_k}")
    weight_rows = s.tile_m if s.swap_ab else s.tile_n
    if weight_rows % 128:
        out.append(f"the weight's side of the tile must be a multiple of 128 rows, got {weight_rows}")
    per_warpgroup = s.tile_m * s.tile_n // (2 if s.kernel == "coop" else 1)
    if per_warpgroup > 64 * 128:
        out.append(f"at most 64 x 128 accumulators per consumer warpgroup, got {s.tile_m} x {s.tile_n} {s.kernel}")
    return out


#: The block-scaled tilings the tuner measures: swapped narrow token tiles for small M (stream-K or
#: split-K keep every SM busy on few weight tiles), and 128 x 128 tiles for prefill. (Swapped wide
#: token tiles, 128 x 96 ping-pong and 128 x 160, measured 1.3-2x slower than 128 x 128 at M >= 256:
#: one scale per token column makes their promotion and scale loads wider.)
BLOCK_SCALED_SPACE = (
    _scaled(128, 16, swap=True, stream_k=True), _scaled(128, 32, swap=True, stream_k=True),
    _scaled(128, 64, swap=True, stream_k=True), _scaled(128, 16, kernel="pp", swap=True),
    _scaled(128, 32, kernel="pp", swap=True), _scaled(64, 128, kernel="pp"), _scaled(128, 128),
    _scaled(128, 128, stream_k=True), _scaled(128, 128, cluster=(2, 1, 1)), _scaled(128, 128, cluster=(1, 2, 1)),
    _scaled(128, 16, kernel="pp", swap=True, split_k=True), _scaled(128, 32, kernel="pp", swap=True, split_k=True),
    _scaled(128, 64, kernel="pp", swap=True, split_k=True),
)

#: Block-scaled FP8 (DeepSeek-V3): e4m3 operands, fp32 scales per token per 128 of K and per
#: 128 x 128 weight block, applied in the K loop; bf16 output.
FP8BLOCK_BF16 = with_rules(Family(
    name="fp8block_bf16", weight="cutlass::float_e4m3_t", space=BLOCK_SCALED_SPACE, kind="block_scaled_mm"),
    RULES_DIR / "fp8block_bf16.json")

FAMILIES: tuple[Family, ...] = (U4B8_BF16, U4_BF16, U4B8_FP16, U4_FP16, FP8FAST, FP8, INT8, FP8BLOCK_BF16,
                                U8B128_BF16, U8_BF16, U8B128_FP16, U8_FP16) + MIXED_INPUT_G32 + MIXED_INPUT_SM80 + (
                                    U4B8_E4M3_BF16, U4B8_E4M3_FP16)
