#!/usr/bin/env python3
"""test_hostile_inputs.py — every Python tool of the course, fed malformed input, must end in one
line and a non-zero exit: never a traceback, a hang or a second line.

    test_hostile_inputs.py [--plot-python PY] [--only TEXT]

Each case writes a hostile file into a scratch folder (JSON nested 100,000 deep, `null`, a results
file of schema version 99, a row whose device is a number, a list or an object, a 400-digit
integer, values of 1e308, mathtext in a variant's name, thousands of variants, a file that is not
UTF-8, a FIFO, a path with a newline in it), runs one tool on it and checks: the exit code is the
one expected (2: bad input; 1 where the tool is a check that failed), stderr is exactly one line
(run_and_check.py: its verdict is the one "FAIL:" line on stdout and stderr is empty), "Traceback"
appears nowhere, and it ends within 60 s. The plot tools run under --plot-python (a Python with
matplotlib, so that the figures are really attempted; default: this one; without matplotlib the
cases that must draw are left out and the others stop where the tools find no matplotlib). Exit 0 when every case
holds, 1 naming each that does not, 2 bad usage.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PLOTS = os.path.join(ROOT, "docs", "plots")
TIMEOUT_S = 60


def row(variant="flash", n=1024, **fields):
    """A results row with every field of the schema, as common/src/results.cpp writes one."""
    r = {"stage": "01", "variant": variant, "pass": "fwd", "device": "Synthetic CPU", "cuda_runtime": None,
         "cuda_driver": None, "git_commit": "x", "batch": 1, "heads": 4, "heads_kv": 4, "seq_q": n,
         "seq_k": n, "dim": 64, "dtype": "float32", "causal": False, "status": "ok", "median_ms": 1.5,
         "tflops": 0.1, "gbps": None, "peak_bytes": 4096, "extra_bytes": 1024, "driver_bytes": None,
         "reference": "plain", "verified": True, "verification_ok": True, "max_abs_error": 0.0,
         "max_rel_error": 0.0, "rel_error": 0.0, "error_vs_plain": 0.0}
    r.update(fields)
    return r


def document(rows, schema="flash-course-results/2", **top):
    doc = {"schema": schema, "stage": "01", "command": "step01", "date": "2026-01-01T00:00:00Z",
           "git_commit": "x", "device": {"name": "Synthetic CPU"}, "copy_bandwidth": {"gbps": 100.0},
           "results": rows}
    doc.update(top)
    return doc


def hostile_files(tmp):
    """{name: path} of the hostile inputs, written into tmp."""
    files = {}

    def put(name, content):
        path = os.path.join(tmp, name)
        with open(path, "wb") as f:
            f.write(content if isinstance(content, bytes) else content.encode())
        files[name] = path

    def put_doc(name, doc):
        put(name, json.dumps(doc))

    put("deep.json", "[" * 100000 + "]" * 100000)
    put("deep_object.json", '{"a":' * 50000 + "1" + "}" * 50000)
    put("null.json", "null")
    put("not_json.json", "{not json")
    put("empty.json", "")
    put("nan.json", '{"schema": "flash-course-results/2", "results": [NaN]}')
    put("non_utf8.json", b'{"schema": "\xff\xfe"}')
    put_doc("schema_99.json", document([row()], schema="flash-course-results/99"))
    put_doc("rows_not_objects.json", document([5, "x", None]))
    put_doc("device_number.json", document([row(device=5)]))
    put_doc("device_list.json", document([row(device=[1, 2])]))
    put_doc("device_dict.json", document([row(device={"name": "x"})]))
    put_doc("top_device_number.json", document([row(device=None)], device=7))
    put_doc("top_device_name_list.json", document([row(device=None)], device={"name": ["a"]}))
    put("int_400_digits.json", json.dumps(document([row()])).replace('"seq_k": 1024', '"seq_k": ' + "9" * 400))
    put("float_1e400.json", json.dumps(document([row()])).replace('"median_ms": 1.5', '"median_ms": 1e400'))
    put_doc("values_1e308.json", document([row(n=n, median_ms=1e308, tflops=1e308, peak_bytes=1e308,
                                                   extra_bytes=1e308) for n in (1024, 2048)]))
    put_doc("mathtext_variant.json", document([row(variant=r"$\frac{1}{$", n=n) for n in (1024, 2048)]))
    put_doc("control_bytes.json", document([row(variant="a\nb\x1b]0;title\x07", n=n) for n in (1024, 2048)]))
    put_doc("status_list.json", document([row(status=["ok"])]))
    put_doc("strings_for_numbers.json", document([row(median_ms="fast", peak_bytes="big", extra_bytes="x")]))
    put_doc("thousands_of_variants.json", document([row(variant="v%d" % i, n=n) for i in range(3000)
                                                    for n in (1024, 2048)]))
    put_doc("decode_no_bandwidth.json", document([row(stage="11", variant="split_kv")], copy_bandwidth=None))
    put_doc("decode_1e308.json", document([row(stage="11", variant="split_kv", n=n, median_ms=1e308)
                                           for n in (1024, 2048)]))
    put_doc("decode_strings.json", document([row(stage="11", variant="split_kv", batch="one", seq_k=[1])]))
    header = dict.fromkeys(("gpus", "split", "overlap", "pass", "heads", "seq", "dim", "causal", "dtype", "device"), 1)
    put_doc("timeline_null_spans.json", dict(header, spans=None))
    put_doc("timeline_bad_span.json", dict(header, gpus=10 ** 9, spans=[
        {"rank": "0", "lane": 5, "what": [], "step": {}, "start_ms": "a", "end_ms": None}]))
    fifo = os.path.join(tmp, "fifo.json")
    os.mkfifo(fifo)
    files["fifo.json"] = fifo
    files["missing\nline.json"] = os.path.join(tmp, "missing\nline.json")
    return files


# The results files that break the schema, for every tool that reads results files; then those that
# break only what a tool needs (a figure's range and size, a decoding row's counts and bandwidth).
BROKEN = ["deep.json", "deep_object.json", "null.json", "not_json.json", "empty.json", "nan.json", "non_utf8.json",
          "schema_99.json", "rows_not_objects.json", "device_number.json", "device_list.json", "device_dict.json",
          "top_device_number.json", "top_device_name_list.json", "int_400_digits.json", "float_1e400.json",
          "status_list.json", "strings_for_numbers.json", "fifo.json", "missing\nline.json"]
FOR_PLOTS = ["values_1e308.json", "thousands_of_variants.json"]
FOR_DECODING = ["decode_1e308.json", "decode_no_bandwidth.json", "decode_strings.json"]


def cases(files, tmp, py, plot_py):
    """(name, command, expected exit, mode): mode "stderr" wants one line on stderr; "fail" (the
    results check of run_and_check.py) wants stderr empty and a last stdout line "FAIL: ..."; "check"
    (check_doc_numbers.py's verdict on a figure) and "quiet" want stderr empty. A
    case in which the tool draws the file correctly would not be hostile: each file here breaks a
    rule of the schema or of what can be drawn."""
    out = os.path.join(tmp, "out")
    tool = lambda *p: os.path.join(*p)  # noqa: E731
    plot_ok = ("mathtext_variant.json", "control_bytes.json")  # drawable: the names are drawn as text
    for name in BROKEN + FOR_PLOTS:
        yield ("plot_results " + name, [plot_py, tool(PLOTS, "plot_results.py"), files[name], "--out", out], 2, "stderr")
    for name in BROKEN + FOR_DECODING:
        yield ("draw_decode_time " + name, [plot_py, tool(PLOTS, "draw_decode_time.py"), files[name],
                                            "--out", out], 2, "stderr")
    for name in BROKEN + ["decode_1e308.json", "decode_strings.json"]:
        yield ("fit_decode_floor " + name, [py, tool(PLOTS, "fit_decode_floor.py"), files[name]], 2, "stderr")
    for name in BROKEN + ["timeline_null_spans.json", "timeline_bad_span.json"]:
        yield ("draw_ring_timeline " + name, [plot_py, tool(PLOTS, "draw_ring_timeline.py"), files[name],
                                              "--out", os.path.join(out, "t.png")], 2, "stderr")
    for name in BROKEN:  # the stage "writes" the hostile file: a link to it where the results go
        link = os.path.join(tmp, "written.json")
        yield ("run_and_check " + name, [py, tool(HERE, "run_and_check.py"), "--expect", "0", "--json", link,
                                         "--stage", "01", "--", py, "-c",
                                         "import os, sys; os.symlink(sys.argv[1], sys.argv[2])", files[name], link],
               1, "fail")
    # The drawable names: drawn, as text (exit 0, no traceback), where there is matplotlib to draw them.
    has_mpl = subprocess.run([plot_py, "-c", "import matplotlib"], capture_output=True).returncode == 0
    for name in plot_ok if has_mpl else ():
        yield ("plot_results draws " + name, [plot_py, tool(PLOTS, "plot_results.py"), files[name], "--out", out],
               0, "quiet")
    # check_doc_numbers: a Markdown file that is not UTF-8, and figures that name hostile results files.
    docs = os.path.join(tmp, "docs")
    os.makedirs(os.path.join(docs, "results"), exist_ok=True)
    with open(os.path.join(docs, "bad.md"), "wb") as f:
        f.write(b"a figure: 1.0 ms\xff\xfe <!-- fig: x.json stage=01 field=median_ms -->\n")
    for name in ("deep.json", "null.json", "non_utf8.json", "int_400_digits.json", "fifo.json"):
        md = os.path.join(docs, "fig_%s.md" % name.split(".")[0])
        with open(md, "w", encoding="utf-8") as f:
            f.write("a figure: 1.5 ms <!-- fig: ../%s variant=flash field=median_ms -->\n" % name)
        yield ("check_doc_numbers figure from " + name, [py, tool(HERE, "check_doc_numbers.py"), "--docs", docs, md],
               1, "check")
    yield ("check_doc_numbers non-UTF-8 Markdown", [py, tool(HERE, "check_doc_numbers.py"), "--docs", docs,
                                                    os.path.join(docs, "bad.md")], 2, "stderr")
    # Bad usage: one line, exit 2.
    yield ("tour without --source", [py, tool(HERE, "tour.py")], 2, "stderr")
    yield ("course_check without --source", [py, tool(HERE, "course_check.py")], 2, "stderr")
    yield ("speed_table without a folder", [py, tool(HERE, "speed_table.py")], 2, "stderr")
    yield ("speed_table --bar nan", [py, tool(HERE, "speed_table.py"), tmp, "--bar", "x"], 2, "stderr")
    yield ("run_and_check without --expect", [py, tool(HERE, "run_and_check.py")], 2, "stderr")
    yield ("run_and_check --npy-shape 1,x", [py, tool(HERE, "run_and_check.py"), "--expect", "0", "--mode",
                                             "npy-roundtrip", "--npy-shape", "1,x", "--", "true"], 2, "stderr")
    yield ("fit_decode_floor --from x", [py, tool(PLOTS, "fit_decode_floor.py"), files["schema_99.json"],
                                         "--from", "4x"], 2, "stderr")
    yield ("draw_ring_schedule --check /bin/false", [plot_py, tool(PLOTS, "draw_ring_schedule.py"), "--check",
                                                     "/bin/false"], 2, "stderr")
    yield ("draw_ring_schedule --check missing", [plot_py, tool(PLOTS, "draw_ring_schedule.py"), "--check",
                                                  os.path.join(tmp, "no_such_exe")], 2, "stderr")
    yield ("draw_ring_schedule --gpus x", [plot_py, tool(PLOTS, "draw_ring_schedule.py"), "--gpus", "x"], 2, "stderr")


def judge(cmd, expect, mode):
    """None when the run did what the case expects, else what went wrong (one line)."""
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, errors="replace", timeout=TIMEOUT_S,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return "no end within %d s" % TIMEOUT_S
    err = proc.stderr.splitlines()
    if "Traceback" in proc.stdout + proc.stderr:
        return "a traceback (exit %d): %s" % (proc.returncode, (err or ["?"])[-1])
    if proc.returncode != expect:
        return "exit %d, expected %d; stderr: %r" % (proc.returncode, expect, proc.stderr[-300:])
    if mode == "stderr" and (len(err) != 1 or not err[0].strip()):
        return "%d lines on stderr, expected one: %r" % (len(err), proc.stderr[-300:])
    if mode in ("check", "quiet") and proc.stderr.strip():
        return "expected nothing on stderr, got %r" % proc.stderr[-300:]
    if mode == "fail":
        out = proc.stdout.splitlines()
        if proc.stderr or not out or not out[-1].startswith("FAIL: "):
            return "expected one FAIL line last and nothing on stderr; got %r / %r" % (out[-1:], proc.stderr[-200:])
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--plot-python", default=sys.executable, help="a Python with matplotlib for the plot tools")
    ap.add_argument("--only", default="", help="run only the cases whose name contains this text")
    args = ap.parse_args()
    failures = ran = 0
    with tempfile.TemporaryDirectory(prefix="fa_hostile_") as tmp:
        files = hostile_files(tmp)
        for name, cmd, expect, mode in cases(files, tmp, sys.executable, args.plot_python):
            if args.only not in name:
                continue
            ran += 1
            problem = judge(cmd, expect, mode)
            shown = name.encode("unicode_escape").decode("ascii")
            print("%s: %s%s" % ("ok" if problem is None else "WRONG", shown, "" if problem is None else ": " + problem),
                  flush=True)
            failures += problem is not None
    print("hostile inputs: %d of %d cases as expected" % (ran - failures, ran))
    return 1 if failures or not ran else 0


if __name__ == "__main__":
    sys.exit(main())
