"""Plot a benchmark CSV: speedup over the peer against M, one panel per model, the floor marked.

    python -m quantgemm.report docs/bench-h200.csv --png docs/bench-h200.png
    python -m quantgemm.report docs/bench-h200-int8.csv --png docs/bench-h200-int8.png --peer torch._int_mm

Each layer is one colour: the solid line is quantgemm's speedup over the peer (torch bf16 matmul,
or --peer) measured in the same run, the dashed line the speedup quantgemm would have at the weight-stream floor (the
peer's time over the floor), drawn up to M = 64, where the weights are what bounds the time.
Needs matplotlib (`pip install matplotlib`).
"""

from __future__ import annotations

import argparse
import csv
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
    parser.add_argument("csv", help="a CSV written by python -m quantgemm.bench --csv")
    parser.add_argument("--png", required=True)
    parser.add_argument("--title", default=None)
    parser.add_argument("--peer", default="torch bf16 matmul", help="the peer's name, for the axis label")
    args = parser.parse_args(argv)
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("quantgemm.report: plotting needs matplotlib (pip install matplotlib).")
        return 1
    plot(args.csv, args.png, args.title, args.peer)
    return 0


if __name__ == "__main__":
    sys.exit(main())
