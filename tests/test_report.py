"""quantgemm.report: the benchmark CSV read into per-model series, and the plot written."""

import csv

import pytest

from quantgemm import report

FIELDS = ["model", "layer", "N", "K", "M", "quantgemm_us", "torch_us", "speedup", "floor_us", "x_floor", "schedule",
          "read_TBps"]


def write_csv(path):
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(FIELDS)
        for m, q, t in ((64, 20.0, 30.0), (1, 10.0, 40.0)):
            w.writerow(["m8b", "o", 4096, 4096, m, q, t, t / q, 2.0, q / 2.0, "s", 4.5])


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
