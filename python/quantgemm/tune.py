"""Measure every compiled schedule on the GPU at hand and write the dispatch rules that follow.

    python -m quantgemm.tune [--family u4b8_bf16] [--models ...] [--m 1,2,...] --csv timings.csv --out u4b8_bf16.json
    python -m quantgemm.tune --family fp8fast ...        (the W8A8 families: fp8fast, fp8, int8)
    python -m quantgemm.tune --from-csv a.csv,b.csv --out u4b8_bf16.json      (no GPU needed)

The build must hold the candidates (`-Ccmake.define.QUANTGEMM_SCHEDULES=all`). For every model
layer and M bucket the tuner times each schedule whose activation-row tile fits the bucket (from
half the power of two at or above M to that power: 96 and 128 at M = 96, 128, 192 and 256 at 192;
for W8A8, the swapped schedules up to M = 256 and the others from M = 64), as medians of CUDA-graph
replays with the weights rotated beyond the L2. The rules file it writes is what the build reads
(`-Ccmake.define.QUANTGEMM_RULES=/path/u4b8_bf16.json`, or copied over codegen/rules/); docs/tuning.md
says how. Synthesis, per M bucket: for each schedule as the bucket's default, the layers where it
is more than `tolerance` off the best get rules before it, bounded above on N and K, each the
schedule within tolerance on every layer it takes and taking the most of them; the bucket keeps
the default whose rules leave the least regret (then the fewest rules). Buckets with the same
rules merge. With `--max-schedules C`, synthesis first keeps the C schedules that serve the timed
problems best together (chosen one at a time, each the one that most lowers the geometric mean,
over every problem, of the best kept schedule's time over the best time), for a family whose build
is to stay small.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import re
import sys
from collections import defaultdict
from dataclasses import dataclass

FAMILY = "u4b8_bf16"
M_BUCKETS = (1, 2, 4, 8, 16, 32, 48, 64, 96, 128, 192, 256, 512, 1024, 2048, 4096, 8192)

# (m, n, k) -> schedule name -> microseconds
Timings = dict[tuple[int, int, int], dict[str, float]]


@dataclass(frozen=True)
class RuleSpec:
    schedule: str
    m_max: int | None = None
    n_max: int | None = None
    k_max: int | None = None

    def covers(self, n: int, k: int) -> bool:
        return (self.n_max is None or n <= self.n_max) and (self.k_max is None or k <= self.k_max)


def tile_m(schedule: str) -> int:
    sm80 = schedule.startswith("sm80_")  # (<family>_<tile_n>x<tile_m>)
    match = re.search(r"_(\d+)x(\d+)$" if sm80 else r"_(\d+)x(\d+)x(\d+)_c", schedule)
    if not match:
        raise ValueError(f"{schedule!r} is not a schedule name")
    return int(match.group(2))


def admissible(schedule: str, m: int) -> bool:
    """Whether a bucket of M rows is worth timing on this schedule's activation-row tile (W8A8 and
    block-scaled: swapped schedules with narrow token tiles up to M = 256, the others from M = 64)."""
    if "_swap_" in schedule:
        return m <= 256 if tile_m(schedule) <= 64 else m >= 64
    if schedule.endswith(("_coop", "_pp", "_sk")):
        return m >= 64
    fit = min(32 if schedule.startswith("sm80_") else 256, max(8, 1 << (m - 1).bit_length()))
    return fit // 2 <= tile_m(schedule) <= fit


def _bucket_rules(shapes: dict[tuple[int, int], dict[str, float]], tolerance: float) -> list[RuleSpec]:
    """The decision list (without M bounds) for one M bucket."""
    names = sorted({s for t in shapes.values() for s in t})
    layers = list(shapes)  # the layers by index, in the timings' order
    best = [min(t.values()) for t in shapes.values()]
    regret = {s: [t[s] / b - 1 if s in t else math.inf for t, b in zip(shapes.values(), best)] for s in names}
    ns = sorted({n for n, _ in layers}) + [None]
    ks = sorted({k for _, k in layers}) + [None]
    bounds = [(n_max, k_max) for n_max in ns for k_max in ks if n_max is not None or k_max is not None]
    # the layers each bounded rule covers, and the schedules within tolerance on each layer
    covered = {nk: [i for i, sh in enumerate(layers) if RuleSpec("", None, *nk).covers(*sh)] for nk in bounds}
    within = {s: [r <= tolerance for r in regret[s]] for s in names}

    def decision_list(default: str) -> list[RuleSpec]:
        rules: list[RuleSpec] = []
        free = [True] * len(layers)  # not covered by any rule yet
        undecided = {i for i, r in enumerate(regret[default]) if r > tolerance}
        while undecided:
            pick, pick_key = None, None
            for s in names:
                ok, reg = within[s], regret[s]
                for n_max, k_max in bounds:
                    taken = [i for i in covered[n_max, k_max] if free[i]]
                    if not taken or not all(ok[i] for i in taken):
                        continue
                    gain = sum(i in undecided for i in taken)
                    if not gain:
                        continue
                    key = (-gain, n_max is not None and k_max is not None, sum(reg[i] for i in taken), s,
                           n_max or 0, k_max or 0)
                    if pick_key is None or key < pick_key:
                        pick, pick_key = RuleSpec(s, None, n_max, k_max), key
            if pick is None:
                break  # what is left is served by the default, off by more than the tolerance
            rules.append(pick)
            for i in covered[pick.n_max, pick.k_max]:
                free[i] = False
            undecided -= set(covered[pick.n_max, pick.k_max])
        # a default that serves no measured layer would only guess for unmeasured ones: the last
        # bounded rule, which serves measured layers, becomes the catch-all instead
        if rules and not any(free):
            return rules[:-1] + [RuleSpec(rules[-1].schedule)]
        return rules + [RuleSpec(default)]

    def cost(rules: list[RuleSpec]) -> tuple[float, int]:
        left = sum(regret[next(r for r in rules if r.covers(*sh)).schedule][i] for i, sh in enumerate(layers))
        return left, len(rules)

    return min((decision_list(s) for s in names), key=lambda rules: (*cost(rules), rules[-1].schedule))


def fewest_schedules(timings: Timings, count: int) -> Timings:
    """`timings` restricted to the `count` schedules that serve them best together, chosen greedily:
    each time the schedule that most lowers the summed log regret of the best kept schedule, a
    problem that no kept schedule was timed on counting before any regret."""
    names = sorted({s for t in timings.values() for s in t})
    kept: list[str] = []

    def cost(chosen: list[str]) -> tuple[int, float]:
        uncovered, regret = 0, 0.0
        for t in timings.values():
            times = [t[s] for s in chosen if s in t]
            if times:
                regret += math.log(min(times) / min(t.values()))
            else:
                uncovered += 1
        return uncovered, regret

    while len(kept) < min(count, len(names)):
        kept.append(min((s for s in names if s not in kept), key=lambda s: (cost(kept + [s]), s)))
    return {key: {s: us for s, us in t.items() if s in kept} for key, t in timings.items()}


def synthesize(timings: Timings, tolerance: float = 0.03) -> list[RuleSpec]:
    """Ordered rules (the last one a catch-all) from per-bucket timings."""
    buckets: dict[int, dict[tuple[int, int], dict[str, float]]] = defaultdict(dict)
    for (m, n, k), t in timings.items():
        if t:
            buckets[m][(n, k)] = t
    if not buckets:
        raise ValueError("no timings to synthesize rules from")
    groups: list[tuple[int, list[RuleSpec]]] = []
    for m in sorted(buckets):
        rules = _bucket_rules(buckets[m], tolerance)
        if groups and groups[-1][1] == rules:
            groups[-1] = (m, rules)
        else:
            groups.append((m, rules))
    out = []
    for i, (m, rules) in enumerate(groups):
        m_max = None if i == len(groups) - 1 else m
        out += [RuleSpec(r.schedule, m_max, r.n_max, r.k_max) for r in rules]
    return out


def rules_json(rules: list[RuleSpec], source: str, family: str = FAMILY) -> str:
    """The rules file (codegen/rules/<family>.json's format)."""
    lines = []
    for r in rules:
        entry = {"schedule": r.schedule}
        entry.update({b: v for b, v in (("m_max", r.m_max), ("n_max", r.n_max), ("k_max", r.k_max)) if v is not None})
        lines.append("    " + json.dumps(entry))
    return (f'{{\n  "family": {json.dumps(family)},\n  "source": {json.dumps(source)},\n  "rules": [\n'
            + ",\n".join(lines) + "\n  ]\n}\n")


def read_csv(paths: list[str], family: str | None = None, timings_family: str | None = None) -> Timings:
    """The timings of the CSVs at `paths`, the first file's where several time one schedule on one
    problem. With `timings_family` (one family or several, ','-separated), schedules of those
    families are read as the same tiles of `family` (a family without timings of its own in an M
    bucket borrows another's)."""
    borrowed = [f + "_" for f in timings_family.split(",") if f] if timings_family else []
    timings: Timings = defaultdict(dict)
    for path in paths:
        with open(path, newline="") as f:
            for row in csv.DictReader(f):
                key = (int(row["M"]), int(row["N"]), int(row["K"]))
                name = row["schedule"]
                prefix = next((p for p in borrowed if name.startswith(p)), None)
                if prefix:
                    name = family + "_" + name[len(prefix):]
                timings[key].setdefault(name, float(row["us"]))
    return dict(timings)


def _time_us(fns) -> float:
    """Median time of one call: as many calls per graph as take about 2 ms."""
    import torch

    from .bench import graph_time_us

    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    fns[0]()
    start.record()
    fns[0]()
    stop.record()
    stop.synchronize()
    once = start.elapsed_time(stop) * 1e3
    calls = max(3, min(20, int(2000 / max(once, 1.0))))
    return graph_time_us(fns, replays=10 if once > 500 else 20, min_calls=calls)


def measure(models: list[str], ms: list[int], group_size: int, writer=None, family: str = FAMILY) -> Timings:
    """Time every admissible compiled schedule of `family` on every layer of `models` at every M in `ms`."""
    import torch

    from . import block_scaled, mixed_input, scaled
    from .bench import copies_for, quantized_copies, scaled_copies
    from .models import MODELS, unsupported_reason
    from .quantize import quantize_fp8, quantize_fp8_blocks, quantize_fp8_groups

    l2 = getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 60 << 20)
    e4m3 = "_e4m3_" in family  # W4A8: e4m3 activations, the output in the family's dtype
    layout = "sm80" if family.startswith("sm80_") else (mixed_input.E4M3 if e4m3 else "sm90")
    kind = family.removeprefix("sm80_").split("_")[0]
    w8a8 = kind in ("fp8fast", "fp8", "int8")
    # per kind: the weight copies to rotate through, and per activation the call on one copy
    if kind == "fp8block":
        schedules = block_scaled.supported_schedules()

        def weights(w):
            b, sb = quantize_fp8_blocks(w)
            return [(b.clone(), sb.clone()) for _ in range(copies_for(b.numel() + 4 * sb.numel(), l2))]

        def caller(x, out):
            a, sa = quantize_fp8_groups(x)
            return lambda c, s: block_scaled.block_scaled_mm(a, sa, c[0], c[1], out=out, schedule=s)
    elif w8a8:
        schedules = scaled.supported_schedules(family)
        dtype = torch.int8 if kind == "int8" else torch.float8_e4m3fn

        def weights(w):
            return scaled_copies(w, dtype, l2)[1]

        def caller(x, out):
            a, sa = scaled.quantize_activation(x, dtype)
            return lambda c, s: scaled.scaled_mm(a, c[0], sa, c[1], out=out, schedule=s,
                                                 use_fast_accum=kind == "fp8fast")
    else:
        weight_type, dtype = kind, torch.float16 if family.endswith("_fp16") else torch.bfloat16
        if ("_g32_" in family) != (group_size == mixed_input.GROUP_32):
            raise ValueError(f"tune {family} with --group-size 32, and only such families")
        schedules = mixed_input.supported_schedules(weight_type, dtype, group_size, layout)

        def weights(w):
            return quantized_copies(w.to(dtype), group_size, l2, weight_type, layout)[4]

        def caller(x, out):
            out = out.to(dtype)
            if e4m3:
                a, ts = quantize_fp8(x)
                ts = ts.reshape(-1)
                return lambda c, s: mixed_input.mm(a, c[0], c[1], group_size, out=out, schedule=s, token_scales=ts)
            x = x.to(dtype)
            return lambda c, s: mixed_input.mm(x, c[0], c[1], group_size, out=out, schedule=s, group_zeros=c[2])
    timings: Timings = defaultdict(dict)
    seen = set()
    for model in models:
        for layer in MODELS[model]:
            n, k = layer.n, layer.k
            why = unsupported_reason(n, k, group_size) if kind in mixed_input.WEIGHT_TYPES else None
            if why or (n, k) in seen:
                print(f"{model} {layer.name}: skipped, {why or 'measured already'}", flush=True)
                continue
            seen.add((n, k))
            torch.manual_seed(0)
            copies = weights(torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / math.sqrt(k))
            for m in ms:
                x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
                call = caller(x, torch.empty(m, n, device="cuda", dtype=torch.bfloat16))
                for s in schedules:
                    if not admissible(s, m):
                        continue
                    fns = [lambda c=c, s=s: call(c, s) for c in copies]
                    try:
                        us = _time_us(fns)
                    except (ValueError, RuntimeError) as e:  # a schedule that cannot serve this shape
                        print(f"{model} {layer.name} M={m} {s}: skipped, {e}", flush=True)
                        continue
                    timings[(m, n, k)][s] = us
                    print(f"{model:<20} {layer.name:<8} {n:>6} {k:>6} {m:>5} {us:>10.1f}  {s}", flush=True)
                    if writer:
                        writer.writerow([model, layer.name, n, k, m, s, f"{us:.2f}"])
            del copies
    return dict(timings)


def main(argv: list[str] | None = None) -> int:
    from .models import MODELS, parse_models

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--family", default=FAMILY,
                        help="the family to tune: a mixed-input one (u4b8_bf16, u4_fp16, u8b128_bf16, ...; "
                             "the *_g32_* ones with --group-size 32), fp8fast, fp8, int8 or "
                             "fp8block_bf16")
    parser.add_argument("--models", default=",".join(MODELS), help=f"comma-separated, of {list(MODELS)}")
    parser.add_argument("--m", default=",".join(map(str, M_BUCKETS)), help="comma-separated M buckets")
    parser.add_argument("--group-size", type=int, default=128)
    parser.add_argument("--csv", default=None, help="write the timings here (model,layer,N,K,M,schedule,us)")
    parser.add_argument("--from-csv", default=None, help="comma-separated timing CSVs: synthesize only, no GPU "
                                                        "(a problem timed in several: the first file's)")
    parser.add_argument("--timings-family", default=None,
                        help="with --from-csv: read this family's schedules (or those of several, "
                             "','-separated) as --family's same tiles")
    parser.add_argument("--out", default=None, help="write the rules file here")
    parser.add_argument("--tolerance", type=float, default=0.03, help="regret accepted against the best schedule")
    parser.add_argument("--source", default=None, help="the rules file's source note")
    parser.add_argument("--max-schedules", type=int, default=None,
                        help="rules over at most this many schedules (fewest_schedules)")
    args = parser.parse_args(argv)

    if args.from_csv:
        timings = read_csv([p for p in args.from_csv.split(",") if p], args.family, args.timings_family)
        borrowed = f" --timings-family {args.timings_family}" if args.timings_family else ""
        source = args.source or f"python -m quantgemm.tune --family {args.family} --from-csv {args.from_csv}{borrowed}"
    else:
        import torch

        capability = torch.cuda.get_device_capability() if torch.cuda.is_available() else (0, 0)
        if capability != (9, 0) and not (args.family.startswith("sm80_") and capability[0] >= 8):
            print("quantgemm.tune: measuring needs a Hopper (sm_90) GPU (an sm80_* family: sm_80 or later); "
                  "--from-csv synthesizes from saved timings.")
            return 1
        try:
            models = parse_models(args.models)
        except ValueError as e:
            parser.error(str(e))
        ms = [int(x) for x in args.m.split(",") if x.strip()]
        f = open(args.csv, "w", newline="", buffering=1) if args.csv else None  # line-buffered: a cut run keeps its rows
        try:
            writer = csv.writer(f) if f else None
            if writer:
                writer.writerow(["model", "layer", "N", "K", "M", "schedule", "us"])
            timings = measure(models, ms, args.group_size, writer, args.family)
        finally:
            if f:
                f.close()
        group = f"group {args.group_size}, " if args.family.startswith(("u4", "u8", "sm80_")) else ""
        source = args.source or (f"python -m quantgemm.tune --family {args.family} on {torch.cuda.get_device_name()}, "
                                 f"{group}models {','.join(models)}")
    if args.max_schedules:
        timings = fewest_schedules(timings, args.max_schedules)
        if not args.source:
            source += f" --max-schedules {args.max_schedules}"
    rules = synthesize(timings, args.tolerance)
    text = rules_json(rules, source, args.family)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
