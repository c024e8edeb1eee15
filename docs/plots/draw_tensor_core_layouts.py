#!/usr/bin/env python3
"""Draws chapter 07's pictures of the tensor-core data layouts, computed from the PTX ISA's rules.

    /usr/bin/python3 docs/plots/draw_tensor_core_layouts.py [--out DIR]     (default: docs/figures)

Writes four PNGs (docs/07_tensor_cores.md shows them):

  07_mma_fragments.png   mma.sync.m16n8k16: which lane and register hold each element of A, B, C
  07_c_to_a.png          two 16 × 8 accumulator tiles of S are, packed to 16 bits, the A fragment
                         of one 16 × 16 tile of P (no data moves between lanes)
  07_ldmatrix.png        ldmatrix.x4: which lane gives which row address, which register receives
                         which 8 × 8 matrix, for Q (A), K (B) and V (B, .trans)
  07_swizzle.png         the 128-byte swizzle: logical 16-byte chunks at their physical places,
                         and the banks one ldmatrix phase hits without and with the XOR

Nothing is placed by hand: every cell comes from the layout functions in the first half of this
file, which state the rules written in common/cuda/include/fa/cuda/ptx/mma.cuh and ldmatrix.cuh
(the PTX ISA's fragment tables) and the address maps of steps/07_tensor_cores/flash_tc_kernel.cuh
and tile_ops.cuh. test_tensor_core_layouts.py checks those functions against the rules (every
element held exactly once, ldmatrix delivering exactly the mma fragments, the swizzle
conflict-free). The functions need only the standard library; the drawing needs matplotlib.
docs/plots/make_figures.sh runs this script with the other figures. Deterministic: the same
matplotlib gives the same PNG bytes.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

# ------------------------------------------------------------------------------------------------
# The layouts (standard library only; test_tensor_core_layouts.py imports these)
#
# Lanes 0..31 of a warp; g = lane / 4 (the group, 0..7), t = lane % 4 (the thread in the group).
# A register of a 16-bit operand holds two elements: half 0 in its low 16 bits, half 1 in its high.

LANES = range(32)


def group(lane: int) -> int:
    return lane // 4


def thread_in_group(lane: int) -> int:
    return lane % 4


def a_element(lane: int, reg: int, half: int) -> tuple[int, int]:
    """mma.m16n8k16's A (16 × 16, row-major): (row, col) of a[reg]'s half.
    a[0] = A[g][2t, 2t+1], a[1] = A[g+8][2t, 2t+1], a[2] = A[g][2t+8, 2t+9], a[3] = A[g+8][2t+8, 2t+9]."""
    g, t = group(lane), thread_in_group(lane)
    return g + 8 * (reg % 2), 2 * t + half + 8 * (reg // 2)


def b_element(lane: int, reg: int, half: int) -> tuple[int, int]:
    """B (16 × 8, k × n): (k, n) of b[reg]'s half. b[0] = B[2t, 2t+1][g], b[1] = B[2t+8, 2t+9][g]."""
    g, t = group(lane), thread_in_group(lane)
    return 2 * t + half + 8 * reg, g


def c_element(lane: int, reg: int) -> tuple[int, int]:
    """C and D (16 × 8, float32): (row, col) of c[reg]. c[0], c[1] = C[g][2t, 2t+1]; c[2], c[3] = C[g+8][2t, 2t+1]."""
    g, t = group(lane), thread_in_group(lane)
    return g + 8 * (reg // 2), 2 * t + reg % 2


A_SLOTS = [(lane, reg, half) for lane in LANES for reg in range(4) for half in range(2)]
B_SLOTS = [(lane, reg, half) for lane in LANES for reg in range(2) for half in range(2)]
C_SLOTS = [(lane, reg) for lane in LANES for reg in range(4)]


def holders(element, slots) -> dict[tuple[int, int], list[tuple]]:
    """(row, col) -> every slot (lane, reg[, half]) that holds it."""
    out: dict[tuple[int, int], list[tuple]] = {}
    for slot in slots:
        out.setdefault(element(*slot), []).append(slot)
    return out


def p_source(reg: int, half: int) -> tuple[int, int]:
    """The C→A identity. For k-step s of O += P·V, the A fragment of P's 16 × 16 tile (keys 16s ..
    16s+15) is the two S accumulator tiles n = 2s (keys 16s .. +7) and 2s+1 (keys 16s+8 .. +15),
    rounded to 16 bits and packed in pairs, in the same lane:
        a[0] = pack(c_2s[0], c_2s[1])       a[1] = pack(c_2s[2], c_2s[3])
        a[2] = pack(c_2s+1[0], c_2s+1[1])   a[3] = pack(c_2s+1[2], c_2s+1[3])
    Returns (which of the two tiles, 0 or 1; its accumulator register) for a[reg]'s half."""
    return reg // 2, 2 * (reg % 2) + half


# ldmatrix.x4 (ldmatrix.cuh): lanes 8i .. 8i+7 give the row addresses of 8 × 8 matrix i (one 16-byte
# row each); every lane receives register r[i] from matrix i.

def ldmatrix_address_of(lane: int) -> tuple[int, int]:
    """(matrix i, row j) whose 16-byte row address this lane gives."""
    return lane // 8, lane % 8


def ldmatrix_received(lane: int, half: int, trans: bool) -> tuple[int, int]:
    """(row, col) inside each 8 × 8 matrix of the element a lane receives in that matrix's register.
    Plain: r[i] = M_i[lane/4][2·(lane%4), +1]; .trans: r[i] = M_i[2·(lane%4), +1][lane/4]."""
    g, t = group(lane), thread_in_group(lane)
    return (2 * t + half, g) if trans else (g, 2 * t + half)


# The row addresses stage 07's kernel gives ldmatrix, as (row, first column) inside one 16 × 16
# block of a [rows][d] tile (flash_tc_kernel.cuh): Q and V by lane % 16 and lane / 16, K by lane % 8,
# lane / 16 and lane / 8 % 2.

def q_address(lane: int) -> tuple[int, int]:
    """Q [query][d] → the A fragment of a 16 × 16 step: rows lane % 16, columns 8·(lane / 16)."""
    return lane % 16, 8 * (lane // 16)


def k_address(lane: int) -> tuple[int, int]:
    """K [key][d] → the B fragments of two 8-key column tiles: keys lane%8 + 8·(lane/16), d 8·(lane/8 % 2)."""
    return lane % 8 + 8 * (lane // 16), 8 * (lane // 8 % 2)


def v_address(lane: int) -> tuple[int, int]:
    """V [key][d] → (.trans) the B fragments of two 8-wide d tiles: keys lane % 16, d 8·(lane / 16)."""
    return lane % 16, 8 * (lane // 16)


def ldmatrix_x4(address, trans: bool) -> dict[tuple[int, int, int], tuple[int, int]]:
    """Simulates ldmatrix.x4 on a tile: address(lane) -> (row, first col) of the 16-byte row that lane
    gives. Returns (lane, register i, half) -> (row, col) in the tile of the element received."""
    rows = {ldmatrix_address_of(lane): address(lane) for lane in LANES}
    out = {}
    for lane in LANES:
        for i in range(4):
            for half in range(2):
                r, c = ldmatrix_received(lane, half, trans)
                row0, col0 = rows[(i, r)]
                out[(lane, i, half)] = (row0, col0 + c)
    return out


# Shared memory: 32 banks of 4 bytes, 128 bytes served per clock (one "wavefront") when no two
# accesses need different words of one bank. Here a "bank group" is 4 neighbouring banks (16
# bytes, one chunk of 8 elements): 8 groups per 128 bytes. ldmatrix reads 8 rows × 16 bytes per phase.

BANKS, BANK_BYTES, CHUNK_BYTES = 32, 4, 16
ELEMENT_BYTES = 2  # fp16 / bf16


def swizzled_position(row: int, chunk: int) -> int:
    """The 128-byte swizzle: row r's 16-byte chunk c sits at chunk position c XOR (r mod 8)."""
    return chunk ^ (row % 8)


def swizzled_offset(rows: int, row: int, col: int) -> int:
    """tile_ops.cuh's SwizzledTile<ROWS, D>::offset, in elements (col a multiple of 8): column blocks
    64 elements wide, each ROWS × 64, rows of 128 bytes, chunks XOR-ed with the row."""
    return (col >> 6) * (rows * 64) + row * 64 + ((((col >> 3) & 7) ^ (row & 7)) << 3)


def swizzled_elements(rows: int, d: int) -> int:
    """SwizzledTile<ROWS, D>::kElements: D padded to a multiple of 64 columns."""
    return rows * ((d + 63) // 64) * 64


def plain_offset(d: int, row: int, col: int) -> int:
    """tile_ops.cuh's PlainTile<ROWS, D>::offset: row-major, rows of D elements."""
    return row * d + col


def bank_group(byte_address: int) -> int:
    """The 16-byte bank group (0..7: banks 4k .. 4k+3) of a 16-byte-aligned address."""
    return (byte_address // CHUNK_BYTES) % (BANKS * BANK_BYTES // CHUNK_BYTES)


def conflict_degree(byte_addresses, nbytes: int) -> int:
    """The most distinct 4-byte words any one bank must serve for these accesses of nbytes each:
    1 is conflict-free, 8 means the access takes 8 times as long as it should."""
    words: dict[int, set[int]] = {}
    for a in byte_addresses:
        for w in range(a // BANK_BYTES, (a + nbytes - 1) // BANK_BYTES + 1):
            words.setdefault(w % BANKS, set()).add(w)
    return max(len(s) for s in words.values())


def phase_addresses(offset, rows, chunk: int) -> list[int]:
    """Byte addresses of the 16-byte chunk `chunk` of each row in rows, given offset(row, col) in elements."""
    return [offset(r, 8 * chunk) * ELEMENT_BYTES for r in rows]


# ------------------------------------------------------------------------------------------------
# Drawing (matplotlib)

# One pastel colour per lane group g (rows of A and C, columns of B), dark text readable on each.
GROUP_COLOURS = ["#fbb4ae", "#b3cde3", "#ccebc5", "#decbe4", "#fed9a6", "#ffffcc", "#e5d8bd", "#d9d9d9"]
# One colour per register (a[0..3], r[0..3]) where registers are the point.
REG_COLOURS = ["#8dd3c7", "#fdb462", "#bebada", "#fb8072"]
HIGHLIGHT_LANE = 5  # the lane whose cells get a thick border in the fragment figure (g = 1, t = 1)


class Canvas:
    """One axes in cell units: x to the right, y downwards, cell (r, c) at [c, c+1] × [r, r+1]."""

    def __init__(self, plt, width: float, height: float, inches_per_cell: float):
        self.plt = plt
        self.fig = plt.figure(figsize=(width * inches_per_cell, height * inches_per_cell))
        self.ax = self.fig.add_axes((0, 0, 1, 1))
        self.ax.set_xlim(0, width)
        self.ax.set_ylim(height, 0)
        self.ax.set_axis_off()
        from matplotlib.patches import FancyArrowPatch, Rectangle

        self.Rectangle, self.Arrow = Rectangle, FancyArrowPatch

    def cell(self, x, y, text="", colour="white", w=1.0, h=1.0, size=7.5, weight="normal", edge="0.55",
             lw=0.5, text_colour="black"):
        self.ax.add_patch(self.Rectangle((x, y), w, h, facecolor=colour, edgecolor=edge, linewidth=lw))
        if text:
            self.ax.text(x + w / 2, y + h / 2, text, ha="center", va="center", fontsize=size, weight=weight,
                         color=text_colour, linespacing=1.05)

    def frame(self, x, y, w, h, lw=2.0, colour="black"):
        self.ax.add_patch(self.Rectangle((x, y), w, h, fill=False, edgecolor=colour, linewidth=lw))

    def text(self, x, y, s, size=9, ha="center", va="center", **kw):
        self.ax.text(x, y, s, ha=ha, va=va, fontsize=size, **kw)

    def arrow(self, x0, y0, x1, y1, lw=1.8):
        self.ax.add_patch(self.Arrow((x0, y0), (x1, y1), arrowstyle="-|>", mutation_scale=18, linewidth=lw,
                                     color="0.2"))

    def axis_labels(self, x, y, rows, cols, row_name, col_name, step=1, size=7):
        """Row numbers left of a grid at (x, y), column numbers above it, and the two axis names."""
        for r in range(0, rows, step):
            self.text(x - 0.25, y + r + 0.5, str(r), size=size, ha="right", color="0.3")
        for c in range(0, cols, step):
            self.text(x + c + 0.5, y - 0.3, str(c), size=size, color="0.3")
        self.text(x - 1.3, y + rows / 2, row_name, size=9, rotation=90, color="0.2")
        self.text(x + cols / 2, y - 1.0, col_name, size=9, color="0.2")

    def save(self, path: Path):
        self.fig.savefig(path, dpi=110)
        self.plt.close(self.fig)
        print(path)


def draw_fragments(plt, out: Path) -> Path:
    """(a) A 16 × 16, B 16 × 8, C 16 × 8: lane and register of every element, colour by group g."""
    ax0, bx0, cx0, y0 = 2.0, 22.5, 35.5, 3.4
    cv = Canvas(plt, 44.5, 24.5, 0.5)
    cv.text(22, 0.7, "mma.sync.aligned.m16n8k16.row.col.f32.{f16|bf16}: one warp, D = A·B + C", size=15,
            weight="bold")
    a, b, c = holders(a_element, A_SLOTS), holders(b_element, B_SLOTS), holders(c_element, C_SLOTS)
    for r in range(16):
        for col in range(16):
            lane, reg, _ = a[(r, col)][0]
            cv.cell(ax0 + col, y0 + r, f"T{lane}\na{reg}", GROUP_COLOURS[group(lane)])
        for col in range(8):
            lane, reg, _ = b[(r, col)][0]
            cv.cell(bx0 + col, y0 + r, f"T{lane}\nb{reg}", GROUP_COLOURS[group(lane)])
            lane, reg = c[(r, col)][0]
            cv.cell(cx0 + col, y0 + r, f"T{lane}\nc{reg}", GROUP_COLOURS[group(lane)])
    # One lane's fragment, outlined in all three.
    for (r, col), slots in a.items():
        if slots[0][0] == HIGHLIGHT_LANE:
            cv.frame(ax0 + col, y0 + r, 1, 1, lw=2.2)
    for (r, col), slots in b.items():
        if slots[0][0] == HIGHLIGHT_LANE:
            cv.frame(bx0 + col, y0 + r, 1, 1, lw=2.2)
    for (r, col), slots in c.items():
        if slots[0][0] == HIGHLIGHT_LANE:
            cv.frame(cx0 + col, y0 + r, 1, 1, lw=2.2)
    for x, w in ((ax0, 16), (bx0, 8), (cx0, 8)):
        cv.frame(x, y0, w, 16, lw=1.2, colour="0.3")
    cv.axis_labels(ax0, y0, 16, 16, "row m", "column k")
    cv.axis_labels(bx0, y0, 16, 8, "row k", "column n")
    cv.axis_labels(cx0, y0, 16, 8, "row m", "column n")
    cv.text(ax0 + 8, y0 + 16.8, "A: 16 × 16, row-major, 4 registers per lane (2 values each)", size=10.5)
    cv.text(bx0 + 4, y0 + 16.8, "B: 16 × 8 (k × n), 2 registers", size=10.5)
    cv.text(cx0 + 4, y0 + 16.8, "C, D: 16 × 8, float32, 4 registers", size=10.5)
    cv.text(19.6, y0 + 8, "×", size=28)
    cv.text(32.6, y0 + 8, "=", size=28)
    notes = [
        "Cell: the lane (T0..T31) and the register that hold the element. A register of A or B holds two 16-bit elements,",
        "neighbours in a row of A or in a column of B, the even one in its low half. With g = lane / 4 and t = lane % 4:",
        "a[0] = A[g][2t, 2t+1]   a[1] = A[g+8][2t, 2t+1]   a[2] = A[g][2t+8, 2t+9]   a[3] = A[g+8][2t+8, 2t+9]",
        "b[0] = B[2t, 2t+1][g]   b[1] = B[2t+8, 2t+9][g]        c[0], c[1] = C[g][2t, 2t+1]   c[2], c[3] = C[g+8][2t, 2t+1]",
        f"Colour: the group g (the 4 lanes 4g .. 4g+3 share rows g and g+8 of A and C, column g of B). "
        f"Thick border: every element lane T{HIGHLIGHT_LANE} holds (g = 1, t = 1).",
    ]
    for i, line in enumerate(notes):
        cv.text(ax0 - 1.0, y0 + 18.3 + 0.62 * i, line, size=9.5, ha="left",
                family="monospace" if i in (2, 3) else None)
    path = out / "07_mma_fragments.png"
    cv.save(path)
    return path


def draw_c_to_a(plt, out: Path) -> Path:
    """(b) Two 16 × 8 accumulator tiles of S, side by side, are the A fragment of one 16 × 16 tile of P."""
    lx0, rx0, ax0, y0 = 2.0, 11.0, 25.0, 3.4
    cv = Canvas(plt, 42.0, 24.5, 0.5)
    cv.text(21, 0.7, "P stays in registers: the accumulators of S are the A operand of P·V", size=15,
            weight="bold")
    c = holders(c_element, C_SLOTS)
    a = holders(a_element, A_SLOTS)
    for tile, x0 in ((0, lx0), (1, rx0)):
        for r in range(16):
            for col in range(8):
                lane, reg = c[(r, col)][0]
                a_reg = 2 * tile + reg // 2  # the A register this accumulator becomes (p_source inverted)
                cv.cell(x0 + col, y0 + r, f"T{lane}\nc{reg}", REG_COLOURS[a_reg])
        cv.frame(x0, y0, 8, 16, lw=1.2, colour="0.3")
    for r in range(16):
        for col in range(16):
            lane, reg, half = a[(r, col)][0]
            cv.cell(ax0 + col, y0 + r, f"T{lane}\na{reg}", REG_COLOURS[reg])
    cv.frame(ax0, y0, 16, 16, lw=1.2, colour="0.3")
    cv.axis_labels(lx0, y0, 16, 8, "query row (of the warp's 16)", "")
    for x0, first in ((lx0, 0), (rx0, 8)):
        for col in range(8):
            cv.text(x0 + col + 0.5, y0 - 0.3, str(first + col), size=7, color="0.3")
    cv.text(lx0 + 4, y0 - 1.0, "S tile n = 2s: keys 16s + 0..7", size=9, color="0.2")
    cv.text(rx0 + 4, y0 - 1.0, "S tile n = 2s+1: keys 16s + 8..15", size=9, color="0.2")
    cv.text(lx0 + 4, y0 - 2.0, "c_2s (float32)", size=10.5, weight="bold")
    cv.text(rx0 + 4, y0 - 2.0, "c_2s+1 (float32)", size=10.5, weight="bold")
    cv.axis_labels(ax0, y0, 16, 16, "row m", "column k = key 16s + k")
    cv.text(ax0 + 8, y0 - 2.0, "a: the A fragment of P's 16 × 16 tile for k-step s (16-bit)", size=10.5,
            weight="bold")
    cv.arrow(19.4, y0 + 8, 23.0, y0 + 8)
    cv.text(21.2, y0 + 6.6, "round to 16 bits,\npack in pairs", size=9.5)
    cv.text(21.2, y0 + 9.8, "same lane,\nsame place:\nno shuffle,\nno shared\nmemory", size=9.5)
    notes = [
        "a[0] = pack(c_2s[0], c_2s[1])       a[1] = pack(c_2s[2], c_2s[3])",
        "a[2] = pack(c_2s+1[0], c_2s+1[1])   a[3] = pack(c_2s+1[2], c_2s+1[3])",
    ]
    for i, line in enumerate(notes):
        cv.text(lx0 - 1.0, y0 + 17.6 + 0.65 * i, line, size=10.5, ha="left", family="monospace")
    words = [
        "Colour: the A register an element ends up in. A lane's accumulator c[0], c[1] (row g, keys 2t, 2t+1) is where A wants",
        "a[0] (or a[2] for the right-hand tile), and c[2], c[3] (row g+8) is where A wants a[1] (or a[3]). So after the online",
        "softmax has turned S into P in place, each k-step of O += P·V takes its A operand from four pack instructions.",
    ]
    for i, line in enumerate(words):
        cv.text(lx0 - 1.0, y0 + 19.2 + 0.62 * i, line, size=9.5, ha="left")
    path = out / "07_c_to_a.png"
    cv.save(path)
    return path


def draw_ldmatrix(plt, out: Path) -> Path:
    """(c) ldmatrix.x4 for Q (A), K (B, two key tiles) and V (.trans, B, two d tiles)."""
    cv = Canvas(plt, 60.0, 36.6, 0.36)
    cv.text(30, 0.8, "ldmatrix.sync.aligned.m8n8.x4[.trans].shared.b16: 32 row addresses in, 4 registers out",
            size=15, weight="bold")
    y0 = 4.4
    panels = [
        (2.5, "Q tile [query][d] → A of one 16 × 16 step", q_address, False, "query row", "d",
         lambda i: f"r{i} = a[{i}]"),
        (22.5, "K tile [key][d] → B of two 8-key tiles", k_address, False, "key", "d",
         lambda i: f"r{i} = b[{i % 2}] of key tile {i // 2}"),
        (42.5, "V tile [key][d] → B of two 8-wide d tiles (.trans)", v_address, True, "key", "d",
         lambda i: f"r{i} = b[{i % 2}] of d tile {i // 2}"),
    ]
    for x0, title, address, trans, row_name, col_name, reg_name in panels:
        for r in range(16):
            for col in range(16):
                cv.cell(x0 + col, y0 + r, "", "white", lw=0.3, edge="0.8")
        for lane in LANES:
            i, _ = ldmatrix_address_of(lane)
            row, col0 = address(lane)
            cv.cell(x0 + col0, y0 + row, "", REG_COLOURS[i], w=8, h=1, edge="0.4", lw=0.8)
            cv.text(x0 + col0 + 0.4, y0 + row + 0.5, f"T{lane}", size=8.5, ha="left")
        # Each 8 × 8 matrix: which register it lands in.
        quads = {}
        for lane in LANES:
            i, _ = ldmatrix_address_of(lane)
            row, col0 = address(lane)
            quads.setdefault(i, (row - row % 8, col0))
        for i, (qr, qc) in quads.items():
            cv.frame(x0 + qc, y0 + qr, 8, 8, lw=1.8, colour="0.15")
            cv.text(x0 + qc + 4.9, y0 + qr + 4, reg_name(i).replace(" of ", "\nof "), size=9, weight="bold",
                    color="0.1", bbox=dict(boxstyle="round,pad=0.3", fc="white", ec="0.5", alpha=0.9))
        cv.axis_labels(x0, y0, 16, 16, row_name, col_name, step=1, size=6.5)
        cv.text(x0 + 8, y0 - 2.1, title, size=11, weight="bold")
    cv.text(30, y0 + 17.0, "Top: each box is one 16-byte row (8 elements); the label is the lane that gives its "
            "address, the colour the 8 × 8 matrix i (lanes 8i .. 8i+7) and so the register r[i] it lands in.",
            size=9.5)

    # Bottom: what a lane receives from one 8 × 8 matrix, plain and transposed.
    y1 = 24.8
    for x0, trans, title in ((8.0, False, "plain: r[i] = M_i[lane/4][2·(lane%4), +1]   (rows to groups)"),
                             (36.0, True, ".trans: r[i] = M_i[2·(lane%4), +1][lane/4]   (columns to groups)")):
        got = {}
        for lane in LANES:
            for half in range(2):
                got[ldmatrix_received(lane, half, trans)] = (lane, half)
        for r in range(8):
            for col in range(8):
                lane, half = got[(r, col)]
                cv.cell(x0 + 2 * col, y1 + r, f"T{lane}.{'hi' if half else 'lo'}", GROUP_COLOURS[group(lane)],
                        w=2, h=1, size=8)
        cv.frame(x0, y1, 16, 8, lw=1.5, colour="0.2")
        for r in range(8):
            cv.text(x0 - 0.3, y1 + r + 0.5, str(r), size=7, ha="right", color="0.3")
        for col in range(8):
            cv.text(x0 + 2 * col + 1, y1 - 0.35, str(col), size=7, color="0.3")
        cv.text(x0 - 1.1, y1 + 4, "row of M_i", size=8.5, rotation=90, color="0.2")
        cv.text(x0 + 8, y1 - 1.05, "column of M_i", size=8.5, color="0.2")
        cv.text(x0 + 8, y1 - 2.1, title, size=10.5, weight="bold")
    cv.text(30, y1 + 9.3, "Bottom: the element of one 8 × 8 matrix M_i that each lane receives in register r[i] "
            "(lo: its low 16 bits). Colour: the lane's group g = lane / 4.", size=9.5)
    cv.text(30, y1 + 10.3, "Plain, this is the mma fragment of a row-major 8 × 8 block (A, or B from K stored "
            "[key][d]); .trans gives the pairs down a column: B from V stored [key][d].", size=9.5)
    path = out / "07_ldmatrix.png"
    cv.save(path)
    return path


def draw_swizzle(plt, out: Path) -> Path:
    """(d) 8 rows × 8 chunks of a 128-byte-row tile: plain and swizzled; one ldmatrix phase's banks."""
    cv = Canvas(plt, 46.0, 20.8, 0.42)
    cv.text(23, 0.8, "The 128-byte swizzle: chunk c of row r stored at position c XOR (r mod 8)", size=15,
            weight="bold")
    chunk = 2  # the logical chunk one ldmatrix phase reads (d = 16 .. 23)
    y0, w = 5.0, 2.2
    rows = range(8)
    cases = [
        (3.4, "row-major (no swizzle): 128-byte rows", lambda r, c: c,
         lambda r, col: plain_offset(64, r, col)),
        (26.0, "swizzled: position = c XOR (r mod 8)", swizzled_position,
         lambda r, col: swizzled_offset(8, r, col)),
    ]
    for x0, title, position, offset in cases:
        # physical position p of row r holds the logical chunk c with position(r, c) == p
        for r in rows:
            for c in range(8):
                p = position(r, c)
                hit = c == chunk
                cv.cell(x0 + w * p, y0 + r, f"c{c}\nd {8 * c}–{8 * c + 7}",
                        "#e6550d" if hit else GROUP_COLOURS[c], w=w, h=1, size=8,
                        weight="bold" if hit else "normal", text_colour="white" if hit else "black")
        cv.frame(x0, y0, 8 * w, 8, lw=1.2, colour="0.3")
        for p in range(8):
            cv.text(x0 + w * p + w / 2, y0 - 0.35, f"{p}", size=8, color="0.3")
            cv.text(x0 + w * p + w / 2, y0 - 1.15, f"{4 * p}–{4 * p + 3}", size=7.5, color="0.3")
        cv.text(x0 - 0.9, y0 - 0.35, "physical position", size=7.5, ha="right", color="0.3")
        cv.text(x0 - 0.9, y0 - 1.15, "banks", size=7.5, ha="right", color="0.3")
        for r in rows:
            cv.text(x0 - 0.3, y0 + r + 0.5, f"row {r}", size=8, ha="right", color="0.3")
        cv.text(x0 + 4 * w, y0 - 2.4, title, size=11.5, weight="bold")
        # The banks the phase hits: rows 0..7 of logical chunk `chunk`.
        addresses = phase_addresses(offset, rows, chunk)
        hits = [0] * 8
        for a in addresses:
            hits[bank_group(a)] += 1
        yb = y0 + 9.0
        for p in range(8):
            cv.cell(x0 + w * p, yb, str(hits[p]) if hits[p] else "·", "#fdae6b" if hits[p] else "white", w=w,
                    h=1.1, size=11, weight="bold" if hits[p] else "normal")
        cv.text(x0 - 0.3, yb + 0.55, "rows per\nbank group", size=8, ha="right", color="0.3")
        degree = conflict_degree(addresses, 16)
        groups = len({bank_group(a) for a in addresses})
        verdict = (f"{groups} bank group for 8 rows: {degree}-way conflict, {degree} wavefronts" if degree > 1
                   else f"{groups} bank groups for 8 rows: conflict-free, 1 wavefront")
        cv.text(x0 + 4 * w, yb + 1.9, verdict, size=10.5, weight="bold",
                color="#a50f15" if degree > 1 else "#006d2c")
    cv.text(2.0, 17.4, f"One ldmatrix phase reads logical chunk c{chunk} (d = {8 * chunk}..{8 * chunk + 7}, "
            "orange) of 8 consecutive rows: 8 × 16 bytes, one 128-byte wavefront if they fall in 8 different "
            "bank groups.", size=9.5, ha="left")
    cv.text(2.0, 18.2, "A bank group is 4 banks of 4 bytes (16 bytes); a 128-byte row spans all 8. Without the "
            "swizzle every row starts at bank 0, so chunk c of every row is in the same 4 banks", size=9.5,
            ha="left")
    cv.text(2.0, 19.0, "(so too with 256-byte rows, D = 128). With it, the 8 rows of any chunk sit in 8 "
            "different groups, and a row's 8 chunks are still all there: the XOR only permutes them.",
            size=9.5, ha="left")
    cv.text(2.0, 19.8, "Each row of a 64-column block is 128 bytes; wider tiles are stored as such blocks side "
            "by side (D = 32 and 96 padded to 64 and 128 columns). Hopper's TMA and wgmma use the same pattern.",
            size=9.5, ha="left")
    path = out / "07_swizzle.png"
    cv.save(path)
    return path


DRAWINGS = (draw_fragments, draw_c_to_a, draw_ldmatrix, draw_swizzle)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent.parent / "figures",
                        help="folder for the PNGs (default: docs/figures)")
    args = parser.parse_args(argv)
    try:
        import matplotlib
    except ImportError:
        print(f"draw_tensor_core_layouts.py: matplotlib is not installed for {sys.executable} "
              "(Debian: python3-matplotlib; try /usr/bin/python3)", file=sys.stderr)
        return 2
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    args.out.mkdir(parents=True, exist_ok=True)
    for draw in DRAWINGS:
        draw(plt, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
