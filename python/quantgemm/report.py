"""Plot a benchmark CSV: speedup over the peer against M, one panel per model, the floor marked;
or compare quantgemm's times in the runs of two builds.

    python -m quantgemm.report docs/bench-h200.csv --png docs/bench-h200.png
    python -m quantgemm.report docs/bench-h200-int8.csv --png docs/bench-h200-int8.png --peer torch._int_mm
    python -m quantgemm.report a-1.csv a-2.csv --against b-1.csv b-2.csv     # a markdown table

Each layer is one colour: the solid line is quantgemm's speedup over the peer (torch bf16 matmul,
or --peer) measured in the same run, the dashed line the speedup quantgemm would have at the weight-stream floor (the
peer's time over the floor), drawn up to M = 64, where the weights are what bounds the time.
Needs matplotlib (`pip install matplotlib`).
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
from collections import defaultdict

#: the weight-stream floor is drawn up to this M (beyond it the math, not the weights, bounds the time)
FLOOR_M_MAX = 64


def series(path: str) -> dict[str, dict[str, list[tuple[int, float, float]]]]:
    """model -> layer -> [(M, speedup, speedup at the floor)], sorted by M."""
    out: dict[str, dict[str, list[tuple[int, float, float]]]] = defaultdict(lambda: defaultdict(list))
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            torch_us = float(row["torch_us"])
            label = f"{row['layer']} {row['N']}x{row['K']}"
            out[row["model"]][label].append((int(row["M"]), torch_us / float(row["quantgemm_us"]),
                                             torch_us / float(row["floor_us"])))
    return {m: {layer: sorted(points) for layer, points in layers.items()} for m, layers in out.items()}


def times(paths: list[str]) -> dict[tuple, tuple[list[float], str]]:
    """(model, layer, N, K, M) -> (quantgemm's times in the runs of `paths`, in order; the schedule
    of the last run)."""
    out: dict[tuple, tuple[list[float], str]] = {}
    for path in paths:
        with open(path, newline="") as f:
            for row in csv.DictReader(f):
                key = (row["model"], row["layer"], int(row["N"]), int(row["K"]), int(row["M"]))
                out[key] = (out.get(key, ([], ""))[0] + [float(row["quantgemm_us"])], row["schedule"])
    return out


def compare(a_paths: list[str], b_paths: list[str]) -> str:
    """A markdown table of the points both A's and B's runs measured: each side's times and the ratio
    of their medians (A / B below 1: A is faster)."""
    a, b = times(a_paths), times(b_paths)
    keys = [key for key in a if key in b]
    if not keys:
        raise ValueError("the two sets of runs share no (model, layer, N, K, M) point")
    lines = ["| model | layer | N x K | M | A us | B us | A / B | A schedule | B schedule |",
             "|---|---|---|---:|---:|---:|---:|---|---|"]
    ratios = []
    for key in keys:
        model, layer, n, k, m = key
        (ta, sa), (tb, sb) = a[key], b[key]
        ratios.append(statistics.median(ta) / statistics.median(tb))
        lines.append(f"| {model} | {layer} | {n} x {k} | {m} | {', '.join(f'{t:.1f}' for t in ta)} | "
                     f"{', '.join(f'{t:.1f}' for t in tb)} | {ratios[-1]:.3f} | {sa} | {sb} |")
    lines.append(f"\nA / B over the {len(ratios)} points: geometric mean {statistics.geometric_mean(ratios):.3f}, "
                 f"from {min(ratios):.3f} to {max(ratios):.3f}")
    return "\n".join(lines)


def plot(path: str, png: str, title: str | None = None, peer: str = "torch bf16 matmul") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    data = series(path)
    if not data:
        raise ValueError(f"{path}: no benchmark rows")
    fig, axes = plt.subplots(1, len(data), figsize=(6.5 * len(data), 4.8), squeeze=False)
    for ax, (model, layers) in zip(axes[0], sorted(data.items())):
        for i, (layer, points) in enumerate(sorted(layers.items())):
            ms = [p[0] for p in points]
            color = f"C{i}"
            ax.plot(ms, [p[1] for p in points], "o-", color=color, label=layer)
            decode = [p for p in points if p[0] <= FLOOR_M_MAX]
            ax.plot([p[0] for p in decode], [p[2] for p in decode], "--", color=color, alpha=0.5)
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log", base=2)
        ax.set_xlabel("M (tokens)")
        ax.set_ylabel(f"speedup over {peer}")
        ax.set_title(f"{model}   (dashed: at the weight-stream floor)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("csv", nargs="+", help="a CSV written by python -m quantgemm.bench --csv (with --against: "
                        "one or more runs of build A)")
    parser.add_argument("--png", help="the plot to write (one CSV)")
    parser.add_argument("--title", default=None)
    parser.add_argument("--peer", default="torch bf16 matmul", help="the peer's name, for the axis label")
    parser.add_argument("--against", nargs="+", metavar="CSV",
                        help="runs of build B: print a table of quantgemm's times in A's runs and B's instead of a plot")
    args = parser.parse_args(argv)
    if args.against:
        print(compare(args.csv, args.against))
        return 0
    if args.png is None or len(args.csv) != 1:
        parser.error("a plot takes one CSV and --png")
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("quantgemm.report: plotting needs matplotlib (pip install matplotlib).")
        return 1
    plot(args.csv[0], args.png, args.title, args.peer)
    return 0


if __name__ == "__main__":
    sys.exit(main())
