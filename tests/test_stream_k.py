"""The stream-K work decomposition of the mixed-input kernels (include/quantgemm/kernel/stream_k.hpp),
checked on the host: the ranges cover the work once, and unequal ranges keep their promises."""

import pytest

from quantgemm._native import native

# (tiles_n, tiles_m, k-iterations a tile, CTAs): Llama-3-70B gate and down at M = 1 on 256-row
# tiles, 8B qkv at M = 512 on 128 x 256 tiles, a whole wave and a rest, and small or odd cases
SHAPES = [(112, 1, 64, 132), (32, 1, 224, 132), (48, 2, 64, 132), (224, 1, 64, 132), (100, 1, 7, 132),
          (131, 1, 64, 132), (1, 1, 1000, 132), (120, 1, 33, 132), (7, 1, 3, 11), (200, 1, 64, 256),
          (250, 1, 40, 255), (99, 1, 128, 100)]


def ranges(shape, chain, min_sk_iters=2):
    """(dp_tiles, sk_tiles, chain, range bounds, helpers, last pieces' CTAs) of the decomposition."""
    return native().stream_k_ranges(*shape, min_sk_iters, chain)[1:]


@pytest.mark.parametrize("chain", [0, 1, 2, 4, 8])
@pytest.mark.parametrize("shape", SHAPES)
def test_ranges_cover_the_stream_k_units_once_and_the_last_piece_is_found(shape, chain):
    tiles_n, tiles_m, iters, ctas = shape
    dp_tiles, sk_tiles, used_chain, bounds, helpers, last = ranges(shape, chain)
    assert dp_tiles % ctas == 0 and dp_tiles + sk_tiles == tiles_n * tiles_m
    assert bounds[0] == 0 and bounds[-1] == sk_tiles * iters
    assert all(b < e for b, e in zip(bounds, bounds[1:])), "every range holds work"
    owner = [c for c, (b, e) in enumerate(zip(bounds, bounds[1:])) for _ in range(b, e)]
    assert last == [owner[(t + 1) * iters - 1] for t in range(sk_tiles)]
    if used_chain == 0:
        lengths = {e - b for b, e in zip(bounds, bounds[1:])}
        assert max(lengths) - min(lengths) <= 1 and not any(helpers)


@pytest.mark.parametrize("chain", [1, 2, 4, 8])
@pytest.mark.parametrize("shape", SHAPES)
def test_unequal_ranges_publish_every_later_piece_a_chain_early(shape, chain):
    """A helper range holds no tile's first piece and is the chain shorter; every other range but the
    last ends with a first piece at least the chain long, so the later pieces before it in its range
    end a chain before it does. Only where the helpers are at most a quarter of the ranges."""
    tiles_n, tiles_m, iters, ctas = shape
    dp_tiles, sk_tiles, used_chain, bounds, helpers, last = ranges(shape, chain)
    sk_ctas = len(bounds) - 1
    if used_chain == 0:
        if sk_ctas <= sk_tiles or 4 * sk_tiles < 3 * sk_ctas:
            return
        # otherwise only ranges too short for the chain keep equal lengths
        assert min(e - b for b, e in zip(bounds, bounds[1:])) < 3 * chain
        return
    assert used_chain == chain and 4 * sk_tiles >= 3 * sk_ctas
    full = max(e - b for b, e in zip(bounds, bounds[1:]))
    for c, (b, e) in enumerate(zip(bounds, bounds[1:])):
        first_piece = -(-b // iters) * iters  # the first tile start at or after b
        if c + 1 == sk_ctas:
            continue  # the last range ends with the work, early by what the sweep did not need
        if helpers[c]:
            assert first_piece >= e and e - b <= full - chain + 1
        else:
            assert first_piece + chain <= e and e - b >= full - 1


def test_helpers_are_planned_where_the_tiles_are_most_of_the_ctas():
    assert ranges((112, 1, 64, 132), 4)[2] == 4    # 70B gate_proj at M = 1: 19 helpers of 132
    assert ranges((32, 1, 224, 132), 4)[2] == 0    # 70B down_proj: 100 of 132 would be helpers
    assert ranges((112, 1, 64, 132), 0)[2] == 0


@pytest.mark.parametrize("shape", SHAPES)
def test_a_nearly_full_last_wave_runs_whole_tiles(shape):
    """With dp_slack, a last wave whose idle CTAs cost no more than the slack runs every tile whole
    (no stream-K, a grid of at most the tiles); otherwise the decomposition is the one without it."""
    tiles_n, tiles_m, iters, ctas = shape
    tiles = tiles_n * tiles_m
    rest = tiles % ctas
    for slack in (0, 1, 12, 100):
        grid, dp_tiles, sk_tiles, _, bounds, _, _ = native().stream_k_ranges(*shape, 2, 0, slack)
        if rest and (ctas - rest) * iters <= slack * ctas:
            assert (grid, dp_tiles, sk_tiles, bounds) == (min(tiles, ctas), tiles, 0, [0])
        else:
            assert (dp_tiles, sk_tiles) == native().stream_k_ranges(*shape, 2, 0, 0)[1:3]


def test_whole_tiles_where_the_last_wave_is_nearly_full():
    # slack 16: the launcher's for 64-deep prefill tiles (1024 / TileK, launch/sm90_mixed_input_mm.cuh)
    # Llama-3-8B o_proj at M = 512 on 128 x 128 tiles: 128 tiles of 64 iterations on 132 SMs
    assert native().stream_k_ranges(32, 4, 64, 132, 4, 0, 16)[:3] == (128, 128, 0)
    # 70B down_proj at M = 512 on 128 x 256 tiles: 128 tiles of 448 iterations
    assert native().stream_k_ranges(64, 2, 448, 132, 4, 0, 16)[:3] == (128, 128, 0)
    # 8B qkv at M = 512 on 128 x 256 tiles: 96 tiles leave too many SMs idle
    assert native().stream_k_ranges(48, 2, 64, 132, 4, 0, 16)[1:3] == (0, 96)
    # a whole wave and a nearly full second one: 260 tiles run in two waves of 132 CTAs
    assert native().stream_k_ranges(260, 1, 64, 132, 4, 0, 16)[:3] == (132, 260, 0)
