"""codegen/: typed rules, deterministic rendering, every schedule instantiated and reachable."""

import subprocess
import sys

import pytest

from codegen import generate
from codegen.schedules import (FAMILIES, FP8, FP8BLOCK_BF16, RULES_DIR, Family, Rule, ScaledSchedule, Schedule, U4B8_BF16,
                               load_rules)
from quantgemm.mixed_input import w4a8_accumulation
from quantgemm.models import MODELS, unsupported_reason
from quantgemm.tune import RuleSpec, rules_json

M_BUCKETS = (1, 2, 4, 8, 16, 32, 48, 64, 96, 128, 192, 256, 512, 1024, 2048, 4096, 8192)
SHAPES = ((6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336), (28672, 8192), (8192, 28672))
MODEL_SHAPES = sorted({(layer.n, layer.k) for layers in MODELS.values() for layer in layers
                       if not unsupported_reason(layer.n, layer.k, 128)})


def test_rules_are_well_formed():
    for family in FAMILIES:
        assert family.problems() == []


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.name)
def test_every_m_bucket_is_covered(family):
    for n, k in SHAPES:
        for m in M_BUCKETS:
            assert family.select(m, n, k) in family.schedules()


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.name)
def test_every_schedule_is_reachable_and_instantiated(family):
    picked = {family.select(m, n, k) for m in M_BUCKETS for n, k in SHAPES + tuple(MODEL_SHAPES)}
    assert picked == set(family.schedules())
    files = generate.render()
    for s in family.schedules():
        assert f"mm_{s.name(family.name)}.cu" in files
        assert f'"{s.name(family.name)}"' in files["dispatch.cpp"]


def test_w4a8_tiles_rescale_where_the_package_expects_it():
    """Which W4A8 tiles rescale their accumulators (all of K in the fp8 tensor core) is decided by the
    codegen's Schedule.w4a8_rescales, checked against the kernel in every generated W4A8 unit, and
    read from the schedule name by the package for its tolerances and explain()."""
    w4a8 = [f for f in FAMILIES if f.input]
    assert w4a8
    files = generate.render(["all"])
    for family in w4a8:
        tiles = {s for s in family.all_schedules()}
        assert {s.w4a8_rescales() for s in tiles} == {True, False}
        for s in tiles:
            name = s.name(family.name)
            assert (w4a8_accumulation(name, 8192) == 8192) == s.w4a8_rescales(), name
            assert f"w4a8_rescales({s.tile_n}, {s.tile_m}) == {str(s.w4a8_rescales()).lower()}" in files[f"mm_{name}.cu"]
    wide = Schedule(256, 128, 128)
    assert wide.w4a8_rescales() and any("128 weight rows" in p for p in wide.problems(e4m3=True))
    # split-K over a cluster: the narrow W4A8 tiles (their partials fit beside the stages), not the wide
    assert Schedule(256, 8, 128, (4, 1, 1)).problems(e4m3=True) == []
    assert any("split-K" in p for p in Schedule(128, 128, 128, (2, 1, 1)).problems(e4m3=True))
    assert any("cluster" in p for p in Schedule(256, 8, 128, (9, 1, 1)).problems(e4m3=True))


def test_small_m_takes_narrow_tiles():
    assert U4B8_BF16.select(1, 28672, 8192).tile_m == 8
    assert U4B8_BF16.select(64, 28672, 8192).tile_m == 64
    assert U4B8_BF16.select(4096, 28672, 8192).tile_m == 256


def test_a_family_builds_alone_on_request():
    u8_fp16 = next(f for f in FAMILIES if f.name == "u8_fp16")
    for asked, schedules in (("u8_fp16:all", u8_fp16.all_schedules()), ("u8_fp16", u8_fp16.schedules())):
        files = generate.render([asked])
        assert sorted(f for f in files if f.startswith("mm_")) == sorted(f"mm_{s.name('u8_fp16')}.cu" for s in schedules)
        assert f'"u8_fp16"' in files["dispatch.cpp"] and '"u4b8_bf16"' not in files["dispatch.cpp"]


def test_one_w8a8_family_per_operand_type_serves_both_output_dtypes():
    # the output dtype is a runtime argument of the epilogue (ScaledEpilogueParams::out_fp16), so no
    # W8A8 kernel names one
    w8a8 = [f for f in FAMILIES if f.kind == "scaled_mm"]
    assert [f.name for f in w8a8] == ["fp8fast", "fp8", "int8"]
    files = generate.render(["fp8fast", "fp8", "int8"])
    kernels = [text for name, text in files.items() if name.startswith("mm_")]
    assert len(kernels) == sum(len(f.schedules()) for f in w8a8)
    for text in kernels:
        assert "bfloat16" not in text and "half_t" not in text


def test_candidates_build_only_on_request():
    files = generate.render()
    for c in U4B8_BF16.candidates():
        assert c not in U4B8_BF16.schedules()
        assert f"mm_{c.name(U4B8_BF16.name)}.cu" not in files
    asked = [c.name(U4B8_BF16.name) for c in U4B8_BF16.candidates()] + ["u4b8_bf16_128x256x64_c1x1x1"]
    files = generate.render(asked)
    assert sorted(f for f in files if f.startswith("mm_")) == sorted(f"mm_{a}.cu" for a in asked)


def test_render_is_deterministic(tmp_path):
    assert generate.render() == generate.render()
    for out in (tmp_path / "a", tmp_path / "b"):
        subprocess.run([sys.executable, str(generate.ROOT / "codegen" / "generate.py"), "--out", str(out)], check=True)
    names = sorted(p.name for p in (tmp_path / "a").iterdir())
    assert names == sorted(generate.render())
    for name in names:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()


def test_list_matches_written_files(tmp_path):
    listed = subprocess.run([sys.executable, str(generate.ROOT / "codegen" / "generate.py"), "--out", str(tmp_path),
                             "--list"], check=True, capture_output=True, text=True).stdout.split()
    assert not any(tmp_path.iterdir())  # --list writes nothing
    generate.write(tmp_path, generate.render())
    assert sorted(listed) == sorted(str(p) for p in tmp_path.iterdir())


def test_unchanged_files_are_not_rewritten(tmp_path):
    generate.write(tmp_path, generate.render())
    stamps = {p.name: p.stat().st_mtime_ns for p in tmp_path.iterdir()}
    generate.write(tmp_path, generate.render())
    assert stamps == {p.name: p.stat().st_mtime_ns for p in tmp_path.iterdir()}


def test_subset_build_keeps_a_catch_all():
    keep = ["u4b8_bf16_256x16x128_c1x1x1", "u4b8_bf16_256x64x64_c1x1x1"]
    files = generate.render(keep)
    assert sorted(f for f in files if f.startswith("mm_")) == sorted(f"mm_{k}.cu" for k in keep)
    chain = generate._chain(U4B8_BF16, set(keep))
    assert [link.name for link in chain] == keep
    assert chain[-1].condition == ""
    assert "M <= 16" in files["dispatch.cpp"]


def test_unknown_schedule_is_refused():
    with pytest.raises(SystemExit, match="unknown schedules"):
        generate.render(["u4b8_bf16_128x7x64_c1x1x1"])


def test_malformed_rules_are_reported():
    s = Schedule(tile_n=128, tile_m=16)
    no_catch_all = Family("f", "u4b8", (Rule(s, m_max=16),))
    assert any("last rule" in p for p in no_catch_all.problems())
    unsorted = Family("f", "u4b8", (Rule(s, m_max=64), Rule(s, m_max=16), Rule(s)))
    assert any("increasing" in p for p in unsorted.problems())
    bad_tile = Family("f", "u4b8", (Rule(Schedule(tile_n=64, tile_m=24)),))
    problems = bad_tile.problems()
    assert any("tile_n" in p for p in problems) and any("tile_m" in p for p in problems)


def test_split_k_clusters_are_c_by_1_by_1():
    assert Schedule(128, 8, 128, (4, 1, 1)).problems() == []
    assert Schedule(256, 16, 128, (2, 1, 1)).problems() == []
    assert Schedule(128, 64, 128, (3, 1, 1)).problems() == []
    assert Schedule(256, 8, 128, (7, 1, 1)).problems() == []
    for bad in ((9, 1, 1), (1, 2, 1), (16, 1, 1)):
        assert any("cluster" in p for p in Schedule(128, 8, 128, bad).problems())
    # the families with split-K cluster tiles in their rules (the fp16 ones from their bf16 timings)
    tuned = {f"{w}{g}_{a}" for w in ("u4b8", "u4", "u8b128", "u8") for g in ("", "_g32") for a in ("bf16", "fp16")}
    tuned.add("u4b8_e4m3_bf16")
    by_name = {f.name: f for f in FAMILIES}
    for name in tuned:
        assert any(s.cluster != (1, 1, 1) for s in by_name[name].schedules()), name
    for family in FAMILIES:
        if family.kind == "mixed_input" and family.name not in tuned:
            assert all(s.cluster == (1, 1, 1) for s in family.schedules()), family.name
    # the fp16 families keep the default build short: at most 18 schedules each
    for w in ("u4b8", "u4", "u8b128", "u8"):
        assert len(by_name[f"{w}_fp16"].schedules()) <= 18
        # and the group-32 ones, a rarer format: at most 12 (bf16) or 8 (fp16)
        assert len(by_name[f"{w}_g32_bf16"].schedules()) <= 12 and len(by_name[f"{w}_g32_fp16"].schedules()) <= 8


def test_block_scaled_split_k_schedules_are_named_and_checked():
    split = ScaledSchedule(128, 64, kernel="pp", swap_ab=True, split_k=True)
    name = split.name(FP8BLOCK_BF16.name)
    assert name == "fp8block_bf16_swap_128x64x128_c1x1x1_pp_splitk"
    assert ScaledSchedule.parse(name, FP8BLOCK_BF16.name) == split
    assert ScaledSchedule.parse("fp8block_bf16_swap_128x64x128_c1x1x1_coop_sk", FP8BLOCK_BF16.name).stream_k
    assert split in FP8BLOCK_BF16.all_schedules()
    both = ScaledSchedule(128, 64, swap_ab=True, stream_k=True, split_k=True)
    assert any("one at most" in p for p in both.problems())
    # the W8A8 epilogue scales the whole sum: no split-K slices there
    w8a8 = Family("f", FP8.weight, (Rule(split),), kind="scaled_mm")
    assert any("block-scaled" in p for p in w8a8.problems())
    block = Family("f", FP8BLOCK_BF16.weight, (Rule(split),), kind="block_scaled_mm")
    assert block.problems() == []


def test_all_builds_every_candidate():
    files = generate.render(["all"])
    assert sorted(f for f in files if f.startswith("mm_")) == sorted(
        f"mm_{s.name(f.name)}.cu" for f in FAMILIES for s in f.all_schedules())


def _spec(rule):
    return RuleSpec(rule.schedule.name(U4B8_BF16.name), rule.m_max, rule.n_max, rule.k_max)


def test_rules_file_round_trips_and_replaces_the_committed_one(tmp_path):
    # the committed file is in the format the tuner writes
    text = rules_json([_spec(r) for r in U4B8_BF16.rules], U4B8_BF16.rules_source)
    assert text == (RULES_DIR / "u4b8_bf16.json").read_text()
    other = [Rule(Schedule(tile_n=256, tile_m=16, tile_k=128), m_max=16), Rule(Schedule(tile_n=128, tile_m=256))]
    path = tmp_path / "u4b8_bf16.json"
    path.write_text(rules_json([_spec(r) for r in other], "test"))
    assert load_rules(path, U4B8_BF16.name) == tuple(other)
    files = generate.render(rules_files=[path])
    assert sorted(f for f in files if f.startswith("mm_u4b8_bf16_")) == [
        "mm_u4b8_bf16_128x256x64_c1x1x1.cu", "mm_u4b8_bf16_256x16x128_c1x1x1.cu"]
    assert "M <= 16" in files["dispatch.cpp"]


def test_bad_rules_files_are_refused(tmp_path):
    path = tmp_path / "r.json"
    path.write_text('{"family": "nope", "rules": []}')
    with pytest.raises(SystemExit, match="no family 'nope'"):
        generate.render(rules_files=[path])
    with pytest.raises(ValueError, match="not a schedule name"):
        Schedule.parse("u4b8_bf16_128x8", "u4b8_bf16")
