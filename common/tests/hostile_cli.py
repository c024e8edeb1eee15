#!/usr/bin/env python3
"""Hostile inputs for a stage executable: each must end in one clear line and exit 2 (or a
correct result), never a hang, a signal, a silent wrong answer or a false FAIL.

    hostile_cli.py [--shape B,H,NQ,NK,D | B,H,HKV,NQ,NK,D] [--only CASE,...] [--list] -- EXE [args...]

Each case builds what it needs in a temporary folder (FIFOs, links to devices, .npy files), runs
EXE with its flags (a timeout catches a hang) and checks the exit code and that stderr is one line
without control bytes. --shape is the stage's .npy shape (its NPY_SHAPE; default 1,2,6,4,8). A run
that exits 77 (no CUDA device) makes the script exit 77, so that CTest reports a skip. Standard
library only, as the other tools.
"""
import argparse
import os
import resource
import signal
import struct
import subprocess
import sys
import tempfile

TIMEOUT_S = 120
# Cases run only when --only names them: a result that holds for some stages (a forward stage reads
# no do.npy; the 3e38 output is exact only where the stage keeps float32 inputs).
OPT_IN = ("v_near_float32_limit", "load_do_huge", "load_do_times_v")


def npy_bytes(shape_text, values, descr="<f4"):
    """A .npy file (format 1.0); shape_text is the header's tuple as written, e.g. '(1, 2, 6, 8)'."""
    header = "{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (descr, shape_text)
    header += " " * ((64 - (10 + len(header) + 1) % 64) % 64) + "\n"
    data = struct.pack("<%df" % len(values), *values)
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode() + data


def tuple_text(shape):
    return "(" + ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"


def write(path, data):
    with open(path, "wb") as f:
        f.write(data)


class Inputs:
    """q, k, v files of the stage's shape; fill(name, index) gives each element's value."""

    def __init__(self, spec):
        dims = [int(x) for x in spec.split(",")]
        if len(dims) == 5:
            b, h, nq, nk, d = dims
            hkv = h
        else:
            b, h, hkv, nq, nk, d = dims
        self.q_shape, self.kv_shape = (b, h, nq, d), (b, hkv, nk, d)

    def write(self, folder, q=None, k=None, v=None, kv_shape=None, q_shape=None):
        os.makedirs(folder, exist_ok=True)
        qs, kvs = q_shape or self.q_shape, kv_shape or self.kv_shape
        for name, shape, fill in (("q", qs, q), ("k", kvs, k), ("v", kvs, v)):
            count = 1
            for d in shape:
                count *= d
            values = [fill(i) if fill else 0.25 * ((i * 7919) % 13 - 6) / 6 for i in range(count)]
            write(os.path.join(folder, name + ".npy"), npy_bytes(tuple_text(shape), values))
        return folder


def cases(tmp, inputs):
    """(name, arguments, expected exit code, texts stderr or stdout must hold[, what the child runs
    before the executable]). Built lazily."""
    def folder(name):
        return os.path.join(tmp, name)

    def fifo_q():
        d = inputs.write(folder("fifo_q"))
        os.remove(os.path.join(d, "q.npy"))
        os.mkfifo(os.path.join(d, "q.npy"))
        return ["--load", d], 2, ["FIFO"]

    def fifo_cu_seqlens():
        d = inputs.write(folder("fifo_cu"))
        os.mkfifo(os.path.join(d, "cu_seqlens.txt"))
        return ["--load", d], 2, ["FIFO"]

    def zero_cu_seqlens():
        d = inputs.write(folder("zero_cu"))
        os.symlink("/dev/zero", os.path.join(d, "cu_seqlens.txt"))
        return ["--load", d], 2, ["device"]

    def fifo_json():
        path = folder("results.fifo")
        os.mkfifo(path)
        return ["--seq", "64", "--json", path], 2, ["FIFO"]

    def fifo_save():
        out = folder("save_fifo")
        os.makedirs(out)
        os.mkfifo(os.path.join(out, "o.npy"))
        return ["--load", inputs.write(folder("save_in")), "--save", out], 2, ["FIFO"]  # before the run

    def full_json():
        return ["--seq", "64", "--json", "/dev/full"], 2, ["--json /dev/full"]

    def stdout_full():  # the report is the result: one that cannot be written is no PASS
        return ["--seq", "64"], 2, ["standard output"], stdout_to_dev_full

    def help_full():  # --help's text is what was asked for: unwritten, it is no success either
        return ["--help"], 2, ["standard output"], stdout_to_dev_full

    def write_fails(flag):  # a regular file whose writes fail (a full disk, here a file-size limit)
        def case():
            target = folder("small_disk" + flag.replace("-", "_"))
            args = ["--seq", "64", "--json", target + ".json"] if flag == "--json" else \
                   ["--load", inputs.write(folder("small_disk_in")), "--save", target]
            return args, 2, ["write failed"], limit_file_size
        return case

    def empty(flag):
        return lambda: ([flag, ""], 2, [flag])

    def seed(value):
        return lambda: (["--seq", "64", "--seed", value], 2, ["--seed"])

    def tiny_scale():
        return ["--seq", "64", "--scale", "1e-50"], 2, ["--scale"]

    def huge_v():  # the un-normalized sum Σ exp(s - m)·v of Nk values of 1e38 passes float32's range
        return ["--load", inputs.write(folder("huge_v"), v=lambda i: 1e38), "--no-verify"], 2, ["v["]

    def scaled_scores():  # q·k fits float32, scale·q·k does not
        return ["--seq", "64", "--heads", "1", "--scale", "1e38", "--no-verify"], 2, ["overflows float32"]

    def newline_seq():
        return ["--seq", "6\n4"], 2, ["\\x0a"]

    def escape_dtype():
        return ["--seq", "64", "--dtype", "\x1b]0;title\x07"], 2, ["\\x1b"]

    def escape_inputs():
        return ["--seq", "64", "--inputs", "\x1b[31mred"], 2, ["\\x1b"]

    def c1_dtype():  # a lone 0x9B is CSI to a terminal in an 8-bit mode
        return ["--seq", "64", "--dtype", os.fsdecode(b"\x9b31m")], 2, ["\\x9b31m"]

    def invalid_utf8_inputs():
        return ["--seq", "64", "--inputs", os.fsdecode(b"\xff\xfe\xc0\xaf")], 2, ["\\xff\\xfe\\xc0\\xaf"]

    def default_value(flag, value):  # the value that means "not given" inside, given by the user
        return lambda: (["--seq", "64", flag, value], 2, [flag])

    def newline_load():
        return ["--load", folder("no\nsuch")], 2, ["\\x0a"]

    def cu_word(text, name):
        def case():
            d = inputs.write(folder(name))
            write(os.path.join(d, "cu_seqlens.txt"), text)
            return ["--load", d], 2, ["cu_seqlens.txt"]
        return case

    def bool_dims():
        d = inputs.write(folder("bool_dims"))
        b, h, n, dim = inputs.q_shape
        values = [0.5] * (h * n * dim)
        write(os.path.join(d, "q.npy"), npy_bytes("(True, %d, %d, %d)" % (h, n, dim), values))
        return ["--load", d], 2, ["shape is not valid"]

    def zero_dim():
        b, h, nq, d = inputs.q_shape
        kb, kh, nk, kd = inputs.kv_shape
        f = inputs.write(folder("zero_dim"), q_shape=(b, h, 0, d), kv_shape=(kb, kh, 0, kd))
        return ["--load", f], 2, ["empty"]

    def do_file(name, do_value, v=None):  # a backward stage's dO (do.npy, the shape of q.npy)
        def case():
            d = inputs.write(folder(name), v=v)
            count = 1
            for n in inputs.q_shape:
                count *= n
            write(os.path.join(d, "do.npy"), npy_bytes(tuple_text(inputs.q_shape), [do_value] * count))
            return ["--load", d], 2, ["do[0,0,0,"]
        return case

    def v_near_limit():  # one key: the output is V itself, 3e38, which float32 holds
        b, h, nq, d = inputs.q_shape
        kb, kh, nk, kd = inputs.kv_shape
        f = inputs.write(folder("v_limit"), v=lambda i: 3e38, kv_shape=(kb, kh, 1, kd))
        return ["--load", f], 0, ["PASS"]

    table = [("load_fifo_q", fifo_q), ("load_fifo_cu_seqlens", fifo_cu_seqlens),
             ("load_dev_zero_cu_seqlens", zero_cu_seqlens), ("json_fifo", fifo_json),
             ("save_fifo", fifo_save), ("json_dev_full", full_json)]
    table += [("json_write_fails", write_fails("--json")), ("save_write_fails", write_fails("--save")),
              ("stdout_dev_full", stdout_full), ("help_dev_full", help_full)]
    for flag in ("--load", "--json", "--save", "--seq", "--sweep", "--seq-lens", "--seq-q", "--seq-k",
                 "--scale", "--seed", "--reps", "--mem-limit-gb", "--warmup", "--dtype", "--inputs", "--batch",
                 "--heads", "--heads-kv", "--dim"):
        table.append(("empty" + flag.replace("--", "_").replace("-", "_"), empty(flag)))
    table += [("seed_2_64", seed("18446744073709551616")), ("seed_negative", seed("-1")),
              ("scale_tiny", tiny_scale), ("no_verify_huge_v", huge_v), ("no_verify_scaled_scores", scaled_scores),
              ("reps_zero", default_value("--reps", "0")), ("warmup_negative", default_value("--warmup", "-1")),
              ("mem_limit_zero", default_value("--mem-limit-gb", "0")),
              ("mem_limit_past_64_bits", default_value("--mem-limit-gb", "1e300")),
              ("newline_in_seq", newline_seq), ("escape_in_dtype", escape_dtype), ("escape_in_inputs", escape_inputs),
              ("c1_byte_in_dtype", c1_dtype), ("invalid_utf8_in_inputs", invalid_utf8_inputs),
              ("newline_in_load", newline_load),
              ("cu_seqlens_escape", cu_word(b"0 4\x1b]0;title\x07", "cu_escape")),
              ("cu_seqlens_nul", cu_word(b"0 \x002", "cu_nul")),
              ("cu_seqlens_c1_byte", cu_word(b"0 4\x9b1m", "cu_c1")),
              ("npy_bool_dims", bool_dims), ("npy_zero_dim", zero_dim), ("v_near_float32_limit", v_near_limit),
              # backward stages only (a forward stage reads no do.npy): dV's sum of 1e38s, and a dO
              # that fits that rule but not dO·V with V = 1e10
              ("load_do_huge", do_file("do_huge", 1e38)),
              ("load_do_times_v", do_file("do_times_v", 1e30, v=lambda i: 1e10))]
    return table


def limit_file_size():
    """In the child: files may not grow past 100 bytes, and a write past that fails (EFBIG) rather than
    killing the process, as a full disk would make it fail."""
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (100, 100))


def stdout_to_dev_full():
    """In the child: standard output is /dev/full, where every write fails (ENOSPC)."""
    os.dup2(os.open("/dev/full", os.O_WRONLY), 1)


def one_clean_line(err):
    """One line of well-formed UTF-8 without C0 or C1 controls or DEL."""
    try:
        text = err.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return text.endswith("\n") and text.count("\n") == 1 and \
        not any((ord(c) < 0x20 and c != "\n") or 0x7F <= ord(c) <= 0x9F for c in text)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", default="1,2,6,4,8")
    parser.add_argument("--only", default="", help="comma-separated case names (default: all but " + ", ".join(OPT_IN) + ")")
    parser.add_argument("--list", action="store_true", help="print the case names and exit")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if command and os.sep in command[0]:
        command[0] = os.path.abspath(command[0])  # the cases run in their temporary folder
    with tempfile.TemporaryDirectory() as tmp:
        table = cases(tmp, Inputs(args.shape))
        if args.list:
            print("\n".join(name for name, _ in table))
            return 0
        if not command:
            parser.error("give the command after --")
        wanted = [n for n in args.only.split(",") if n] or [n for n, _ in table if n not in OPT_IN]
        unknown = set(wanted) - {n for n, _ in table}
        if unknown:
            parser.error("unknown case(s): " + ", ".join(sorted(unknown)))
        failed = 0
        for name, build in table:
            if name not in wanted:
                continue
            extra, expect, texts, *setup = build()
            try:
                run = subprocess.run(command + extra, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     timeout=TIMEOUT_S, cwd=tmp, preexec_fn=setup[0] if setup else None)
            except subprocess.TimeoutExpired:
                print("FAIL %s: still running after %d s (a hang)" % (name, TIMEOUT_S))
                failed += 1
                continue
            if run.returncode == 77:
                print("skipped: %s exited 77 (no suitable CUDA device)" % os.path.basename(command[0]))
                return 77
            output = (run.stdout + run.stderr).decode("utf-8", "replace")
            why = []
            if run.returncode != expect:
                why.append("exit %d, expected %d" % (run.returncode, expect))
            if expect == 2 and not one_clean_line(run.stderr):
                why.append("stderr is not one line without control bytes: %r" % run.stderr[:300])
            if expect == 0 and "FAIL" in output:
                why.append("the output says FAIL")
            why += ["the output lacks %r" % t for t in texts if t not in output]
            if why:
                failed += 1
                print("FAIL %s: %s" % (name, "; ".join(why)))
                print("  stderr: %r" % run.stderr[-300:])
            else:
                print("ok   %s: exit %d, %r" % (name, run.returncode, run.stderr.decode("utf-8", "replace").strip()[:160]))
        print("%d of %d cases failed" % (failed, len(wanted)))
        return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
