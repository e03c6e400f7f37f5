"""quantgemm.stalls: the stall summary of ncu's source page (the page itself needs a GPU)."""

import csv

from quantgemm import stalls

HEADER = ["Address", "Source", stalls.SAMPLES, stalls.EXECUTED, "stall_wait", "stall_selected", "stall_barrier",
          "stall_wait (Not Issued)"]
# (source, samples, executed, wait, selected, barrier)
LINES = [("BAR.SYNC 0x0", 10, 1, 0, 0, 10),
         ("SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [R7+URZ+0x2d680], R4", 4, 100, 2, 2, 0),
         ("LOP3.LUT R92, R186, 0xf000f, R205, 0xea, !PT", 6, 400, 3, 3, 0),
         ("HGMMA.64x16x16.F32.BF16 R24, R100, gdesc[UR16], R24", 8, 100, 6, 2, 0),
         ("@!P0 BRA 0x7f6ce7a33390", 2, 100, 0, 2, 0),
         ("HGMMA.64x16x16.F32.BF16 R24, R64, gdesc[UR16], R24, gsb0", 10, 100, 5, 5, 0),
         ("EXIT", 0, 1, 0, 0, 0)]


def write(path):
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["Kernel Name", "void kernel()"])
        w.writerow(HEADER)
        for i, (src, n, ex, wait, sel, bar) in enumerate(LINES):
            w.writerow([hex(16 * i), src, n, f"{ex:,}", wait, sel, bar, 1])


def test_opcode_drops_predicate_and_modifiers():
    assert stalls.opcode("@!P0 BRA 0x7f6ce7a33390") == "BRA"
    assert stalls.opcode("      HGMMA.64x16x16.F32.BF16 R24, R100, gdesc[UR16], R24") == "HGMMA"
    assert stalls.opcode("") == ""


def test_summary_of_the_loop(tmp_path):
    write(tmp_path / "sass.csv")
    rows = stalls.read(str(tmp_path / "sass.csv"))
    assert stalls.loop_range(rows) == (1, 5)
    total, shares = stalls.stall_shares(rows)
    assert total == 40 and shares[0] == ("wait", 16 / 40) and dict(shares)["barrier"] == 10 / 40
    text = stalls.summary(rows).splitlines()
    assert text[0] == "40 samples, 802 warp instructions executed"
    assert text[2] == "MMA loop (rows 1-5): 75% of the samples: wait 53%, selected 47%"
    assert text[4].split() == ["LOP3", "400", "50.0%", "6", "20.0%"]
    assert text[5].split() == ["HGMMA", "200", "25.0%", "18", "60.0%"]


def test_a_kernel_without_mma_is_one_loop():
    rows = [{"Source": "FFMA R1, R2, R3, R4", stalls.SAMPLES: "1", stalls.EXECUTED: "5"}]
    assert stalls.loop_range(rows) == (0, 0)
