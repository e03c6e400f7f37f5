"""Where one kernel's warps stall, from ncu's source page of it (`ncu --import R --page source --csv
--print-source sass`, which `.ci/gpu`'s profile step writes as sass-NxKxM.csv):

    python -m quantgemm.stalls sass-28672x8192x16.csv

Prints, for the whole kernel and for its MMA loop (from the last barrier wait before the first
HGMMA or HMMA to the last one), the share of the warp-state samples by stall reason, and the loop's
executed instructions and samples by opcode.
"""

from __future__ import annotations

import argparse
import csv
import re
import sys
from collections import Counter

SAMPLES = "Warp Stall Sampling (All Samples)"
EXECUTED = "Instructions Executed"


def read(path: str) -> list[dict[str, str]]:
    """The source page's instruction rows (the file's first line names the kernel, the second is the header)."""
    with open(path, newline="") as f:
        lines = list(csv.reader(f))
    header = lines[1]
    return [dict(zip(header, row)) for row in lines[2:] if len(row) == len(header)]


def opcode(source: str) -> str:
    """The opcode of a SASS line without its predicate and modifiers: '@!P0 BRA 0x10' -> 'BRA'."""
    words = source.split()
    if words and words[0].startswith("@"):
        words = words[1:]
    return words[0].split(".")[0] if words else ""


def loop_range(rows: list[dict[str, str]]) -> tuple[int, int]:
    """[first, last] rows of the MMA loop: from the last barrier wait (SYNCS.PHASECHK) before the first
    HGMMA or HMMA to the last one; (0, len - 1) when the kernel has none."""
    mma = [i for i, r in enumerate(rows) if opcode(r["Source"]) in ("HGMMA", "HMMA")]
    if not mma:
        return 0, len(rows) - 1
    first = mma[0]
    while first > 0 and "SYNCS.PHASECHK" not in rows[first]["Source"]:
        first -= 1
    return (first if "SYNCS.PHASECHK" in rows[first]["Source"] else mma[0]), mma[-1]


def _number(text: str) -> float:
    return float(text.replace(",", "") or 0)


def stall_shares(rows: list[dict[str, str]]) -> tuple[float, list[tuple[str, float]]]:
    """(samples, [(reason, share of the samples)] largest first), from the stall_* columns, which count
    every sample (their "(Not Issued)" twins count the subset taken while the warp issued nothing)."""
    reasons = Counter()
    for r in rows:
        for key, value in r.items():
            m = re.fullmatch(r"stall_(\w+?)( \(Not Issued\))?", key)
            if m and not m.group(2):
                reasons[m.group(1)] += _number(value)
    total = sum(_number(r[SAMPLES]) for r in rows)
    return total, [(k, v / total if total else 0.0) for k, v in reasons.most_common()]


def summary(rows: list[dict[str, str]], top: int = 12) -> str:
    """The kernel's and its MMA loop's stall shares, and the loop's `top` opcodes by instructions executed."""
    first, last = loop_range(rows)
    loop = rows[first:last + 1]
    total, shares = stall_shares(rows)
    loop_total, loop_shares = stall_shares(loop)
    out = [f"{total:.0f} samples, {sum(_number(r[EXECUTED]) for r in rows):.0f} warp instructions executed",
           "kernel: " + ", ".join(f"{k} {v:.0%}" for k, v in shares[:8] if v >= 0.005),
           f"MMA loop (rows {first}-{last}): {loop_total / total if total else 0:.0%} of the samples: "
           + ", ".join(f"{k} {v:.0%}" for k, v in loop_shares[:8] if v >= 0.005)]
    samples, executed = Counter(), Counter()
    for r in loop:
        samples[opcode(r["Source"])] += _number(r[SAMPLES])
        executed[opcode(r["Source"])] += _number(r[EXECUTED])
    loop_executed = sum(executed.values())
    out.append(f"{'opcode':10s} {'executed':>12s} {'share':>6s} {'samples':>8s} {'share':>6s}")
    for op, n in executed.most_common(top):
        out.append(f"{op:10s} {n:12.0f} {n / loop_executed:6.1%} {samples[op]:8.0f} "
                   f"{samples[op] / loop_total if loop_total else 0:6.1%}")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("csv", help="ncu's source page of one kernel (--page source --csv --print-source sass)")
    args = parser.parse_args(argv)
    print(summary(read(args.csv)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
