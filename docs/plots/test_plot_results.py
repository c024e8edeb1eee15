#!/usr/bin/env python3
"""Tests of plot_results.py (standard-library unittest; the tool itself needs matplotlib).

    python3 docs/plots/test_plot_results.py            # or: ctest -R plot_results

The results files here are synthetic but have exactly the shape that common/src/results.cpp
writes (nulls where a row did not run, every key present), so the test needs no stage executable.
Set FA_RESULTS_JSON=path/to/real.json to also plot a real file written by a stage.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
TOOL = HERE / "plot_results.py"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
# The figure tests need matplotlib in this Python (the tool runs as sys.executable); the bad-input
# tests do not: the tool checks its input before it imports matplotlib.
HAVE_MPL = importlib.util.find_spec("matplotlib") is not None
needs_mpl = unittest.skipUnless(HAVE_MPL, f"matplotlib is not installed for {sys.executable} (try /usr/bin/python3)")


def row(stage, variant, n, *, status="ok", ms=None, extra=None, dim=64, causal=False, batch=1,
        heads=4, seq_q=None, dtype="float32", pss="fwd", device="Synthetic CPU", note=""):
    """One row as results.cpp writes it. Time and memory follow the stage's complexity."""
    nq = n if seq_q is None else seq_q
    flops = 4.0 * batch * heads * nq * n * dim * (0.5 if causal else 1.0) * (2.5 if pss == "bwd" else 1.0)
    ran = status == "ok"
    ms = ms if ms is not None else flops / 5e7  # about 50 GFLOP/s
    io = 4 * (2 * batch * heads * nq * dim + 2 * batch * heads * n * dim + batch * heads * nq)
    return {
        "stage": stage, "variant": variant, "pass": pss, "device": device, "cuda_runtime": "",
        "cuda_driver": "", "git_commit": "abc1234", "batch": batch, "heads": heads, "seq_q": nq,
        "seq_k": n, "dim": dim, "dtype": dtype, "causal": causal, "scale": dim ** -0.5,
        "status": status, "note": note,
        "median_ms": ms if ran else None, "min_ms": ms * 0.98 if ran else None,
        "max_ms": ms * 1.05 if ran else None, "reps": 5 if ran else 0,
        "tflops": flops / (ms * 1e-3) / 1e12 if ran else None,
        "gbps": io / (ms * 1e-3) / 1e9 if ran else None, "flops": flops,
        "peak_bytes": (extra + io) if ran else None, "extra_bytes": extra if ran else None,
        "reference": "float64 loop" if ran else "", "verified": ran,
        "verification_ok": True if ran else None, "verification": "all rows" if ran else "",
        "max_abs_error": 3e-7 if ran else None, "max_rel_error": 2e-6 if ran else None,
        "rel_error": 1e-7 if ran else None, "split_ms": {}, "values": {},
    }


def results_file(stage, rows, device="Synthetic CPU", command="step0x --json out.json"):
    return {
        "schema": "flash-course-results/1", "stage": stage, "command": command,
        "date": "2025-01-02T03:04:05Z", "git_commit": "abc1234",
        "device": {"name": device, "cuda_runtime": "", "cuda_driver": ""}, "results": rows,
    }


def cpu_files():
    """Stage 01 (S and P materialized: 2·N²·4 bytes per head) and stage 02 (online softmax,
    Br·Bc scratch), each measuring the previous stage beside itself, with one oom and one skip."""
    bh = 4
    s01 = []
    for n in (128, 256, 512, 1024, 2048):
        s01.append(row("01", "eigen", n, extra=2 * n * n * 4 * bh))
    s01.append(row("01", "eigen", 4096, status="oom", note="allocation of 512 MiB would exceed the 256 MiB limit"))
    s02 = []
    for n in (128, 256, 512, 1024, 2048, 4096):
        s02.append(row("02", "online", n, extra=64 * 64 * 4 + 2 * 64 * 4, ms=4.0 * bh * n * n * 64 / 4e7))
        if n <= 2048:
            s02.append(row("01", "eigen", n, extra=2 * n * n * 4 * bh, ms=4.0 * bh * n * n * 64 / 6e7))
        else:
            s02.append(row("01", "eigen", n, status="skipped", note="longer than this variant's sweep limit"))
    return results_file("01", s01), results_file("02", s02, command="step02 --sweep 128,256 --json 02.json")


def gpu_file():
    """GPU stages: naive (N² in device memory), a fused kernel with no extra memory at all, a
    causal panel, a bf16 panel and a backward panel, so every figure path runs."""
    dev = "NVIDIA H100 80GB HBM3"
    rows = []
    for n in (1024, 2048, 4096, 8192, 16384):
        rows.append(row("03", "naive", n, batch=4, heads=8, extra=2 * 32 * n * n * 4, ms=32 * n * n * 64 * 4 / 3e9, device=dev)
                    if n <= 8192 else row("03", "naive", n, batch=4, heads=8, status="oom", device=dev))
        rows.append(row("04", "fused", n, batch=4, heads=8, extra=0, ms=32 * n * n * 64 * 4 / 2e10, device=dev))
        rows.append(row("05", "causal", n, batch=4, heads=8, causal=True, extra=0, ms=32 * n * n * 64 * 2 / 2e10, device=dev))
        rows.append(row("07", "mma", n, batch=4, heads=8, dtype="bf16", extra=0, ms=32 * n * n * 64 * 4 / 2.5e11, device=dev))
        rows.append(row("06", "backward", n, batch=4, heads=8, pss="bwd", extra=32 * n * 4, ms=32 * n * n * 64 * 10 / 1.5e10, device=dev))
    rows.append(row("04", "fused", 512, batch=4, heads=8, seq_q=1, extra=0, ms=0.01, device=dev))
    rows.append(row("04", "fused", 1024, status="failed", batch=4, heads=8, note="launch failed", device=dev))
    return results_file("04", rows, device=dev, command="step04_cuda_flash_forward --json 04.json")


def run_tool(*args):
    return subprocess.run([sys.executable, str(TOOL), *map(str, args)], capture_output=True, text=True,
                          timeout=300)


class PlotResultsTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = Path(self.tmp.name)

    def tearDown(self):
        self.tmp.cleanup()

    def write(self, name, doc):
        path = self.dir / name
        path.write_text(doc if isinstance(doc, str) else json.dumps(doc, indent=1))
        return path

    def assert_pngs(self, proc, out, prefix):
        self.assertEqual(proc.returncode, 0, proc.stderr)
        printed = [Path(p) for p in proc.stdout.split()]
        expected = [out / f"{prefix}_{n}.png" for n in ("memory", "time", "tflops", "progression")]
        self.assertEqual(printed, expected)
        for p in expected:
            self.assertTrue(p.is_file(), p)
            data = p.read_bytes()
            self.assertGreater(len(data), 5000, p)
            self.assertEqual(data[:8], PNG_MAGIC, p)

    def assert_bad(self, proc, *words):
        self.assertEqual(proc.returncode, 2, proc.stdout + proc.stderr)
        lines = proc.stderr.strip().splitlines()
        self.assertEqual(len(lines), 1, proc.stderr)
        self.assertTrue(lines[0].startswith("plot_results.py: error: "), lines[0])
        for w in words:
            self.assertIn(w, lines[0])
        self.assertEqual(proc.stdout, "")

    # -- good input ------------------------------------------------------------------------------

    @needs_mpl
    def test_cpu_stages(self):
        f01, f02 = cpu_files()
        a, b = self.write("01.json", f01), self.write("02.json", f02)
        out = self.dir / "plots"
        self.assert_pngs(run_tool(a, b, "--out", out, "--prefix", "cpu"), out, "cpu")

    @needs_mpl
    def test_one_file_default_prefix(self):
        path = self.write("stage04.json", gpu_file())
        out = self.dir / "p"
        self.assert_pngs(run_tool(path, "--out", out), out, "stage04")

    @needs_mpl
    def test_directory_of_results(self):
        results = self.dir / "results"
        results.mkdir()
        f01, f02 = cpu_files()
        for name, doc in (("01.json", f01), ("02.json", f02), ("04.json", gpu_file())):
            (results / name).write_text(json.dumps(doc))
        out = self.dir / "plots"
        self.assert_pngs(run_tool(results, "--out", out, "--seq", 1024), out, "results")

    @needs_mpl
    def test_nothing_ran(self):
        # A GPU stage on a machine without a GPU writes only skipped rows: still figures, exit 0.
        doc = results_file("03", [row("03", "naive", n, status="skipped", note="no CUDA device") for n in (512, 1024)])
        out = self.dir / "o"
        self.assert_pngs(run_tool(self.write("s.json", doc), "--out", out, "--no-anchors"), out, "s")

    def test_list(self):
        f01, f02 = cpu_files()
        proc = run_tool(self.write("01.json", f01), self.write("02.json", f02), "--list")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        lines = proc.stdout.strip().splitlines()
        self.assertEqual(len(lines), 4)  # header, rule, one line per file
        self.assertTrue(lines[0].startswith("| file | stage | device"))
        self.assertIn("`01.json` | 01 | Synthetic CPU", lines[2])
        self.assertIn("5 / 1 / 0", lines[2])  # stage 01's synthetic file: 5 ok, 1 oom

    @needs_mpl
    def test_real_results_file(self):
        real = os.environ.get("FA_RESULTS_JSON")
        if not real:
            self.skipTest("set FA_RESULTS_JSON to a results file written by a stage")
        out = self.dir / "real"
        self.assert_pngs(run_tool(real, "--out", out, "--prefix", "real"), out, "real")

    # -- bad input: exit 2, one line ---------------------------------------------------------

    def test_missing_file(self):
        self.assert_bad(run_tool(self.dir / "nope.json", "--out", self.dir / "o"), "nope.json", "no such file")

    def test_not_json(self):
        self.assert_bad(run_tool(self.write("x.json", "{not json"), "--out", self.dir / "o"), "not JSON")

    def test_wrong_schema(self):
        doc = results_file("01", [])
        doc["schema"] = "something-else/2"
        self.assert_bad(run_tool(self.write("w.json", doc), "--out", self.dir / "o"), "schema")

    def test_json_but_not_object(self):
        self.assert_bad(run_tool(self.write("l.json", "[1, 2]"), "--out", self.dir / "o"), "not a results file")

    def test_row_missing_key(self):
        bad = row("01", "eigen", 128, extra=1)
        del bad["seq_k"]
        self.assert_bad(run_tool(self.write("r.json", results_file("01", [bad])), "--out", self.dir / "o"),
                        "results[0]", "seq_k")

    def test_bad_status(self):
        bad = row("01", "eigen", 128, extra=1)
        bad["status"] = "great"
        self.assert_bad(run_tool(self.write("s.json", results_file("01", [bad])), "--out", self.dir / "o"), "status")

    def test_empty_directory(self):
        empty = self.dir / "empty"
        empty.mkdir()
        self.assert_bad(run_tool(empty, "--out", self.dir / "o"), "no *.json")

    def test_usage_errors(self):
        self.assert_bad(run_tool("--out", self.dir / "o"))                      # no input
        f01, _ = cpu_files()
        self.assert_bad(run_tool(self.write("a.json", f01)), "--out")            # no --out
        self.assert_bad(run_tool(self.write("a.json", f01), "--out", self.dir, "--bogus"), "--bogus")


if __name__ == "__main__":
    unittest.main(verbosity=2)
