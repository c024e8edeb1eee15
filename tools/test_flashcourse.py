#!/usr/bin/env python3
"""Tests of the flashcourse package and of the comparison scripts over it, without a GPU or PyTorch.

    test_flashcourse.py [--stage-exe EXE] [unittest options]

The package's pure-Python parts: sizes, the .npy writer and reader (bfloat16 sent as float32 holding
exactly the bf16 values; float16 as float16), the tolerance rule on lists and on whole arrays (with
NumPy, which compare_arrays takes as it takes torch), the results file (written with NaN as null, one
row per line; read back; its fields checked), the merge of a stage's rows with the anchors, the
guard (JSON read with limits, one-line text, the handler around a tool's main); and of
the scripts: the stage's command line, where the comparison goes, the anchors timed in several
processes, and the exit code 2 of bad usage. The NumPy tests are skipped where NumPy is missing.
(test_tolerance_agrees.py checks the rule against the C++ one.)

With --stage-exe EXE (a CPU stage, e.g. step02_cpu_online_softmax; CTest passes it where it is
built), the command line that compare_pytorch.py gives a stage is run for real on float32 inputs
written by the package's writer, and the stage's o.npy and lse.npy, read by its reader, pass the rule
against a float64 reference computed here (NumPy), with a float32 NumPy attention in PyTorch's place.
"""
import importlib.util
import io
import json
import math
import os
import struct
import subprocess
import sys
import tempfile
import unittest
from contextlib import redirect_stderr
from unittest import mock

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare_pytorch as cp  # noqa: E402
from flashcourse import anchors, cli, guard, npy, results, tolerance  # noqa: E402

try:
    import numpy as np
except ImportError:  # the NumPy tests are skipped
    np = None

STAGE_EXE = None


def bf16_round(x):
    """float32 x rounded to the nearest bfloat16 (ties to even), as a float32 value (pure Python)."""
    (bits,) = struct.unpack("<I", struct.pack("<f", x))
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return struct.unpack("<f", struct.pack("<I", bits))[0]


class Sizes(unittest.TestCase):
    def test_sizes(self):
        self.assertEqual(cli.sizes("512,1k, 4K,16k"), [512, 1024, 4096, 16384])
        for bad in ("", "x", "0", "1k,-2"):
            with self.assertRaises(cli.UsageError):
                cli.sizes(bad)

    def test_visible_pairs(self):
        self.assertEqual(anchors.visible_pairs(4, 4, False), 16)
        self.assertEqual(anchors.visible_pairs(4, 4, True), 10)
        self.assertEqual(anchors.visible_pairs(2, 4, True), 3 + 4)  # bottom-right: row 0 sees 3 keys
        self.assertEqual(anchors.visible_pairs(4, 2, True), 0 + 0 + 1 + 2)  # the first two rows see none


class Npy(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp()

    def path(self, name):
        return os.path.join(self.dir, name)

    def test_descr_per_dtype(self):
        self.assertEqual(npy.npy_descr("bfloat16"), "<f4")  # the course's reader has no bf16
        self.assertEqual(npy.npy_descr("float16"), "<f2")
        self.assertEqual(npy.npy_descr("float32"), "<f4")

    def test_header_alignment(self):
        for shape in [(1,), (2, 3), (32, 16, 16384, 128), ()]:
            h = npy.npy_header("<f4", shape)
            self.assertEqual(len(h) % 64, 0)
            self.assertTrue(h.endswith(b"\n"))

    def test_round_trip_pure_python(self):
        values = [0.0, -1.5, 3.25, 1e-3, 65504.0, -2.0 ** -20]
        npy.write_npy(self.path("a.npy"), "<f4", (1, 2, 3), struct.pack("<6f", *values))
        descr, shape, body = npy.read_npy(self.path("a.npy"))
        self.assertEqual((descr, shape), ("<f4", (1, 2, 3)))
        self.assertEqual(list(struct.unpack("<6f", body)), [struct.unpack("<f", struct.pack("<f", v))[0] for v in values])
        with self.assertRaises(ValueError):  # data that does not fill the shape
            npy.write_npy(self.path("b.npy"), "<f4", (2, 3), struct.pack("<5f", *values[:5]))

    def test_bf16_as_float32_pure_python(self):
        # The values the loader reads are the bf16 values exactly: rounding them to bf16 (what the
        # stage's --dtype bfloat16 does) changes nothing.
        values = [bf16_round(x) for x in (0.1, -1.2345, 3.0e-5, 123.456, -7.77e3, 1.0)]
        npy.write_npy(self.path("q.npy"), npy.npy_descr("bfloat16"), (1, 1, 2, 3), struct.pack("<6f", *values))
        _, _, body = npy.read_npy(self.path("q.npy"))
        back = struct.unpack("<6f", body)
        self.assertEqual(list(back), values)
        self.assertEqual([bf16_round(x) for x in back], values)
        for (bits,) in struct.iter_unpack("<I", body):
            self.assertEqual(bits & 0xFFFF, 0)

    @unittest.skipIf(np is None, "NumPy is not installed")
    def test_bf16_as_float32_numpy(self):
        rng = np.random.default_rng(1)
        x = rng.standard_normal((2, 3, 17, 8)).astype(np.float32) * 10
        bits = x.view(np.uint32).astype(np.uint64)
        bf = ((bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000).astype(np.uint32).view(np.float32)
        npy.write_npy(self.path("k.npy"), "<f4", bf.shape, bf.tobytes())
        got = np.load(self.path("k.npy"))
        self.assertEqual(got.dtype, np.float32)
        self.assertEqual(got.shape, bf.shape)
        self.assertTrue(np.array_equal(got, bf))
        self.assertFalse(np.any(got.view(np.uint32) & 0xFFFF))  # exactly bf16 values
        self.assertLessEqual(float(np.max(np.abs(bf - x) / np.abs(x))), 2.0 ** -8)  # rounded, not truncated wrong

    @unittest.skipIf(np is None, "NumPy is not installed")
    def test_float16_numpy(self):
        x = np.arange(24, dtype=np.float16).reshape(1, 2, 3, 4) / 7
        npy.write_npy(self.path("v.npy"), "<f2", x.shape, x.tobytes())
        self.assertTrue(np.array_equal(np.load(self.path("v.npy")), x))
        descr, shape, body = npy.read_npy(self.path("v.npy"))
        self.assertEqual((descr, shape), ("<f2", (1, 2, 3, 4)))
        # and the reader takes what NumPy writes (its header has room to grow)
        np.save(self.path("o.npy"), x.astype(np.float32))
        descr, shape, body = npy.read_npy(self.path("o.npy"))
        self.assertEqual((descr, shape), ("<f4", (1, 2, 3, 4)))
        self.assertTrue(np.array_equal(np.frombuffer(body, np.float32).reshape(shape), x.astype(np.float32)))


class Rule(unittest.TestCase):
    def test_tolerance(self):
        atol, rtol = tolerance.tolerance_from_plain(1e-3, 2.0, 2.0 ** -8)
        self.assertAlmostEqual(atol, 4e-3 + 4 * 2.0 ** -8 * 2.0)
        self.assertEqual(rtol, 4 * 2.0 ** -8)
        self.assertEqual(tolerance.tolerance_from_plain(0.0, 0.0, 2.0 ** -24), (0.0, 4 * 2.0 ** -24))

    @unittest.skipIf(np is None, "NumPy is not installed")
    def test_compare_arrays(self):
        ref = np.array([[1.0, -2.0], [0.5, 0.0]])
        atol, rtol = 0.01, 0.0
        r = tolerance.compare_arrays(np, ref + 0.009, ref, atol, rtol)
        self.assertEqual((r["bad"], r["first_bad"]), (0, None))
        self.assertAlmostEqual(r["max_abs"], 0.009)
        got = ref.copy()
        got[1, 0] += 0.02
        r = tolerance.compare_arrays(np, got, ref, atol, rtol)
        self.assertEqual((r["bad"], r["first_bad"]), (1, 2))
        self.assertEqual(tolerance.unravel(2, ref.shape), [1, 0])
        self.assertAlmostEqual(r["rel_frobenius"], 0.02 / math.sqrt(1 + 4 + 0.25))
        got[0, 1] = np.nan  # NaN fails, whatever the tolerance
        with np.errstate(invalid="ignore"):
            r = tolerance.compare_arrays(np, got, ref, 1e9, 1e9)
        self.assertEqual((r["bad"], r["first_bad"]), (1, 1))
        self.assertEqual(r["max_abs"], math.inf)  # as fa::compare: a non-finite mismatch is an infinite error

    @unittest.skipIf(np is None, "NumPy is not installed")
    def test_lse_rows_without_keys(self):
        with np.errstate(invalid="ignore"):  # -inf - -inf is NaN, on the way
            self.lse_rows_without_keys()

    def lse_rows_without_keys(self):
        ref = np.array([-np.inf, 2.0, -np.inf])
        r = tolerance.compare_arrays(np, np.array([-np.inf, 2.0 + 1e-7, -np.inf]), ref, 1e-6, 0.0)
        self.assertEqual(r["bad"], 0)  # -inf == -inf passes, and adds no NaN to the error
        self.assertAlmostEqual(r["max_abs"], 1e-7)
        self.assertEqual(tolerance.max_finite_abs(np, ref), 2.0)
        r = tolerance.compare_arrays(np, np.array([0.0, 2.0, -np.inf]), ref, 1e9, 1e9)
        self.assertEqual((r["bad"], r["first_bad"]), (1, 0))  # a finite value where -inf is right
        r = tolerance.compare_arrays(np, np.array([-np.inf, np.inf, -np.inf]), ref, 1e9, 1e9)
        self.assertEqual(r["bad"], 1)

    @unittest.skipIf(np is None, "NumPy is not installed")
    def test_rule_scales_with_torch_error(self):
        # With PyTorch's error e as the plain error: 3e passes, 5e (beyond the floor) fails.
        rng = np.random.default_rng(2)
        ref = rng.standard_normal(1000)
        u = 2.0 ** -8
        e = 0.05
        atol, rtol = tolerance.tolerance_from_plain(e, tolerance.max_finite_abs(np, ref), u)
        floor = 4 * u * float(np.max(np.abs(ref))) + 4 * u * float(np.max(np.abs(ref)))
        self.assertEqual(tolerance.compare_arrays(np, ref + 3 * e, ref, atol, rtol)["bad"], 0)
        self.assertEqual(tolerance.compare_arrays(np, ref + 4 * e + floor + 1e-9, ref, atol, rtol)["bad"], 1000)

    def test_comparison_backend(self):
        rows = {"sdpa_flash": {"status": "skipped"}, "sdpa_cudnn": {"status": "ok"}, "sdpa_math": {"status": "ok"}}
        self.assertEqual(cp.comparison_backend(rows), "sdpa_cudnn")
        rows["sdpa_flash"]["status"] = "ok"
        self.assertEqual(cp.comparison_backend(rows), "sdpa_flash")
        self.assertIsNone(cp.comparison_backend({"sdpa_math": {"status": "oom"}}))


class RuleOnLists(unittest.TestCase):
    """The rule as fa::compare applies it, element by element (pure Python)."""

    def test_constants(self):
        self.assertEqual(tolerance.tolerance_from_plain(1e-3, 2.0, "float16"), (4e-3 + 8 * 2.0 ** -11, 4 * 2.0 ** -11))
        self.assertEqual(tolerance.tolerance_for((2e-5, 2e-5), True), (2e-4, 2e-4))
        self.assertEqual(tolerance.tolerance_for((2e-5, 2e-5), False), (2e-5, 2e-5))

    def test_compare(self):
        r = tolerance.compare([1.0, 2.5, -math.inf], [1.0, 2.0, -math.inf], 0.1, 0.1)
        self.assertEqual((r["bad"], r["first_bad"], r["max_abs"], r["ok"]), (1, 1, 0.5, False))
        r = tolerance.compare([math.nan, 1.0], [0.0, 1.0], 1e9, 1e9)
        self.assertEqual((r["bad"], r["first_bad"], r["max_abs"]), (1, 0, math.inf))
        self.assertFalse(tolerance.compare([], [], 1.0, 1.0)["ok"])  # nothing compared is not a pass

    def test_plain_error_skips_non_finite_pairs(self):
        self.assertEqual(tolerance.plain_error([1.5, -math.inf, math.nan], [1.0, -math.inf, 3.0]), (0.5, 1.0))


class ResultsFile(unittest.TestCase):
    def row(self, **kw):
        row = {k: None for k in results.ROW_FIELDS}
        row.update(stage="11", variant="split", status="ok", verified=True, verification_ok=True, median_ms=0.05,
                   max_abs_error=1e-3, max_rel_error=1e-2, rel_error=1e-3, error_vs_plain=1.1, peak_bytes=10,
                   extra_bytes=0, **{"pass": "fwd"})
        row.update(kw)
        return row

    def test_check_document(self):
        doc = results.new_document("11", "step11 --json x", "abc", {"name": "GPU"})
        doc["results"] = [self.row(), self.row(stage="anchor", comparison=True, verified=False, status="skipped")]
        self.assertEqual(results.check_document(doc, "x.json", stage="11"), 2)
        for change, text in ((dict(verification_ok=False), "verification_ok"), (dict(status="fine"), "status"),
                             (dict(median_ms=math.nan), "median_ms"), (dict(error_vs_plain=None), "error_vs_plain")):
            bad = dict(doc, results=[self.row(**change)])
            with self.assertRaisesRegex(results.ResultsError, text):
                results.check_document(bad, "x.json", stage="11")
        with self.assertRaisesRegex(results.ResultsError, "stage"):
            results.check_document(doc, "x.json", stage="12")

    def test_read_results(self):
        path = os.path.join(tempfile.mkdtemp(), "r.json")
        with self.assertRaisesRegex(results.ResultsError, "not written"):
            results.read_results(path)
        with open(path, "w") as f:
            f.write("{")
        with self.assertRaisesRegex(results.ResultsError, "not JSON"):
            results.read_results(path)
        with open(path, "w") as f:
            json.dump({"schema": "something-else/2", "results": []}, f)
        with self.assertRaisesRegex(results.ResultsError, "schema"):
            results.read_results(path)
        results.write_results(path, results.new_document("anchor", "c", "abc", {}), [self.row()])
        self.assertEqual(results.read_results(path)["results"][0]["variant"], "split")


def stage_doc(stage="07"):
    def row(stage_, variant, status="ok", tflops=300.0):
        return {"stage": stage_, "variant": variant, "pass": "fwd", "dtype": "bfloat16", "dim": 64,
                "causal": True, "batch": 4, "heads": 32, "heads_kv": 32, "seq_q": 4096, "seq_k": 4096,
                "status": status, "tflops": tflops if status == "ok" else None, "verified": status == "ok",
                "median_ms": 1.0 if status == "ok" else None, "extra_field": [1, 2]}
    return {"schema": "flash-course-results/2", "stage": stage, "device": {"name": "GPU", "cuda_driver": "13.0"},
            "results": [row("07", "v1_mma", "failed"), row("07", "v2_ldmatrix", tflops=250.0),
                        row("07", "flash", tflops=320.0), row("05", "skip", tflops=40.0)]}


class Guard(unittest.TestCase):
    """The limits of guard.read_json, the one-line text, and the handler around a tool's main."""

    def read(self, text):
        with tempfile.NamedTemporaryFile("wb", suffix=".json", delete=False) as f:
            f.write(text if isinstance(text, bytes) else text.encode())
        try:
            return guard.read_json(f.name)
        finally:
            os.unlink(f.name)

    def test_read_json_limits(self):
        self.assertEqual(self.read('{"a": [1, 2.5, null, "[{"]}'), {"a": [1, 2.5, None, "[{"]})
        self.assertEqual(self.read(str(2 ** 64)), 2 ** 64)  # the largest count the C++ side writes
        for text, words in (("[" * 33 + "]" * 33, "nested"), ("9" * 21, "digits"), ("1e400", "too large"),
                            ("NaN", "NaN"), ("-Infinity", "Infinity"), (b"\xff", "UTF-8"), ("{", "not JSON")):
            with self.assertRaisesRegex(guard.BadInput, words):
                self.read(text)
        with self.assertRaisesRegex(guard.BadInput, "not a regular file"):
            guard.read_json(tempfile.gettempdir())

    def test_text(self):
        self.assertEqual(guard.one_line("a\nb\x1b]0;t\x07"), "a\\nb\\x1b]0;t\\x07")
        self.assertEqual(guard.label("$x^2$"), r"\$x^2\$")
        self.assertEqual(len(guard.label("x" * 500)), 80)

    def test_run_main(self):
        def bad():
            raise guard.BadInput("line one\nline two")

        def broken():
            raise TypeError("unhashable")

        for main, words in ((bad, "line one\\nline two"), (broken, "unexpected TypeError")):
            err = io.StringIO()
            environ = {k: v for k, v in os.environ.items() if k != "FA_TRACEBACK"}
            with redirect_stderr(err), mock.patch.dict(os.environ, environ, clear=True):
                self.assertEqual(guard.run_main("tool", main), 2)
            self.assertEqual(len(err.getvalue().splitlines()), 1, err.getvalue())
            self.assertIn(words, err.getvalue())


class Rows(unittest.TestCase):
    def test_stage_command(self):
        cmd = cp.stage_command("exe", "bfloat16", True, "IN", "OUT", "F.json", 20, 5)
        self.assertEqual(cmd, ["exe", "--dtype", "bfloat16", "--causal", "--load", "IN", "--save", "OUT",
                               "--json", "F.json", "--reps", "20", "--warmup", "5"])
        cmd = cp.stage_command("exe", "float16", False, "IN", "OUT", "F.json", 3, 0, "v2_ldmatrix", ["--no-verify"])
        self.assertIn("--causal=false", cmd)  # explicit: stage 05 is causal by default
        self.assertEqual(cmd[-3:], ["--variant", "v2_ldmatrix", "--no-verify"])
        self.assertNotIn("--seq", cmd)  # --load takes the shape from the files

    def test_merge_unchanged_and_saved_row(self):
        rows, seen = [{"stage": "anchor", "variant": "sdpa_flash"}], set()
        seen.add(results.case_key(rows[0]))
        doc = stage_doc()
        saved = results.merge_stage_rows(rows, doc, seen)
        self.assertEqual(len(rows), 5)
        self.assertIs(saved, doc["results"][1])  # the first ok row of stage 07: what --save wrote
        self.assertEqual(rows[1:], doc["results"])  # merged unchanged, extra fields and all
        # A second run (--variant flash) writes the previous stage's row again: kept once.
        doc2 = stage_doc()
        doc2["results"] = doc2["results"][2:]
        saved = results.merge_stage_rows(rows, doc2, seen, variant="flash")
        self.assertEqual(saved["variant"], "flash")
        self.assertEqual(len(rows), 6)
        self.assertEqual([r["variant"] for r in rows].count("skip"), 1)
        # Nothing of its own ran: no row to put the comparison on.
        doc3 = stage_doc()
        doc3["results"] = [doc3["results"][0], doc3["results"][3]]
        self.assertIsNone(results.merge_stage_rows([], doc3, set()))

    def test_ratio_text(self):
        row = stage_doc()["results"][2]
        anchors = {"sdpa_flash": {"status": "ok", "tflops": 290.0}, "sdpa_cudnn": {"status": "ok", "tflops": 400.0}}
        self.assertEqual(cp.ratio_text(row, anchors),
                         "320 TFLOP/s, 1.10x sdpa_flash (290), 0.80x sdpa_cudnn (400)")
        self.assertIn("sdpa_cudnn: not run", cp.ratio_text(row, {"sdpa_flash": anchors["sdpa_flash"]}))
        self.assertNotIn("fa4", cp.ratio_text(row, anchors))  # not asked for: not named
        with_fa4 = dict(anchors, fa4={"status": "ok", "tflops": 500.0})
        self.assertTrue(cp.ratio_text(row, with_fa4).endswith(", 0.64x fa4 (500)"))
        self.assertTrue(cp.ratio_text(row, dict(anchors, fa4={"status": "skipped"})).endswith("fa4: skipped"))

    def test_fa4_where_it_does_not_import(self):
        # Without the flash-attn-4 package (or with a module that fails to load) the backend is None
        # with the reason, and its row is a skipped "fa4" anchor row that says it.
        with mock.patch.dict(sys.modules, {"flash_attn": None, "flash_attn.cute": None}):
            attention, why = anchors.fa4_attention()
        self.assertIsNone(attention)
        self.assertIn("does not import", why)
        row, out = anchors.measure(None, None, attention, "fa4", "bwd", ("q", "k", "v", "do"), 4, 16, 4096, 128,
                                   "bfloat16", False, 20, 5, unavailable=why)
        self.assertIsNone(out)
        self.assertEqual((row["stage"], row["variant"], row["status"], row["note"]), ("anchor", "fa4", "skipped", why))
        self.assertEqual(row["flops"], 2.5 * 4 * 4 * 16 * 128 * 4096 * 4096)

    def test_write_results(self):
        path = os.path.join(tempfile.mkdtemp(), "out.json")
        rows = stage_doc()["results"]
        rows[2]["vs_pytorch"] = {"backend": "sdpa_flash", "max_abs": 1e-3, "rel_frobenius": float("nan"),
                                 "ok": True, "first_bad": None}
        doc = {"schema": "flash-course-results/2", "stage": "anchor", "command": "x", "date": "d",
               "git_commit": "c", "device": {"name": "GPU"},
               "stage_runs": [{"exe": "e", "exit_code": 0}, {"exe": "e", "exit_code": 1}], "results": rows}
        results.write_results(path, doc)
        with open(path) as f:
            text = f.read()
        back = json.loads(text)
        self.assertEqual(list(back), list(doc))
        self.assertIsNone(back["results"][2]["vs_pytorch"]["rel_frobenius"])  # NaN as null
        self.assertEqual(back["results"][2]["vs_pytorch"]["max_abs"], 1e-3)
        self.assertEqual(back["stage_runs"][1]["exit_code"], 1)
        lines = text.splitlines()
        self.assertEqual(sum(line.startswith('  {"stage"') for line in lines), len(rows))  # one row a line


class UsageChecks:
    """What every comparison script's usage tests share: main(argv) with stderr captured; each bad
    command line exits 2 with one line that names the problem and writes no results file; without
    PyTorch, exit 2. A test class sets `main` (a staticmethod)."""

    def run_main(self, argv):
        err = io.StringIO()
        with redirect_stderr(err):
            code = self.main(argv)
        return code, err.getvalue()

    def check_usage_errors(self, cases, out):
        for argv, text in cases:
            code, err = self.run_main(argv)
            self.assertEqual(code, 2, argv)
            self.assertEqual(len(err.strip().splitlines()), 1, err)
            self.assertIn(text, err)
        self.assertFalse(os.path.exists(out))

    def check_needs_torch(self, argv):
        if importlib.util.find_spec("torch") is not None:
            self.skipTest("PyTorch is installed here")
        code, err = self.run_main(argv)
        self.assertEqual(code, 2)
        self.assertIn("needs PyTorch", err)


class Usage(UsageChecks, unittest.TestCase):
    main = staticmethod(cp.main)

    def test_bad_usage_exits_2(self):
        out = os.path.join(tempfile.mkdtemp(), "x.json")
        self.check_usage_errors([
            (["--json", out, "--dtype", "int8"], "unknown dtype"),
            (["--json", out, "--pass", "fwd,sideways"], "unknown pass"),
            (["--json", out, "--backends", "flash,xformers"], "unknown backend"),
            (["--json", out, "--seq", "1k,zero"], "not a size"),
            (["--json", out, "--dim", "96"], "not a multiple"),
            (["--json", out, "--stage-exe", "/no/such/stage"], "not an executable"),
            (["--json", out, "--stage-exe", sys.executable], "--pass fwd"),  # one pass with a stage
            (["--json", out, "--stage-exe", sys.executable, "--pass", "fwd", "--stage-args", "'open"], "--stage-args"),
            (["--json", out, "--causal", "maybe"], "--causal"),  # argparse's own errors: one line too
            (["--json", out, "--reps"], "--reps"),
        ], out)

    def test_quick_defaults(self):
        a = cp.parse_args(["--json", "x", "--quick", "--reps", "7"])
        self.assertEqual((a.seq, a.tokens, a.reps, a.warmup), ("200,1000", "2k", 7, 1))
        a = cp.parse_args(["--json", "x"])
        self.assertEqual((a.seq, a.tokens, a.reps, a.warmup), ("512,1k,2k,4k,8k,16k", "16k", 20, 5))

    def test_stage_exe_list(self):
        a = cp.parse_args(["--json", "x", "--pass", "fwd", "--stage-exe", sys.executable + "," + sys.executable,
                           "--stage-exe", sys.executable, "--stage-variants", "v1,v2"])
        parsed = cp.check_args(a)
        self.assertEqual(parsed[6], [sys.executable] * 3)
        self.assertEqual(parsed[8], ["v1", "v2"])

    def test_without_torch_exits_2(self):
        self.check_needs_torch(["--json", os.path.join(tempfile.mkdtemp(), "x.json"), "--quick"])


class DecodeUsage(UsageChecks, unittest.TestCase):
    """compare_decode.py (stage 11's comparison) shares this file's helpers: its usage errors."""

    @staticmethod
    def main(argv):
        import compare_decode
        return compare_decode.main(argv)

    def test_bad_usage_exits_2(self):
        out = os.path.join(tempfile.mkdtemp(), "x.json")
        self.check_usage_errors([
            (["--json", out], "--exe"),
            (["--exe", sys.executable, "--json", out, "--heads", "6", "--heads-kv", "4"], "multiple"),
            (["--exe", sys.executable, "--json", out, "--seq-k", "8k,none"], "not a size"),
            (["--exe", sys.executable, "--json", out, "--dtype", "int8"], "--dtype"),
            (["--exe", sys.executable, "--json", out, "--anchor-processes", "0"], "at least 1"),
            (["--exe", sys.executable, "--json", out, "--anchors-only", "--batch", "1,16"], "one case"),
        ], out)

    def test_without_torch_exits_2(self):
        self.check_needs_torch(["--exe", sys.executable, "--json", os.path.join(tempfile.mkdtemp(), "x.json")])


class DecodeStreamUsage(UsageChecks, unittest.TestCase):
    """compare_decode_stream.py (decoding steps back to back): its usage errors, and the best anchor of
    each kind (alone, in a graph) that the stage's rows are measured against."""

    @staticmethod
    def main(argv):
        import compare_decode_stream
        return compare_decode_stream.main(argv)

    def test_bad_usage_exits_2(self):
        out = os.path.join(tempfile.mkdtemp(), "x.json")
        self.check_usage_errors([
            (["--json", out], "--exe"),
            (["--exe", sys.executable, "--json", out, "--layers", "0"], "--layers"),
            (["--exe", sys.executable, "--json", out, "--reps", "0"], "at least 1"),
            (["--exe", sys.executable, "--json", out, "--seq-k", "8k,none"], "not a size"),
            (["--exe", sys.executable, "--json", out, "--anchors-only", "--seq-k", "8k,16k"], "one case"),
        ], out)

    def test_without_torch_exits_2(self):
        self.check_needs_torch(["--exe", sys.executable, "--json", os.path.join(tempfile.mkdtemp(), "x.json")])

    def test_best_of_each_kind(self):
        import compare_decode_stream as stream
        rows = [{"variant": "sdpa_cudnn", "status": "ok", "median_ms": 0.022},
                {"variant": "sdpa_cudnn_graph", "status": "ok", "median_ms": 0.019},
                {"variant": "sdpa_flash", "status": "ok", "median_ms": 0.029},
                {"variant": "sdpa_flash_graph", "status": "ok", "median_ms": 0.026},
                {"variant": "sdpa_efficient_graph", "status": "skipped", "median_ms": None}]
        self.assertEqual(stream.best_of(rows, graph=False)["variant"], "sdpa_cudnn")
        self.assertEqual(stream.best_of(rows, graph=True)["variant"], "sdpa_cudnn_graph")
        self.assertIsNone(stream.best_of(rows[4:], graph=True))


class DecodeAnchorProcesses(unittest.TestCase):
    """compare_decode.py's anchors timed in several processes (flashcourse.anchors): the children's
    lines read back, and each row keeping the fastest process (no GPU: the children are stubbed)."""

    def setUp(self):
        import compare_decode
        self.cd = compare_decode
        self.args = compare_decode.parse_args(["--exe", sys.executable, "--json", os.devnull, "--anchor-processes", "3"])

    def test_fastest_process_kept_and_every_median_recorded(self):
        children = iter([(0, "a warning\n" + anchors.ANCHORS_LINE + '{"sdpa_cudnn": [0.022, 0.021, 0.030], "sdpa_flash": null}'),
                         (0, anchors.ANCHORS_LINE + '{"sdpa_cudnn": [0.031, 0.030, 0.040], "sdpa_flash": [0.050, 0.049, 0.060]}')])
        runs = self.cd.anchors_elsewhere(self.args, 1, 8192, run=lambda cmd, timeout: next(children))
        self.assertEqual(len(runs), 2)
        cudnn = {"variant": "sdpa_cudnn", "median_ms": 0.045, "min_ms": 0.044, "max_ms": 0.050}
        anchors.fastest_process(cudnn, runs)
        self.assertEqual(cudnn["process_medians_ms"], [0.045, 0.022, 0.031])
        self.assertEqual((cudnn["median_ms"], cudnn["min_ms"], cudnn["max_ms"]), (0.022, 0.021, 0.050))
        flash = {"variant": "sdpa_flash", "median_ms": 0.040, "min_ms": 0.039, "max_ms": 0.041}
        anchors.fastest_process(flash, runs)  # refused in one child: two processes count
        self.assertEqual(flash["process_medians_ms"], [0.040, 0.050])
        self.assertEqual(flash["median_ms"], 0.040)

    def test_a_failed_child_adds_nothing(self):
        err = io.StringIO()
        with redirect_stderr(err):
            runs = self.cd.anchors_elsewhere(self.args, 1, 8192, run=lambda cmd, timeout: (1, "Traceback ..."))
        self.assertEqual(runs, [])
        self.assertIn("failed", err.getvalue())
        row = {"variant": "sdpa_cudnn", "median_ms": 0.045, "min_ms": 0.044, "max_ms": 0.050}
        anchors.fastest_process(row, runs)
        self.assertEqual(row["median_ms"], 0.045)
        self.assertIn("one process", row["note"])

    def test_the_child_command_times_the_same_case(self):
        seen = []
        self.cd.anchors_elsewhere(self.args, 16, 32768,
                                  run=lambda cmd, timeout: seen.append(cmd) or (0, anchors.ANCHORS_LINE + "{}"))
        self.assertEqual(len(seen), 2)
        child = self.cd.parse_args(seen[0][2:])  # after the interpreter and the script
        self.assertTrue(child.anchors_only)
        self.assertEqual((child.batch, child.seq_k, child.seed, child.reps), ([16], [32768], self.args.seed, self.args.reps))

    def test_the_stream_child_command(self):
        import compare_decode_stream as stream
        seen = []
        args = stream.parse_args(["--exe", sys.executable, "--json", os.devnull, "--layers", "4"])
        stream.anchors_elsewhere(args, 8192, run=lambda cmd, timeout: seen.append(cmd) or (0, anchors.ANCHORS_LINE + "{}"))
        child = stream.parse_args(seen[0][2:])
        self.assertTrue(child.anchors_only)
        self.assertEqual((child.seq_k, child.layers), ([8192], 4))


@unittest.skipIf(np is None, "NumPy is not installed")
class RealStage(unittest.TestCase):
    """The stage's side of the comparison with a real (CPU) stage: its command line, its files."""

    def attention(self, q, k, v, causal, dtype):
        b, h, nq, d = q.shape
        nk = k.shape[2]
        s = np.einsum("bhid,bhjd->bhij", q.astype(dtype), k.astype(dtype)) * dtype(1 / math.sqrt(d))
        if causal:
            s = np.where(np.arange(nk)[None, :] > np.arange(nq)[:, None] + (nk - nq), -np.inf, s)
        m = np.max(s, axis=-1, keepdims=True)
        m = np.where(np.isfinite(m), m, 0)
        p = np.exp(s - m)
        ssum = p.sum(-1, keepdims=True)
        with np.errstate(divide="ignore", invalid="ignore"):
            o = np.where(ssum > 0, np.einsum("bhij,bhjd->bhid", p, v.astype(dtype)) / ssum, 0)
            lse = (m + np.log(ssum))[..., 0]
        return o.astype(dtype), lse.astype(dtype)

    def test_stage_run(self):
        if not STAGE_EXE:
            self.skipTest("no --stage-exe given")
        rng = np.random.default_rng(3)
        shape = (1, 2, 70, 32)
        for causal in (False, True):
            folder = tempfile.mkdtemp()
            in_dir, out_dir, json_path = (os.path.join(folder, x) for x in ("in", "out", "stage.json"))
            os.makedirs(in_dir)
            q, k, v = (rng.standard_normal(shape).astype(np.float32) + 0.5 for _ in range(3))
            for name, t in zip("qkv", (q, k, v)):
                npy.write_npy(os.path.join(in_dir, name + ".npy"), npy.npy_descr("float32"), t.shape, t.tobytes())
            cmd = cp.stage_command(STAGE_EXE, "float32", causal, in_dir, out_dir, json_path, 2, 1)
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
            self.assertEqual(proc.returncode, 0, proc.stdout[-2000:] + proc.stderr)
            with open(json_path) as f:
                doc = json.load(f)
            rows = []
            saved = results.merge_stage_rows(rows, doc, set())
            self.assertIsNotNone(saved)
            self.assertEqual((saved["batch"], saved["heads"], saved["seq_q"], saved["dim"], saved["causal"]),
                             (1, 2, 70, 32, causal))
            descr, oshape, body = npy.read_npy(os.path.join(out_dir, "o.npy"))
            o = np.frombuffer(body, np.float32).reshape(oshape).astype(np.float64)
            _, lshape, body = npy.read_npy(os.path.join(out_dir, "lse.npy"))
            lse = np.frombuffer(body, np.float32).reshape(lshape).astype(np.float64)
            self.assertEqual((oshape, lshape), (shape, shape[:3]))
            ref_o, ref_lse = self.attention(q, k, v, causal, np.float64)
            plain_o, plain_lse = self.attention(q, k, v, causal, np.float32)
            u = tolerance.UNIT_ROUNDOFF["float32"]
            for got, ref, plain in ((o, ref_o, plain_o), (lse, ref_lse, plain_lse)):
                e = tolerance.compare_arrays(np, plain.astype(np.float64), ref, 0.0, 0.0)["max_abs"]
                atol, rtol = tolerance.tolerance_from_plain(e, tolerance.max_finite_abs(np, ref), u)
                r = tolerance.compare_arrays(np, got, ref, atol, rtol)
                self.assertEqual(r["bad"], 0, r)
            # and a wrong answer fails the same rule: the output of the other mask
            wrong, _ = self.attention(q, k, v, not causal, np.float64)
            e = tolerance.compare_arrays(np, plain_o.astype(np.float64), ref_o, 0.0, 0.0)["max_abs"]
            atol, rtol = tolerance.tolerance_from_plain(e, tolerance.max_finite_abs(np, ref_o), u)
            self.assertGreater(tolerance.compare_arrays(np, wrong, ref_o, atol, rtol)["bad"], 0)


if __name__ == "__main__":
    if "--stage-exe" in sys.argv:
        i = sys.argv.index("--stage-exe")
        STAGE_EXE = sys.argv[i + 1]
        del sys.argv[i:i + 2]
    unittest.main()
