"""quantgemm.bench: the timeline summary (the timing itself needs a GPU)."""

from quantgemm import bench


def test_timeline_summary_splits_calls_by_start_time():
    # 3 CTAs x 6 calls 10 us apart; CTA c starts 0.1 c us into its call, each event 1 us after the
    # one before; records listed out of order
    per_cta = [[[10_000 * j + 100 * c + 1000 * e for e in range(6)] + [1, 0] for j in reversed(range(6))]
               for c in range(3)]
    lines = bench.timeline_summary(per_cta).splitlines()
    assert lines[0] == ("3 CTAs, a call every 10.00 us; a call's first CTA starts +4.80 us after the previous "
                        "call's last exit")
    rows = {line[:32].strip(): [float(x) for x in line[32:].split()] for line in lines[2:]}
    assert list(rows) == list(bench.TIMELINE_EVENTS)
    assert rows["start"] == [0.0, 0.1, 0.2]
    assert rows["last mainloop end"] == [3.0, 3.1, 3.2]
    assert rows["exit"] == [5.0, 5.1, 5.2]
