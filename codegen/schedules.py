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
MIXED_INPUT_TILE_M = (8, 16, 32, 64, 128, 256)


@dataclass(frozen=True, order=True)
class Schedule:
    """One compiled kernel configuration of the transposed problem out^T = W a^T."""

    tile_n: int  #: weight rows per CTA tile (the wgmma M, two consumer warpgroups of 64)
    tile_m: int  #: activation rows per CTA tile (the wgmma N)
    tile_k: int = 64  #: k per pipeline stage (one or two prepacked 64-deep blocks)
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

    def problems(self) -> list[str]:
        """Why this schedule cannot be compiled, if it cannot."""
        out = []
        if self.tile_n not in (128, 256):
            out.append(f"tile_n must be 128 or 256 (one or two prepacked block rows), got {self.tile_n}")
        if self.tile_m not in MIXED_INPUT_TILE_M:
            out.append(f"tile_m must be one of {MIXED_INPUT_TILE_M}, got {self.tile_m}")
        if self.tile_k not in (64, 128):
            out.append(f"tile_k must be 64 or 128, got {self.tile_k}")
        elif self.tile_k == 128 and self.tile_m * self.tile_n // 128 > 64:
            out.append(f"tile_k 128 needs tile_m * tile_n / 128 <= 64 (two 128-deep A buffers beside the "
                       f"accumulators must fit in the registers), got {self.tile_n} x {self.tile_m}")
        if self.cluster != (1, 1, 1):
            out.append(f"cluster must be (1, 1, 1), got {self.cluster}")
        return out


@dataclass(frozen=True)
class Rule:
    """Take `schedule` when M <= m_max, N <= n_max and K <= k_max (None: no bound)."""

    schedule: Schedule
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
            out += [f"{self.name} {sched}: {p}" for p in sched.problems()]
        return out


def load_rules(path: Path, family: str) -> tuple[Rule, ...]:
    """The rules of `family` in the rules file at `path` (JSON: {"family", "rules": [{"schedule",
    "m_max", "n_max", "k_max"}, ...]}, absent bounds admitting anything)."""
    data = json.loads(Path(path).read_text())
    if data.get("family") != family:
        raise ValueError(f"{path}: rules of family {data.get('family')!r}, expected {family!r}")
    return tuple(Rule(Schedule.parse(r["schedule"], family), r.get("m_max"), r.get("n_max"), r.get("k_max"))
                 for r in data["rules"])


def with_rules(family: Family, path: Path) -> Family:
    """`family` with the rules of the file at `path`."""
    return replace(family, rules=load_rules(path, family.name),
                   rules_source=json.loads(Path(path).read_text()).get("source", ""))


def _tile(n: int, m: int, k: int = 64) -> Schedule:
    return Schedule(tile_n=n, tile_m=m, tile_k=k)


#: u4b8 weights (GPTQ symmetric 4-bit) x bf16 activations, group scales in the K loop.
U4B8_BF16 = with_rules(Family(
    name="u4b8_bf16",
    weight="u4b8",
    space=tuple(_tile(n, m, k) for n in (128, 256) for m in (8, 16, 32, 64) for k in (64, 128)
                     if not (k == 128 and m * n // 128 > 64))
    + (_tile(128, 128), _tile(128, 256)),
), RULES_DIR / "u4b8_bf16.json")

# The other weight and activation types run the same mainloop (u4: one more shared-memory row, the
# zero points, beside each scale row; fp16: other constants in the converter) and take the u4b8 x
# bf16 rules until they are tuned on their own; a rules file naming one of them replaces its rules.
_BORROWED = "the u4b8_bf16 rules (the same mainloop), until tuned on its own"

#: u4 weights with a zero point per group and column (AWQ, GPTQ without sym) x bf16 activations.
U4_BF16 = replace(U4B8_BF16, name="u4_bf16", weight="u4", rules_source=_BORROWED)
#: the same two weight types against fp16 activations (and fp16 scales, zero points and output).
U4B8_FP16 = replace(U4B8_BF16, name="u4b8_fp16", activation="cutlass::half_t", rules_source=_BORROWED)
U4_FP16 = replace(U4_BF16, name="u4_fp16", activation="cutlass::half_t")

FAMILIES: tuple[Family, ...] = (U4B8_BF16, U4_BF16, U4B8_FP16, U4_FP16)
