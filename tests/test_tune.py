"""quantgemm.tune: rule synthesis from timings (no GPU), the rules file it writes, and the model
shape sets it measures."""

import csv
from pathlib import Path

import pytest

from codegen.schedules import FAMILIES, RULES_DIR, Family, U4B8_BF16, load_rules
from quantgemm import tune
from quantgemm.models import MODELS, unsupported_reason

S = {name: f"u4b8_bf16_{name}_c1x1x1" for name in ("128x8x128", "256x8x128", "128x64x128", "256x64x64",
                                                    "128x256x64", "128x96x64", "128x192x64")}
SHAPES = [(4096, 4096), (6144, 4096), (28672, 4096), (4096, 14336), (28672, 8192)]


def synthetic_timings():
    """Narrow layers prefer 128-row tiles, wide ones 256-row; the tile_m follows M."""
    timings = {}
    for m in (1, 8, 64, 4096):
        for n, k in SHAPES:
            base = n * k / 1e6
            if m <= 8:
                t = {S["128x8x128"]: base * (1.0 if n <= 4096 else 1.2), S["256x8x128"]: base * (1.1 if n <= 4096 else 1.0)}
            elif m <= 64:
                t = {S["128x64x128"]: base * (1.0 if k <= 4096 else 1.1), S["256x64x64"]: base * (1.2 if k <= 4096 else 1.0)}
            else:
                t = {S["128x256x64"]: base * m / 100}
            timings[(m, n, k)] = t
    return timings


def test_synthesized_rules_pick_the_best_everywhere_and_end_in_a_catch_all(tmp_path):
    timings = synthetic_timings()
    rules = tune.synthesize(timings, tolerance=0.03)
    last = rules[-1]
    assert (last.m_max, last.n_max, last.k_max) == (None, None, None)
    path = tmp_path / "u4b8_bf16.json"
    path.write_text(tune.rules_json(rules, "test"))
    family = Family("u4b8_bf16", "u4b8", load_rules(path, "u4b8_bf16"))
    assert family.problems() == []
    for (m, n, k), t in timings.items():
        picked = family.select(m, n, k).name("u4b8_bf16")
        assert t[picked] <= 1.03 * min(t.values()), (m, n, k, picked)
    # buckets with the same decisions merge: M = 1 and 8 share one set of rules
    assert [r.m_max for r in rules].count(1) == 0 and 8 in [r.m_max for r in rules]


def test_a_schedule_within_tolerance_everywhere_is_a_single_rule():
    timings = {(1, n, k): {S["256x8x128"]: 10.0, S["128x8x128"]: 10.2 if n > 4096 else 9.9} for n, k in SHAPES}
    assert tune.synthesize(timings, tolerance=0.03) == [tune.RuleSpec(S["256x8x128"])]
    assert len(tune.synthesize(timings, tolerance=0.001)) == 2


def test_from_csv_writes_a_rules_file_the_build_reads(tmp_path):
    timings = synthetic_timings()
    table = tmp_path / "t.csv"
    with open(table, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["model", "layer", "N", "K", "M", "schedule", "us"])
        for (m, n, k), t in timings.items():
            for s, us in t.items():
                w.writerow(["x", "y", n, k, m, s, us])
    out = tmp_path / "u4b8_bf16.json"
    assert tune.main(["--from-csv", str(table), "--out", str(out)]) == 0
    rules = load_rules(out, "u4b8_bf16")
    assert rules[-1].is_catch_all()
    assert {r.schedule for r in rules} <= set(U4B8_BF16.all_schedules())


def test_borrowed_timings_are_read_as_the_familys_tiles_and_the_first_file_wins(tmp_path):
    own, other = tmp_path / "own.csv", tmp_path / "other.csv"
    for path, rows in ((own, [("u4_bf16_256x8x128_c1x1x1", 1, 10.0)]),
                       (other, [("u4b8_bf16_256x8x128_c1x1x1", 1, 9.0), ("u4b8_bf16_128x128x64_c1x1x1", 4096, 500.0)])):
        with open(path, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["model", "layer", "N", "K", "M", "schedule", "us"])
            for name, m, us in rows:
                w.writerow(["x", "y", 4096, 4096, m, name, us])
    timings = tune.read_csv([str(own), str(other)], "u4_bf16", "u4b8_bf16")
    assert timings == {(1, 4096, 4096): {"u4_bf16_256x8x128_c1x1x1": 10.0},
                       (4096, 4096, 4096): {"u4_bf16_128x128x64_c1x1x1": 500.0}}
    assert "u4b8_bf16_256x8x128_c1x1x1" in tune.read_csv([str(other)])[(1, 4096, 4096)]
    # several borrowed families: each one's schedules read as the family's tiles
    assert tune.read_csv([str(own), str(other)], "u4_fp16", "u4_bf16,u4b8_bf16") == \
        {(1, 4096, 4096): {"u4_fp16_256x8x128_c1x1x1": 10.0}, (4096, 4096, 4096): {"u4_fp16_128x128x64_c1x1x1": 500.0}}


def test_fewest_schedules_keeps_the_ones_that_serve_every_problem_best():
    timings = {(1, 4096, 4096): {"a": 10.0, "b": 11.0, "c": 30.0},
               (1, 8192, 8192): {"a": 40.0, "b": 20.0, "c": 21.0},
               (4096, 4096, 4096): {"c": 100.0}}  # only c serves it: c is kept before any regret counts
    assert tune.fewest_schedules(timings, 1) == {(1, 4096, 4096): {"c": 30.0}, (1, 8192, 8192): {"c": 21.0},
                                                 (4096, 4096, 4096): {"c": 100.0}}
    assert set(tune.fewest_schedules(timings, 2)[(1, 4096, 4096)]) == {"a", "c"}
    assert tune.fewest_schedules(timings, 5) == timings


def test_only_fitting_tiles_are_timed():
    assert tune.admissible(S["128x8x128"], 1) and not tune.admissible(S["128x64x128"], 1)
    assert tune.admissible(S["128x64x128"], 48) and tune.admissible(S["128x64x128"], 96)
    assert tune.admissible(S["128x256x64"], 8192) and not tune.admissible(S["128x8x128"], 8192)
    # the tiles of 96 and 192 tokens: in the buckets they fit
    assert tune.admissible(S["128x96x64"], 96) and tune.admissible(S["128x192x64"], 192)
    assert not tune.admissible(S["128x96x64"], 192) and not tune.admissible(S["128x192x64"], 64)
    with pytest.raises(ValueError, match="not a schedule name"):
        tune.tile_m("u4b8_bf16_128x8")
    # W8A8 and block-scaled: narrow swapped token tiles for small M, the rest from M = 64
    narrow, wide = "fp8block_bf16_swap_128x32x128_c1x1x1_pp", "fp8block_bf16_128x128x128_c1x1x1_coop"
    assert tune.admissible(narrow, 256) and not tune.admissible(narrow, 512)
    assert tune.admissible(wide, 64) and not tune.admissible(wide, 32)
    assert tune.admissible("fp8block_bf16_swap_128x160x128_c1x1x1_coop", 4096)


def test_model_shape_sets():
    for name in ("llama3-8b", "llama3-70b", "llama3-70b-tp2", "llama3-70b-tp4", "qwen2.5-7b",
                 "mixtral-8x7b-experts", "deepseek-v3", "deepseek-v3-fp8"):
        assert MODELS[name]
    shapes = {m: {layer.name: (layer.n, layer.k) for layer in MODELS[m]} for m in MODELS}
    assert shapes["llama3-8b"] == {"qkv": (6144, 4096), "o": (4096, 4096), "gate_up": (28672, 4096),
                                   "down": (4096, 14336)}
    assert shapes["llama3-70b-tp2"] == {"qkv": (5120, 8192), "o": (8192, 4096), "gate": (14336, 8192),
                                        "down": (8192, 14336)}
    assert shapes["llama3-70b-tp4"]["down"] == (8192, 7168)
    assert shapes["qwen2.5-7b"]["qkv"] == (4608, 3584)
    assert sorted(shapes["deepseek-v3-fp8"].values()) == sorted(
        [(2112, 7168), (24576, 1536), (32768, 512), (7168, 16384), (4096, 7168), (7168, 2048), (576, 7168)])
    assert unsupported_reason(576, 7168, 128) is None  # DeepSeek-V3 kv_a: N padded at prepack time
    assert "multiple of 8" in unsupported_reason(100, 7168, 128)
    assert "group_size" in unsupported_reason(4096, 4096, 96)
    assert unsupported_reason(24576, 1536, 128) is None


def test_unknown_models_are_named():
    from quantgemm.models import parse_models
    assert parse_models("llama3-8b, qwen2.5-7b") == ["llama3-8b", "qwen2.5-7b"]
    with pytest.raises(ValueError, match=r"unknown models \['llama9'\]"):
        parse_models("llama3-8b,llama9")


TUNING = Path(__file__).resolve().parent.parent / "docs" / "tuning"
#: the timings of M = 96 to 512 with the split-K tiles there (2026-12-04), read before older ones;
#: those with the 96- and 192-token tiles (an H100, 2026-12-07, after the swizzled epilogue) before them
U4_TILES, U8_TILES = "h100-batch96-512-tiles96-192.csv", "u8b128_bf16-h100-batch96-512-tiles96-192.csv"
U4_MID, U8_MID = "h200-batch96-512-split.csv", "u8b128_bf16-h200-batch96-512-split.csv"


@pytest.mark.parametrize("family,patterns,timings_family,max_schedules", [
    ("u4b8_bf16", [U4_TILES, U4_MID, "h200-*.csv"], None, None), ("fp8", ["fp8-h200.csv"], None, None),
    ("fp8fast", ["fp8fast-h200.csv"], None, 9), ("fp8block_bf16", ["fp8block_bf16-h200.csv"], None, 6),
    ("u8b128_bf16", ["u8b128_bf16-h200-decode.csv", U8_TILES, U8_MID, "u8b128_bf16-h200.csv"], None, None),
    # u8 up to M = 64, then u8b128's timings of the same tiles
    ("u8_bf16", ["u8_bf16-h200-decode.csv", U8_TILES, U8_MID, "u8b128_bf16-h200.csv"], "u8b128_bf16", None),
    ("sm80_u4b8_bf16", ["sm80_u4b8_bf16-h200.csv"], None, None),
    # M up to 64 with the split-K tiles (2026-12-06), M = 96 to 4096 with the 128 x 256 tile
    # (2026-12-04), then the timings before them
    ("u4b8_e4m3_bf16", ["u4b8_e4m3_bf16-h200-decode-split.csv", "u4b8_e4m3_bf16-h200-batch96-4096.csv",
                        "u4b8_e4m3_bf16-h200.csv"], None, 16),
    # u4 up to M = 64, then u4b8's timings of the same tiles
    ("u4_bf16", ["u4_bf16-h200-decode.csv", U4_TILES, U4_MID, "h200-llama3.csv", "h200-other-models.csv"],
     "u4b8_bf16", None),
    # fp16 activations and output: the bf16 timings over fewer schedules
    ("u4b8_fp16", [U4_TILES, U4_MID, "h200-*.csv"], "u4b8_bf16", 18),
    ("u4_fp16", ["u4_bf16-h200-decode.csv", U4_TILES, U4_MID, "h200-llama3.csv", "h200-other-models.csv"], "u4_bf16,u4b8_bf16", 18),
    ("u8b128_fp16", ["u8b128_bf16-h200-decode.csv", U8_TILES, U8_MID, "u8b128_bf16-h200.csv"], "u8b128_bf16", 18),
    ("u8_fp16", ["u8_bf16-h200-decode.csv", U8_TILES, U8_MID, "u8b128_bf16-h200.csv"], "u8_bf16,u8b128_bf16", 18),
    # groups of 32: the bf16 families on their own timings, the fp16 ones over 8 of their code width's
    ("u4b8_g32_bf16", ["u4b8_g32_bf16-h200.csv"], None, 12), ("u4_g32_bf16", ["u4_g32_bf16-h200.csv"], None, 11),
    ("u8b128_g32_bf16", ["u8b128_g32_bf16-h200.csv"], None, 12), ("u8_g32_bf16", ["u8_g32_bf16-h200.csv"], None, 8)
] + [(f"{w}_g32_fp16", [f"{timed}_g32_bf16-h200.csv"], f"{timed}_g32_bf16", 8)
     for w, timed in (("u4b8", "u4b8"), ("u4", "u4b8"), ("u8b128", "u8b128"), ("u8", "u8b128"))])
def test_the_committed_rules_come_from_the_committed_timings(family, patterns, timings_family, max_schedules):
    paths = [str(p) for pattern in patterns for p in sorted(TUNING.glob(pattern))]
    timings = tune.read_csv(paths, family, timings_family)
    if max_schedules:
        timings = tune.fewest_schedules(timings, max_schedules)
        assert len({s for t in timings.values() for s in t}) == max_schedules
    rules = tune.synthesize(timings)
    fam = next(f for f in FAMILIES if f.name == family)
    committed = load_rules(RULES_DIR / f"{family}.json", family, fam.schedule_type)
    assert [(r.schedule.name(family), r.m_max, r.n_max, r.k_max) for r in committed] == \
        [(r.schedule, r.m_max, r.n_max, r.k_max) for r in rules]


def test_every_bucket_default_serves_a_measured_layer():
    # a catch-all that no measured layer reaches would pick for unmeasured shapes blindly
    timings = tune.read_csv(sorted(str(p) for p in TUNING.glob("h200-*.csv")))
    by_bucket = {}
    for (m, n, k) in timings:
        by_bucket.setdefault(m, []).append((n, k))
    for m, shapes in by_bucket.items():
        rules = tune._bucket_rules({sh: timings[(m, *sh)] for sh in shapes}, 0.03)
        assert any(not any(r.covers(*sh) for r in rules[:-1]) for sh in shapes), (m, rules)
