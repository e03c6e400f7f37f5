"""quantgemm.bench: the timeline's rows and summary from per-CTA records, the power summary from
nvidia-smi samples (recording either needs a GPU), and the W8A8 peer's padding."""

import torch

from quantgemm import bench


def records():
    # 3 CTAs x 6 calls 10 us apart; CTA c starts 0.1 c us into its call, each event 1 us after the
    # one before; each CTA's records listed out of order
    return {c: [[10_000 * j + 100 * c + 1000 * e for e in range(6)] + [1, 7] for j in reversed(range(6))]
            for c in range(3)}


def test_timeline_rows_split_calls_by_start_time():
    rows = bench.timeline_rows(records())
    assert len(rows) == 18 and all(len(r) == len(bench.TIMELINE_COLUMNS) for r in rows)
    assert rows[0] == [0, 0, 0.0, 0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 1, 7]
    assert rows[-1] == [5, 2, 50.0, 0.2, 1.2, 2.2, 3.2, 4.2, 5.2, 1, 7]


def test_timeline_summary():
    lines = bench.timeline_summary(bench.timeline_rows(records())).splitlines()
    assert lines[0] == ("3 CTAs, a call every 10.00 us; a call's first CTA starts +4.80 us after the previous "
                        "call's last exit; start against last mainloop end over the CTAs: rank correlation +1.00")
    table = {line[:32].strip(): [float(x) for x in line[32:].split()] for line in lines[2:]}
    assert list(table) == list(bench.TIMELINE_EVENTS)
    assert table["start"] == [0.0, 0.1, 0.2]
    assert table["last mainloop end"] == [3.0, 3.1, 3.2]
    assert table["exit"] == [5.0, 5.1, 5.2]


def test_rank_correlation():
    assert bench.rank_correlation([1, 2, 3, 4], [10, 20, 30, 40]) == 1.0
    assert bench.rank_correlation([1, 2, 3, 4], [4, 3, 2, 1]) == -1.0
    assert bench.rank_correlation([1, 2, 3], [5, 5, 5]) == 0.0


def test_power_summary_takes_the_middle_half():
    # the first and last quarter (idle clocks, the run starting and ending) are left out
    samples = [(1980.0, 100.0, "0x0")] * 2 + [(1400.0, 690.0, "0x4"), (1300.0, 700.0, "0x4"),
                                              (1350.0, 694.0, "0x4"), (1500.0, 698.0, "0x4")] + [(345.0, 80.0, "0x1")] * 2
    assert bench.power_summary(1515.66, samples) == (
        "1515.7 us a call, SM clock 1375 MHz, 696 W, throttle reasons 0x4 (4 samples)")
    assert bench.power_summary(10.0, []) == "10.0 us a call (nvidia-smi gave no samples)"


def test_int8_peer_pads_short_activations():
    # torch._int_mm takes M > 16 only: the peer of a 3-token problem runs on 17 rows, the first 3 its own
    a = torch.randint(-8, 8, (3, 32), dtype=torch.int8)
    b = torch.randint(-8, 8, (24, 32), dtype=torch.int8)
    out = bench.scaled_peer("int8", a, None, b, None)()
    assert out.shape == (17, 24) and out.dtype == torch.int32
    assert torch.equal(out[:3], (a.int() @ b.int().t())) and not out[3:].any()
