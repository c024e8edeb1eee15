#!/usr/bin/env python3
"""Tests of the layout functions behind chapter 07's figures (draw_tensor_core_layouts.py).

    python3 docs/plots/test_tensor_core_layouts.py            # or: ctest -R tensor_core_layouts

The figures are drawn from these functions, so the figures are right when the functions are. Each
test states one rule of the PTX ISA as common/cuda/include/fa/cuda/ptx/mma.cuh and ldmatrix.cuh
write it, or one property stage 07's kernel relies on (steps/07_tensor_cores/flash_tc_kernel.cuh,
tile_ops.cuh), and checks the functions against it by enumeration. Standard library only; the
last test draws the figures when matplotlib is there.
"""

from __future__ import annotations

import importlib.util
import itertools
import sys
import tempfile
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import draw_tensor_core_layouts as L  # noqa: E402

HAVE_MPL = importlib.util.find_spec("matplotlib") is not None


class MmaFragments(unittest.TestCase):
    """mma.sync.m16n8k16: who holds what (mma.cuh's header)."""

    def assert_partition(self, element, slots, rows, cols):
        held = L.holders(element, slots)
        self.assertEqual(set(held), {(r, c) for r in range(rows) for c in range(cols)})
        for rc, who in held.items():
            self.assertEqual(len(who), 1, f"{rc} held by {who}")
        self.assertEqual(len(slots), rows * cols)

    def test_every_element_of_a_held_exactly_once(self):
        self.assert_partition(L.a_element, L.A_SLOTS, 16, 16)

    def test_every_element_of_b_held_exactly_once(self):
        self.assert_partition(L.b_element, L.B_SLOTS, 16, 8)

    def test_every_element_of_c_held_exactly_once(self):
        self.assert_partition(L.c_element, L.C_SLOTS, 16, 8)

    def test_the_isa_table(self):
        # a[0] = A[g][2t, 2t+1], a[1] = A[g+8][..], a[2] = A[g][2t+8, 2t+9], a[3] = A[g+8][2t+8, 2t+9];
        # b[0] = B[2t, 2t+1][g], b[1] = B[2t+8, 2t+9][g]; c[0,1] = C[g][2t, 2t+1], c[2,3] = C[g+8][..].
        for lane in L.LANES:
            g, t = lane // 4, lane % 4
            self.assertEqual([L.a_element(lane, r, h) for r in range(4) for h in range(2)],
                             [(g, 2 * t), (g, 2 * t + 1), (g + 8, 2 * t), (g + 8, 2 * t + 1),
                              (g, 2 * t + 8), (g, 2 * t + 9), (g + 8, 2 * t + 8), (g + 8, 2 * t + 9)])
            self.assertEqual([L.b_element(lane, r, h) for r in range(2) for h in range(2)],
                             [(2 * t, g), (2 * t + 1, g), (2 * t + 8, g), (2 * t + 9, g)])
            self.assertEqual([L.c_element(lane, r) for r in range(4)],
                             [(g, 2 * t), (g, 2 * t + 1), (g + 8, 2 * t), (g + 8, 2 * t + 1)])

    def test_a_row_belongs_to_one_group(self):
        # Why a row's max and sum need only the 4 lanes of a group (two shuffles, xor 1 and 2).
        for element, slots in ((L.a_element, L.A_SLOTS), (L.c_element, L.C_SLOTS)):
            for row in range(16):
                lanes = {s[0] for s in slots if element(*s)[0] == row}
                self.assertEqual(lanes, set(range(4 * (row % 8), 4 * (row % 8) + 4)))
        for col in range(8):
            lanes = {s[0] for s in L.B_SLOTS if L.b_element(*s)[1] == col}
            self.assertEqual(lanes, set(range(4 * col, 4 * col + 4)))

    def test_register_halves_are_neighbours(self):
        # A 32-bit register of A holds two neighbours of one row, of B two neighbours of one column,
        # the even one low: what pack2(lo, hi) and a 32-bit load of a row-major pair produce.
        for lane, reg in itertools.product(L.LANES, range(4)):
            (r0, c0), (r1, c1) = L.a_element(lane, reg, 0), L.a_element(lane, reg, 1)
            self.assertEqual((r1, c1), (r0, c0 + 1))
            self.assertEqual(c0 % 2, 0)
        for lane, reg in itertools.product(L.LANES, range(2)):
            (k0, n0), (k1, n1) = L.b_element(lane, reg, 0), L.b_element(lane, reg, 1)
            self.assertEqual((k1, n1), (k0 + 1, n0))


class CToA(unittest.TestCase):
    """P never leaves the registers: two S accumulator tiles are one A fragment, lane by lane."""

    def test_same_lane_same_element(self):
        for lane, reg, half in L.A_SLOTS:
            tile, c_reg = L.p_source(reg, half)
            row, col = L.c_element(lane, c_reg)
            self.assertEqual(L.a_element(lane, reg, half), (row, 8 * tile + col),
                             f"lane {lane} a[{reg}] half {half}")

    def test_the_pack_order(self):
        # a[0] = pack(c_2s[0], c_2s[1]), a[1] = pack(c_2s[2], c_2s[3]),
        # a[2] = pack(c_2s+1[0], c_2s+1[1]), a[3] = pack(c_2s+1[2], c_2s+1[3]).
        self.assertEqual([[L.p_source(r, h) for h in range(2)] for r in range(4)],
                         [[(0, 0), (0, 1)], [(0, 2), (0, 3)], [(1, 0), (1, 1)], [(1, 2), (1, 3)]])

    def test_every_accumulator_used_once(self):
        sources = [L.p_source(r, h) for r in range(4) for h in range(2)]
        self.assertEqual(sorted(sources), [(t, c) for t in range(2) for c in range(4)])


class Ldmatrix(unittest.TestCase):
    """ldmatrix.x4 (ldmatrix.cuh) and the addresses stage 07's kernel gives it."""

    def test_address_lanes_cover_four_matrices(self):
        self.assertEqual(sorted(L.ldmatrix_address_of(lane) for lane in L.LANES),
                         [(i, j) for i in range(4) for j in range(8)])

    def test_each_matrix_element_received_once(self):
        for trans in (False, True):
            got = sorted(L.ldmatrix_received(lane, h, trans) for lane in L.LANES for h in range(2))
            self.assertEqual(got, [(r, c) for r in range(8) for c in range(8)])

    def test_plain_is_the_accumulator_pattern_and_trans_its_transpose(self):
        for lane, h in itertools.product(L.LANES, range(2)):
            self.assertEqual(L.ldmatrix_received(lane, h, False), L.c_element(lane, h))
            r, c = L.ldmatrix_received(lane, h, False)
            self.assertEqual(L.ldmatrix_received(lane, h, True), (c, r))

    def test_kernel_addresses_cover_the_block(self):
        # 32 distinct 16-byte rows of one 16 × 16 block; lanes 8i .. 8i+7 give 8 consecutive rows
        # (aligned to 8) at one column chunk: one 8 × 8 matrix each, four different ones.
        for address in (L.q_address, L.k_address, L.v_address):
            rows = sorted(address(lane) for lane in L.LANES)
            self.assertEqual(rows, sorted((r, c) for r in range(16) for c in (0, 8)))
            quads = set()
            for i in range(4):
                phase = [address(8 * i + j) for j in range(8)]
                self.assertEqual({c for _, c in phase}, {phase[0][1]})
                self.assertEqual([r for r, _ in phase], list(range(phase[0][0], phase[0][0] + 8)))
                self.assertEqual(phase[0][0] % 8, 0)
                quads.add(phase[0])
            self.assertEqual(len(quads), 4)

    def test_q_gives_the_a_fragment(self):
        got = L.ldmatrix_x4(L.q_address, trans=False)
        for lane, i, h in got:
            self.assertEqual(got[(lane, i, h)], L.a_element(lane, i, h))

    def test_k_gives_the_b_fragments_of_two_key_tiles(self):
        # K is stored [key][d]; B = Kᵀ (k = d, n = key): K's rows are B's columns ("col" operand).
        got = L.ldmatrix_x4(L.k_address, trans=False)
        for (lane, i, h), (key, d) in got.items():
            k, n = L.b_element(lane, i % 2, h)
            self.assertEqual((key, d), (8 * (i // 2) + n, k), f"lane {lane} r{i} half {h}")

    def test_v_trans_gives_the_b_fragments_of_two_d_tiles(self):
        # V is stored [key][d]; B = V (k = key, n = d): B's pairs run down a column, hence .trans.
        got = L.ldmatrix_x4(L.v_address, trans=True)
        for (lane, i, h), (key, d) in got.items():
            k, n = L.b_element(lane, i % 2, h)
            self.assertEqual((key, d), (k, 8 * (i // 2) + n), f"lane {lane} r{i} half {h}")

    def test_v_without_trans_would_be_wrong(self):
        got = L.ldmatrix_x4(L.v_address, trans=False)
        wrong = sum(got[(lane, i, h)] != (L.b_element(lane, i % 2, h)[0], 8 * (i // 2) + L.b_element(lane, i % 2, h)[1])
                    for lane, i, h in got)
        self.assertGreater(wrong, 0)


class Swizzle(unittest.TestCase):
    """The 128-byte swizzle of tile_ops.cuh's SwizzledTile, against PlainTile."""

    def test_position_is_a_permutation_of_each_row(self):
        for r in range(64):
            self.assertEqual(sorted(L.swizzled_position(r, c) for c in range(8)), list(range(8)))

    def test_offset_is_a_bijection_onto_the_padded_tile(self):
        for rows, d in itertools.product((16, 64, 128), (32, 64, 96, 128, 256)):
            offsets = [L.swizzled_offset(rows, r, 8 * c) for r in range(rows) for c in range(d // 8)]
            self.assertEqual(len(set(offsets)), len(offsets), f"{rows} × {d}")
            self.assertTrue(all(o % 8 == 0 and 0 <= o < L.swizzled_elements(rows, d) for o in offsets))
            self.assertEqual(L.swizzled_elements(rows, d), rows * 64 * ((d + 63) // 64))

    def test_offset_is_the_drawn_position(self):
        for r, c in itertools.product(range(64), range(8)):
            self.assertEqual(L.swizzled_offset(64, r, 8 * c), 64 * r + 8 * L.swizzled_position(r, c))

    def test_plain_rows_of_128_or_256_bytes_conflict_8_ways(self):
        for d in (64, 128):
            for r0, chunk in itertools.product(range(0, 56), range(d // 8)):
                addresses = L.phase_addresses(lambda r, col: L.plain_offset(d, r, col), range(r0, r0 + 8), chunk)
                self.assertEqual(len({L.bank_group(a) for a in addresses}), 1)
                self.assertEqual(L.conflict_degree(addresses, 16), 8)

    def test_swizzled_rows_hit_8_bank_groups(self):
        # Any 8 consecutive rows of any logical chunk, every D the stage stores (padded ones included).
        for d in (32, 64, 96, 128, 256):
            for r0, chunk in itertools.product(range(0, 57), range(d // 8)):
                addresses = L.phase_addresses(lambda r, col: L.swizzled_offset(64, r, col), range(r0, r0 + 8), chunk)
                self.assertEqual(len({L.bank_group(a) for a in addresses}), 8, f"D {d} rows {r0}.. chunk {chunk}")
                self.assertEqual(L.conflict_degree(addresses, 16), 1)

    def test_the_kernels_ldmatrix_phases(self):
        # Every phase of every ldmatrix the kernel issues, on a 64-row tile at D = 64 and 128:
        # conflict-free when swizzled, 8-way on the plain row-major tile.
        for d in (64, 128):
            for address, rb, kb in itertools.product((L.q_address, L.k_address, L.v_address), range(4), range(d // 16)):
                for i in range(4):
                    cells = [address(8 * i + j) for j in range(8)]
                    rows = [16 * rb + r for r, _ in cells]
                    col = 16 * kb + cells[0][1]
                    swz = [2 * L.swizzled_offset(64, r, col) for r in rows]
                    plain = [2 * L.plain_offset(d, r, col) for r in rows]
                    self.assertEqual(L.conflict_degree(swz, 16), 1)
                    self.assertEqual(L.conflict_degree(plain, 16), 8)

    def test_32_bit_fragment_gathers_from_a_plain_tile(self):
        # Without ldmatrix (the plain rung): each lane loads a[0] as one 32-bit word of a row-major
        # tile with 128-byte rows. Rows g = 0..7 at columns 2t: 4 banks, 8 words each: 8-way.
        addresses = [2 * L.plain_offset(64, *L.a_element(lane, 0, 0)) for lane in L.LANES]
        self.assertEqual(L.conflict_degree(addresses, 4), 8)

    def test_16_bit_gathers_of_v_from_a_plain_tile(self):
        # The plain rung's B register of V pairs V[2t][8n+g] and V[2t+1][8n+g] (two rows, one column):
        # two 16-bit loads. Each reads 4 rows (2t) × 8 columns: with 128- or 256-byte rows, 4 words
        # in each of the same 4 banks: 4-way.
        for d in (64, 128):
            for half in range(2):
                addresses = [2 * L.plain_offset(d, *L.b_element(lane, 0, half)) for lane in L.LANES]
                self.assertEqual(L.conflict_degree(addresses, 2), 4)

    def test_conflict_degree_itself(self):
        self.assertEqual(L.conflict_degree([0, 4, 8, 124], 4), 1)  # 4 different banks
        self.assertEqual(L.conflict_degree([0, 128], 4), 2)        # bank 0 twice, two words
        self.assertEqual(L.conflict_degree([0, 0], 4), 1)          # the same word: a broadcast
        self.assertEqual(L.conflict_degree([0, 16, 32, 48, 64, 80, 96, 112], 16), 1)
        self.assertEqual(L.conflict_degree([0, 2], 2), 1)                # two halves of one word
        self.assertEqual(L.conflict_degree([2, 130], 2), 2)


class Drawing(unittest.TestCase):
    @unittest.skipUnless(HAVE_MPL, f"matplotlib is not installed for {sys.executable} (try /usr/bin/python3)")
    def test_draws_the_four_figures(self):
        with tempfile.TemporaryDirectory() as tmp:
            import contextlib
            import io

            with contextlib.redirect_stdout(io.StringIO()):
                self.assertEqual(L.main(["--out", tmp]), 0)
            names = sorted(p.name for p in Path(tmp).glob("*.png"))
            self.assertEqual(names, ["07_c_to_a.png", "07_ldmatrix.png", "07_mma_fragments.png", "07_swizzle.png"])
            for name in names:
                self.assertEqual((Path(tmp) / name).read_bytes()[:8], b"\x89PNG\r\n\x1a\n")


if __name__ == "__main__":
    unittest.main()
