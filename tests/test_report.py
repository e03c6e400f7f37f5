"""quantgemm.report: the benchmark CSV read into per-model series, and the plot written."""

import csv

import pytest

from quantgemm import report

FIELDS = ["model", "layer", "N", "K", "M", "quantgemm_us", "torch_us", "speedup", "floor_us", "x_floor", "schedule",
          "read_TBps"]


def write_csv(path, points=((64, 20.0, 30.0), (1, 10.0, 40.0)), schedule="s"):
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(FIELDS)
        for m, q, t in points:
            w.writerow(["m8b", "o", 4096, 4096, m, q, t, t / q, 2.0, q / 2.0, schedule, 4.5])


def test_series_are_speedups_sorted_by_m(tmp_path):
    path = tmp_path / "b.csv"
    write_csv(path)
    assert report.series(str(path)) == {"m8b": {"o 4096x4096": [(1, 4.0, 20.0), (64, 1.5, 15.0)]}}


def test_plot_writes_a_png(tmp_path):
    pytest.importorskip("matplotlib")
    path = tmp_path / "b.csv"
    write_csv(path)
    png = tmp_path / "b.png"
    assert report.main([str(path), "--png", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_compare_lists_both_builds_runs_and_the_ratio_of_their_medians(tmp_path, capsys):
    a1, a2, b1 = tmp_path / "a1.csv", tmp_path / "a2.csv", tmp_path / "b1.csv"
    write_csv(a1, ((1, 9.0, 40.0), (16, 12.0, 40.0)), schedule="x")
    write_csv(a2, ((1, 11.0, 40.0),), schedule="x")
    write_csv(b1, ((1, 12.5, 40.0), (64, 20.0, 30.0)), schedule="y")
    assert report.main([str(a1), str(a2), "--against", str(b1)]) == 0
    table = capsys.readouterr().out.strip().splitlines()
    assert table[2] == "| m8b | o | 4096 x 4096 | 1 | 9.0, 11.0 | 12.5 | 0.800 | x | y |"
    assert len(table) == 5  # M = 16 and 64: measured by one side only
    assert table[4] == "A / B over the 1 points: geometric mean 0.800, from 0.800 to 0.800"
    write_csv(b1, ((128, 1.0, 1.0),))
    with pytest.raises(ValueError, match="share no"):
        report.compare([str(a1)], [str(b1)])
    with pytest.raises(SystemExit):
        report.main([str(a1), str(a2), "--png", str(tmp_path / "x.png")])
