#!/usr/bin/env python3
"""Tests of plot_results.py (standard-library unittest; the tool itself needs matplotlib).

    python3 docs/plots/test_plot_results.py            # or: ctest -R plot_results

The results files here are synthetic but have exactly the shape that common/src/results.cpp
writes (nulls where a row did not run, every key present), so the test needs no stage executable.
Set FA_RESULTS_JSON=path/to/real.json to also plot a real file written by a stage.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import os
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path
from unittest import mock

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


def results_file(stage, rows, device="Synthetic CPU", command="step0x --json out.json", schema=1):
    return {
        "schema": f"flash-course-results/{schema}", "stage": stage, "command": command,
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


def tour_like_files():
    """What the tour writes on a GPU machine, small: stage 02 on the CPU (measuring 01 beside it,
    01's longest row skipped), and stage 03 on the GPU, whose file also measures 02 online on the
    host CPU (those rows name the CPU as their device) with its two longest rows skipped."""
    cpu, gpu = "Synthetic CPU", "NVIDIA H100 80GB HBM3"
    s02 = []
    for n in (256, 512, 1024, 2048, 4096):
        s02.append(row("02", "online", n, extra=18000 + 8 * n, heads=4))
        s02.append(row("01", "eigen", n, extra=8 * n * n * 4, heads=4) if n <= 2048 else
                   row("01", "eigen", n, heads=4, status="skipped", note="longer than this variant's sweep limit"))
    s03 = []
    for n in (256, 512, 1024, 2048, 4096):
        s03.append(row("03", "naive", n, heads=8, extra=8 * n * n * 4, device=gpu))
        s03.append(row("02", "online", n, heads=8, extra=18000 + 8 * n, device=cpu) if n <= 1024 else
                   row("02", "online", n, heads=8, status="skipped", device=cpu, note="longer than this variant's sweep limit"))
    return (results_file("02", s02, device=cpu, command="step02 --json step02.json"),
            results_file("03", s03, device=gpu, command="step03 --json step03.json"))


def paper_shapes_file(stage, variants, dim=64, heads=32, causal=False, device="NVIDIA H100 80GB HBM3",
                      seqs=(1024, 2048, 4096, 8192, 16384), **kw):
    """A fixed-token sweep as stage 06's --paper-shapes runs it: B·N = 16k tokens, B = 16k / N."""
    rows = []
    for n in seqs:
        for v, speed in variants:
            rows.append(row(stage, v, n, batch=16384 // n, heads=heads, dim=dim, causal=causal,
                            extra=0 if v != "naive" else 2 * heads * (16384 // n) * n * n * 4,
                            ms=4.0 * (16384 // n) * heads * n * n * dim / speed, device=device, **kw))
    return results_file(stage, rows, device=device, command=f"step{stage} --paper-shapes --json x.json")


def compare_file(stage_variants, anchor_variants, *, dim=64, heads=32, causal=False, dtype="bfloat16",
                 seqs=(1024, 4096, 16384), anchor_seqs=None, pss="fwd", device="NVIDIA H100 80GB HBM3"):
    """A file as tools/compare_pytorch.py --stage-exe writes it: file stage "anchor", PyTorch's
    backends as rows of stage "anchor" (variants sdpa_*), the stage's rows merged in unchanged,
    at the FlashAttention-paper shapes (B·N = 16k tokens). Speeds in FLOP/s."""
    rows = []
    for n in seqs:
        for (st, v), speed in stage_variants.items():
            r = row(st, v, n, batch=16384 // n, heads=heads, dim=dim, causal=causal, dtype=dtype, pss=pss,
                    extra=4 * heads * 16384, ms=4.0 * (16384 // n) * heads * n * n * dim / speed * 1e3, device=device)
            r["vs_pytorch"] = {"backend": "sdpa_flash", "max_abs": 1e-3, "ok": True}
            rows.append(r)
    for n in (anchor_seqs or seqs):
        for v, speed in anchor_variants.items():
            rows.append(row("anchor", v, n, batch=16384 // n, heads=heads, dim=dim, causal=causal, dtype=dtype,
                            pss=pss, extra=2 << 20, ms=4.0 * (16384 // n) * heads * n * n * dim / speed * 1e3,
                            device=device))
    doc = results_file("anchor", rows, device=device, command="tools/compare_pytorch.py --json c.json", schema=2)
    return doc


def anchor_lines(ax):
    """{label: [(x, y), ...]} of the anchor-row lines of a panel (gid anchor-row)."""
    return {line.get_label(): list(zip(map(float, line.get_xdata()), map(float, line.get_ydata())))
            for line in ax.get_lines() if line.get_gid() == "anchor-row"}


def load_tool():
    spec = importlib.util.spec_from_file_location("plot_results_under_test", TOOL)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def run_in_process(*args):
    """Run the tool's main() here and keep every figure it saves: (exit code, stdout, stderr,
    {file name: matplotlib Figure}). The figures are inspected as objects, not as pixels."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    mod = load_tool()
    figures = {}
    original = Figure.savefig

    def record(fig, fname, *a, **kw):
        figures[Path(fname).name] = fig
        return original(fig, fname, *a, **kw)

    out, err = io.StringIO(), io.StringIO()
    with mock.patch.object(Figure, "savefig", record), contextlib.redirect_stdout(out), \
            contextlib.redirect_stderr(err):
        rc = mod.main([str(a) for a in args])
    return rc, out.getvalue(), err.getvalue(), figures


def legend_texts(fig):
    """Every legend entry of a figure (panel legends and the figure's own)."""
    legends = [ax.get_legend() for ax in fig.axes if ax.get_legend()] + list(fig.legends)
    return [t.get_text() for lg in legends for t in lg.get_texts()]


def series(ax):
    """{label: [(x, y), ...]} of the data lines of a panel: labelled lines in data coordinates with
    at least one point (not the guides, not the edge markers, not the anchors)."""
    out = {}
    for line in ax.get_lines():
        label = line.get_label()
        if label.startswith("_") or label.startswith("∝") or len(line.get_xdata()) == 0:
            continue
        if line.get_transform() != ax.transData:
            continue
        out[label] = list(zip(map(float, line.get_xdata()), map(float, line.get_ydata())))
    return out


def panel(fig, title_part):
    axes = [ax for ax in fig.axes if title_part in ax.get_title()]
    assert len(axes) == 1, [ax.get_title() for ax in fig.axes]
    return axes[0]


def cpu_memory_lines(figs):
    """The extra-memory lines of the memory figure that shows stage 02 (tour_like_files)."""
    found = [series(panel(fig, "extra memory")) for name, fig in sorted(figs.items())
             if name.endswith("_memory.png")]
    found = [lines for lines in found if any(k.startswith("02 online") for k in lines)]
    assert len(found) == 1, found
    return found[0]


def figure_text(fig):
    """The suptitle, every panel title and every axis label of a figure."""
    parts = [fig._suptitle.get_text() if fig._suptitle else ""]
    for ax in fig.axes:
        parts += [ax.get_title(), ax.get_xlabel(), ax.get_ylabel()]
    return "\n".join(parts)


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

    def assert_pngs(self, proc, out, prefix, first=None):
        """The four PNGs of PREFIX printed and written (the only output, or from line `first`)."""
        self.assertEqual(proc.returncode, 0, proc.stderr)
        printed = [Path(p) for p in proc.stdout.split()]
        if first is not None:
            printed = printed[first:first + 4]
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
        proc = run_tool(results, "--out", out, "--seq", 1024)
        # Two devices: one set of four figures each, the device in the file name.
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertEqual(len(proc.stdout.split()), 8, proc.stdout)
        self.assert_pngs(proc, out, "results_synthetic", first=0)
        self.assert_pngs(proc, out, "results_h100-80gb-hbm3", first=4)

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

    # -- what the figures say: each test failed on the tool before its fix -------------------------

    @needs_mpl
    def test_skipped_rows_do_not_move_lines(self):
        # The tour's files: stage 02 online must be one line per shape (B·H = 4 from its own run,
        # B·H = 8 from stage 03's comparison), connected, whatever was skipped beside it.
        f02, f03 = tour_like_files()
        a, b = self.write("step02.json", f02), self.write("step03.json", f03)
        rc, out, err, figs = run_in_process(a, b, "--out", self.dir / "o")
        self.assertEqual(rc, 0, err)
        lines = cpu_memory_lines(figs)
        online = {k: v for k, v in lines.items() if k.startswith("02 online")}
        self.assertEqual(sorted(online), ["02 online B·H=4", "02 online B·H=8"], lines.keys())
        self.assertEqual([x for x, _ in online["02 online B·H=4"]], [256, 512, 1024, 2048, 4096])
        self.assertEqual([x for x, _ in online["02 online B·H=8"]], [256, 512, 1024])
        self.assertEqual([x for x, _ in lines["01 eigen B·H=4"]], [256, 512, 1024, 2048])
        # The same files with the skipped rows deleted: the very same lines.
        for doc in (f02, f03):
            doc["results"] = [r for r in doc["results"] if r["status"] != "skipped"]
        a2, b2 = self.write("step02b.json", f02), self.write("step03b.json", f03)
        rc, _, err, figs2 = run_in_process(a2, b2, "--out", self.dir / "o2")
        self.assertEqual(rc, 0, err)
        self.assertEqual(cpu_memory_lines(figs2), lines)

    @needs_mpl
    def test_one_device_per_figure(self):
        f02, f03 = tour_like_files()
        results = self.dir / "results"
        results.mkdir()
        (results / "step02.json").write_text(json.dumps(f02))
        (results / "step03.json").write_text(json.dumps(f03))
        rc, out, err, figs = run_in_process(results, "--out", self.dir / "o")
        self.assertEqual(rc, 0, err)
        gpu = [f"results_h100-80gb-hbm3_{k}.png" for k in ("memory", "time", "tflops", "progression")]
        cpu = [f"results_synthetic_{k}.png" for k in ("memory", "time", "tflops", "progression")]
        self.assertEqual(sorted(figs), sorted(gpu + cpu))
        for name in gpu:
            text = "\n".join(legend_texts(figs[name])) + figure_text(figs[name])
            self.assertIn("H100", figs[name]._suptitle.get_text().split("—")[-1], name)
            self.assertNotIn("Synthetic", text, name)      # no CPU device named on a GPU figure
            self.assertNotIn("02 online", text, name)      # and no CPU series on it
            ticks = [t.get_text() for ax in figs[name].axes for t in ax.get_xticklabels()]
            self.assertFalse(any("online" in t for t in ticks), (name, ticks))
        for name in cpu:
            text = "\n".join(legend_texts(figs[name]))
            self.assertNotIn("03 naive", text, name)
            self.assertNotIn("H100", figs[name]._suptitle.get_text().split("—")[-1], name)
        # The GPU memory figure: in each panel's legend exactly its one line (03 naive) and the guides.
        self.assertEqual(legend_texts(figs[gpu[0]]), ["03 naive", "∝ N (guide)", "∝ N² (guide)"] * 2)

    @needs_mpl
    def test_device_option(self):
        f02, f03 = tour_like_files()
        a, b = self.write("step02.json", f02), self.write("step03.json", f03)
        out = self.dir / "o"
        proc = run_tool(a, b, "--out", out, "--device", "h100", "--prefix", "gpu")
        self.assert_pngs(proc, out, "gpu")
        self.assertIn("step03.json: 5 rows not drawn, their device is not --device 'h100'", proc.stderr)
        self.assertIn("step02.json", proc.stderr)  # nothing of it drawn: said so
        self.assert_bad(run_tool(a, "--out", out, "--device", "TPU"), "--device", "no row")

    @needs_mpl
    def test_only_ok_rows_are_data(self):
        gpu = "NVIDIA H100 80GB HBM3"
        # File a: the N = 2048 case skipped; file b (a later run of the same stage): measured.
        a_rows = [row("03", "naive", n, heads=8, extra=n * n, device=gpu) for n in (512, 1024)]
        a_rows.append(row("03", "naive", 2048, heads=8, status="skipped", device=gpu))
        b_rows = [row("03", "naive", 2048, heads=8, extra=2048 * 2048, device=gpu)]
        # An oom row that carries numbers anyway, and a failed one: neither is a point.
        oom = row("03", "naive", 4096, heads=8, status="oom", device=gpu)
        oom["peak_bytes"], oom["extra_bytes"] = 7e10, 7e10
        failed = row("03", "naive", 8192, heads=8, status="failed", device=gpu, note="launch failed")
        failed["median_ms"], failed["extra_bytes"] = 5.0, 1e6
        a = self.write("a.json", results_file("03", a_rows + [oom, failed], device=gpu))
        b = self.write("b.json", results_file("03", b_rows, device=gpu))
        rc, out, err, figs = run_in_process(a, b, "--out", self.dir / "o")
        self.assertEqual(rc, 0, err)
        for name, title in (("results_memory.png", "extra memory"), ("results_memory.png", "peak memory"),
                            ("results_time.png", "median time")):
            lines = series(panel(figs[name], title))
            self.assertEqual(list(lines), ["03 naive"], (name, lines))
            self.assertEqual([x for x, _ in lines["03 naive"]], [512, 1024, 2048], (name, title))
        labels = legend_texts(figs["results_memory.png"])
        self.assertTrue(any("OOM" in t and "marker" in t for t in labels), labels)

    @needs_mpl
    def test_fixed_token_sweep_is_labelled(self):
        doc = paper_shapes_file("04", [("flash", 2e10)])
        doc["results"][-1]["status"] = "skipped"  # a skipped row changes nothing
        path = self.write("step04_d64.json", doc)
        rc, out, err, figs = run_in_process(path, "--out", self.dir / "o")
        self.assertEqual(rc, 0, err)
        for name in ("step04_d64_memory.png", "step04_d64_time.png", "step04_d64_tflops.png"):
            fig = figs[name]
            for ax in fig.axes:
                if ax.get_xscale() == "log":  # the panels against N
                    self.assertIn("B·N = 16k tokens", ax.get_xlabel(), name)
        # Two plain sweeps (B = 1, H = 8 and H = 16): no token family in sight.
        gpu = "NVIDIA H100 80GB HBM3"
        p8 = self.write("s3.json", results_file("03", [row("03", "naive", n, heads=8, extra=n * n, device=gpu)
                                                      for n in (512, 1024, 2048)], device=gpu))
        p16 = self.write("s4.json", results_file("04", [row("03", "naive", n, heads=16, extra=n * n, device=gpu)
                                                       for n in (256, 512, 1024)], device=gpu))
        rc, out, err, figs = run_in_process(p8, p16, "--out", self.dir / "o2")
        self.assertEqual(rc, 0, err)
        lines = series(panel(figs["results_memory.png"], "extra memory"))
        self.assertEqual(sorted(lines), ["03 naive B·H=16", "03 naive B·H=8"])
        self.assertNotIn("tokens", figure_text(figs["results_memory.png"]))

    @needs_mpl
    def test_every_named_file_accounted_for(self):
        # Stage 06's deterministic backward, schema 1: "flash" with values.deterministic, at shapes
        # that the plain run also measured. Its flash rows are a line of their own; its
        # materialized rows repeat the plain run's, and the tool says so, naming the file.
        plain = paper_shapes_file("06", [("flash", 3e10), ("materialized", 1.5e10)], causal=True,
                                  pss="bwd", seqs=(1024, 2048, 4096))
        det = paper_shapes_file("06", [("flash", 2e10), ("materialized", 1.5e10)], causal=True,
                                pss="bwd", seqs=(1024, 4096))
        for r in det["results"]:
            r["values"] = {"deterministic": 1}
        nothing = results_file("06", [row("06", "flash", 1024, status="skipped", note="no CUDA device")])
        a = self.write("step06_causal.json", plain)
        b = self.write("step06_causal_deterministic.json", det)
        c = self.write("step06_nogpu.json", nothing)
        rc, out, err, figs = run_in_process(a, b, c, "--out", self.dir / "o")
        self.assertEqual(rc, 0, err)
        lines = series(panel(figs["results_time.png"], "median time"))
        self.assertEqual(sorted(lines), ["06 flash", "06 flash-deterministic", "06 materialized"])
        want = [(r["seq_k"], r["median_ms"]) for r in det["results"] if r["variant"] == "flash"]
        self.assertEqual(lines["06 flash-deterministic"], want)
        notes = [l for l in err.splitlines() if "note:" in l]
        self.assertTrue(any("step06_causal_deterministic.json" in l and "06 materialized" in l
                            and "step06_causal.json" in l for l in notes), err)
        self.assertTrue(any("step06_nogpu.json" in l for l in notes), err)

    @needs_mpl
    def test_schema_2_with_schema_1(self):
        gpu = "NVIDIA H100 80GB HBM3"
        rows = [row("06", "flash-deterministic", n, pss="bwd", extra=n * 64, device=gpu) for n in (512, 1024)]
        for r in rows:
            r.pop("values")
            r.update(heads_kv=r["heads"], driver_bytes=None, error_vs_plain=None)
        a = self.write("v2.json", results_file("06", rows, device=gpu, schema=2))
        b = self.write("v1.json", results_file("06", [row("06", "flash", n, pss="bwd", extra=n * 64, device=gpu)
                                                     for n in (512, 1024)], device=gpu))
        rc, out, err, figs = run_in_process(a, b, "--out", self.dir / "o")
        self.assertEqual(rc, 0, err)
        self.assertEqual(sorted(series(panel(figs["results_time.png"], "median time"))),
                         ["06 flash", "06 flash-deterministic"])

    @needs_mpl
    def test_ladder_progression(self):
        # Stage 04 with a ladder: rungs v1_, v2_, v10_ (numeric order, written out of order), then
        # its own flash; stage 03's two variants measured beside them. One common shape wins.
        gpu = "NVIDIA H100 80GB HBM3"
        speeds = {("03", "naive"): 3e9, ("03", "cublas"): 1.2e10, ("04", "v2_shared_tiles"): 1.5e10,
                  ("04", "v10_vectorized"): 2.5e10, ("04", "v1_algorithm1"): 6e9, ("04", "flash"): 3e10}
        rows = [row(st, v, n, heads=8, extra=0 if st == "04" else n * n * 32, ms=4.0 * 8 * n * n * 64 / sp,
                    device=gpu) for n in (1024, 2048) for (st, v), sp in speeds.items()]
        rows.append(row("04", "v3_unfinished", 1024, heads=8, status="failed", device=gpu))
        path = self.write("step04.json", results_file("04", rows, device=gpu))
        rc, out, err, figs = run_in_process(path, "--out", self.dir / "o", "--no-anchors")
        self.assertEqual(rc, 0, err)
        fig = figs["step04_progression.png"]
        ax = panel(fig, "median time")
        ticks = [t.get_text() for t in ax.get_xticklabels()]
        self.assertEqual(ticks, ["03\ncublas", "04\nv1_algorithm1", "04\nv2_shared_tiles",
                                 "04\nv10_vectorized", "04\nflash"])
        self.assertIn("N=2k", fig._suptitle.get_text())  # the common shape: the longest N
        texts = [t.get_text() for t in ax.texts]
        self.assertEqual(len(texts), 5, texts)
        order = ["cublas", "v1_algorithm1", "v2_shared_tiles", "v10_vectorized", "flash"]
        ms = {v: 4.0 * 8 * 2048 * 2048 * 64 / speeds[(st, v)] for (st, v) in speeds}
        for i, (text, v) in enumerate(zip(texts, order)):
            self.assertIn("TFLOP/s", text)
            if i == 0:
                self.assertNotIn("×", text)
                continue
            before = order[i - 1]
            self.assertIn(f"×{ms[before] / ms[v]:.3g} vs {before}", text)
        self.assertIn("×2.5 vs v1_algorithm1", texts[2])  # 15 against 6 TFLOP/s at the same work
        tf_ax = panel(fig, "TFLOP/s")
        self.assertEqual([t.get_text() for t in tf_ax.get_xticklabels()], ticks)
        # A bar's length is its value: time and TFLOP/s bars on linear axes from 0, never on a log
        # axis; memory (decades apart) as points on a log axis.
        for axis in (ax, tf_ax):
            self.assertEqual(axis.get_yscale(), "linear")
            self.assertEqual(axis.get_ylim()[0], 0)
            bars = [p for p in axis.patches if p.get_gid() == "bar"]
            self.assertEqual(len(bars), 5)
            self.assertTrue(all(p.get_y() == 0 for p in bars))
            self.assertGreater(axis.get_ylim()[1], max(p.get_height() for p in bars))
        mem_ax = panel(fig, "extra memory")
        self.assertEqual(mem_ax.get_yscale(), "log")
        self.assertEqual(list(mem_ax.patches), [])
        self.assertEqual(len([line for line in mem_ax.get_lines() if line.get_gid() == "point"]), 1)  # 03 cublas
        for axis in fig.axes:
            if axis.get_yscale() == "log":
                self.assertEqual([p for p in axis.patches if p.get_gid() == "bar"], [])

    @needs_mpl
    def test_anchor_rows_are_references(self):
        # A comparison file (stage 07's rows beside PyTorch's backends), and an anchors-only file
        # with fp16 rows that no stage matches. The anchors are dashed lines across N in the
        # TFLOP/s panel of their pass, dtype, D and causal; never a stage line, bar or rung.
        stage = {("07", "v1_mma"): 1.0e14, ("07", "flash"): 3.2e14, ("05", "skip"): 4e13}
        backends = {"sdpa_flash": 3.0e14, "sdpa_cudnn": 4.0e14, "sdpa_math": 1.0e14}
        comp = compare_file(stage, backends)
        fp16 = compare_file({}, {"sdpa_flash": 2.9e14}, dtype="float16")
        a, b = self.write("compare_07.json", comp), self.write("anchors_fp16.json", fp16)
        rc, out, err, figs = run_in_process(a, b, "--out", self.dir / "o", "--prefix", "c")
        self.assertEqual(rc, 0, err)
        tf = figs["c_tflops.png"]
        ax = panel(tf, "fwd, bf16, D=64, not causal")
        lines = anchor_lines(ax)
        self.assertEqual(sorted(lines), ["PyTorch FA2 (sdpa_flash)", "PyTorch math (sdpa_math)", "cuDNN (sdpa_cudnn)"])
        for label, speed in (("PyTorch FA2 (sdpa_flash)", 3.0e14), ("cuDNN (sdpa_cudnn)", 4.0e14)):
            self.assertEqual([x for x, _ in lines[label]], [1024, 4096, 16384])  # across N, not one value
            for _, y in lines[label]:
                self.assertAlmostEqual(y, speed / 1e12)
        for line in ax.get_lines():
            if line.get_gid() == "anchor-row":
                self.assertEqual(line.get_linestyle(), "--")
                self.assertNotEqual(line.get_marker(), "None")
        # The stage lines are as before; the legend names both; anchors.json's attention lines
        # give way to the measured ones (its bf16 matmul ceiling stays).
        self.assertEqual(sorted(series(ax)), sorted(["05 skip", "07 flash", "07 v1_mma"] + list(lines)))
        self.assertIn("PyTorch FA2 (sdpa_flash)", legend_texts(tf))
        texts = [t.get_text() for t in ax.texts]
        self.assertFalse(any("H100 SDPA" in t for t in texts), texts)
        self.assertTrue(any("bf16 matmul" in t for t in texts), texts)
        lo, hi = ax.get_ylim()
        self.assertLess(lo, 40)
        self.assertGreater(hi, 400)  # the fastest anchor is on the panel
        self.assertEqual(len(tf.axes), 1)  # no panel for the fp16 anchors alone
        self.assertIn("PyTorch's SDPA backends", tf._suptitle.get_text())
        # Memory and time: the stages only.
        for name, title in (("c_memory.png", "extra memory"), ("c_time.png", "median time")):
            fig = figs[name]
            self.assertEqual(sorted(series(panel(fig, title))), ["05 skip", "07 flash", "07 v1_mma"], name)
            self.assertFalse(any("anchor" in t or "sdpa" in t for t in legend_texts(fig)), name)
        # The progression: stage 05, then 07's ladder and its flash; no "anchor" bar. PyTorch's
        # rows at that very shape are its TFLOP/s panel's horizontal lines.
        prog = figs["c_progression.png"]
        ticks = [t.get_text() for t in panel(prog, "median time").get_xticklabels()]
        self.assertEqual(ticks, ["05\nskip\nbfloat16", "07\nv1_mma\nbfloat16", "07\nflash\nbfloat16"])
        self.assertIn("N=16k", prog._suptitle.get_text())
        tf_ax = panel(prog, "TFLOP/s")
        labels = [t.get_text() for t in tf_ax.get_legend().get_texts()]
        self.assertIn("PyTorch FA2 (sdpa_flash) bf16: 300", labels)
        self.assertIn("cuDNN (sdpa_cudnn) bf16: 400", labels)
        self.assertFalse(any("H100 SDPA" in t for t in labels), labels)
        # The anchors no figure shows are accounted for.
        self.assertIn("anchors_fp16.json: 3 anchor rows not drawn", err)
        self.assertNotIn("compare_07.json: ", err)

    @needs_mpl
    def test_anchor_rows_of_another_shape_say_it(self):
        # Stage rows at B·H = 8, anchors at the paper shapes: the anchor label says its shape; a
        # panel without anchor rows keeps anchors.json's lines.
        gpu = "NVIDIA H100 80GB HBM3"
        st = [row("07", "flash", n, heads=8, dtype="bfloat16", extra=0, ms=4.0 * 8 * n * n * 64 / 2.5e14 * 1e3, device=gpu)
              for n in (1024, 2048, 4096)]
        st += [row("07", "flash", n, heads=8, dim=128, dtype="bfloat16", extra=0,
                   ms=4.0 * 8 * n * n * 128 / 2.5e14 * 1e3, device=gpu) for n in (1024, 2048, 4096)]
        a = self.write("s07.json", results_file("07", st, device=gpu, schema=2))
        b = self.write("anchors.json", compare_file({}, {"sdpa_flash": 3.0e14}, seqs=(512, 1024, 4096, 16384)))
        rc, out, err, figs = run_in_process(a, b, "--out", self.dir / "o", "--prefix", "x")
        self.assertEqual(rc, 0, err)
        tf = figs["x_tflops.png"]
        lines = anchor_lines(panel(tf, "D=64"))
        self.assertEqual(list(lines), ["PyTorch FA2 (sdpa_flash) [B·N=16k tokens, H=32]"])
        self.assertEqual([x for x, _ in next(iter(lines.values()))], [512, 1024, 4096, 16384])
        lo, hi = panel(tf, "D=64").get_xlim()
        self.assertLess(lo, 512)
        self.assertGreater(hi, 16384)  # the x axis holds the anchors' N too
        d128 = panel(tf, "D=128")
        self.assertEqual(anchor_lines(d128), {})
        self.assertTrue(any("H100 SDPA flash" in t.get_text() for t in d128.texts))

    @needs_mpl
    def test_anchor_rows_alone(self):
        # The anchors file of tools/compare_pytorch.py alone: its own TFLOP/s panels, exit 0.
        fwd = compare_file({}, {"sdpa_flash": 3.0e14, "sdpa_cudnn": 4.0e14})
        bwd = compare_file({}, {"sdpa_flash": 1.5e14}, pss="bwd")
        fwd["results"] += bwd["results"]
        path = self.write("anchors_sdpa.json", fwd)
        rc, out, err, figs = run_in_process(path, "--out", self.dir / "o")
        self.assertEqual(rc, 0, err)
        tf = figs["anchors_sdpa_tflops.png"]
        titles = sorted(ax.get_title() for ax in tf.axes if ax.axison)
        self.assertEqual(titles, ["bwd, bf16, D=64, not causal", "fwd, bf16, D=64, not causal"])
        self.assertEqual(sorted(anchor_lines(panel(tf, "fwd,"))), ["PyTorch FA2 (sdpa_flash)", "cuDNN (sdpa_cudnn)"])
        self.assertIn("B·N = 16k tokens", panel(tf, "fwd,").get_xlabel())
        self.assertEqual(series(panel(figs["anchors_sdpa_memory.png"], "extra memory")), {})
        self.assertEqual([p for ax in figs["anchors_sdpa_progression.png"].axes for p in ax.patches], [])  # no bars
        self.assertNotIn("anchor rows not drawn", err)

    def test_anchor_rows_listed(self):
        proc = run_tool(self.write("a.json", compare_file({}, {"sdpa_flash": 3e14})), "--list")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertIn("| anchor | NVIDIA H100", proc.stdout)

    @needs_mpl
    def test_make_figures_script(self):
        # The script that regenerates docs/figures makes every committed figure and no other
        # (written to a scratch folder here; docs/figures is not touched).
        committed = sorted(p.name for p in (HERE.parent / "figures").glob("*.png"))
        out = self.dir / "figures"
        proc = subprocess.run(["sh", str(HERE / "make_figures.sh"), str(out)], capture_output=True,
                              text=True, timeout=600, env={**os.environ, "PYTHON": sys.executable})
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        self.assertEqual(sorted(p.name for p in out.glob("*.png")), committed)

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
