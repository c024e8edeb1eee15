"""flashcourse.cli — what every comparison script does at its start and end: one-line usage errors
(exit 2), sizes such as 4k, the options the grouped-head comparisons share, a stage executable run
with a time limit, and the closing summary with the exit code."""
import argparse
import subprocess
import sys

from . import guard


class UsageError(Exception):
    """Bad usage: one line on stderr, exit 2. Not a ValueError: argparse would replace the text of
    one raised by an option's type (sizes) with its own."""


class OneLineParser(argparse.ArgumentParser):
    def error(self, message):  # argparse prints its usage too; the course's tools print one line
        raise UsageError(message + " (see --help)")


def sizes(text):
    """'512,1k, 4K' -> [512, 1024, 4096] (UsageError for anything else, or for an empty list)."""
    out = []
    for part in text.split(","):
        part = part.strip().lower()
        if not part:
            continue
        mult = 1024 if part.endswith("k") else 1
        try:
            value = int(part.rstrip("k")) * mult
        except ValueError:
            raise UsageError("not a size: %r (e.g. 512, 4k)" % part) from None
        if value < 1:
            raise UsageError("sizes must be positive, got %r" % part)
        out.append(value)
    if not out:
        raise UsageError("an empty list of sizes: %r" % text)
    return out


def grouped_stage_parser(prog, description, stage, backends, reps, warmup):
    """The options of the comparisons of a grouped-head stage (decoding, prefill): its executable and
    the results file, the heads, D and dtype, PyTorch's backends, the timing, the seed, the commit and
    the stage's time limit (each script adds its shapes)."""
    ap = OneLineParser(prog=prog, description=description + " (the file's docstring says it all)")
    ap.add_argument("--exe", required=True, help="stage %s's executable" % stage)
    ap.add_argument("--json", required=True, help="the results file to write")
    ap.add_argument("--heads", default=32, type=int)
    ap.add_argument("--heads-kv", default=8, type=int)
    ap.add_argument("--dim", default=128, type=int)
    ap.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16"))
    ap.add_argument("--backends", default=backends)
    ap.add_argument("--reps", default=reps, type=int)
    ap.add_argument("--warmup", default=warmup, type=int)
    ap.add_argument("--seed", default=0, type=int)
    ap.add_argument("--commit", default="")
    ap.add_argument("--stage-timeout", default=600, type=float)
    return ap


def parse_grouped(ap, argv):
    """ap's arguments, with the grouping of the heads checked (UsageError otherwise)."""
    args = ap.parse_args(argv)
    if args.heads_kv < 1 or args.heads % args.heads_kv:
        raise UsageError("--heads must be a multiple of --heads-kv")
    return args


def start(prog, parse, argv, setup):
    """What every comparison does first: argv parsed by `parse`, then `setup(prog, args)` (PyTorch and
    the GPU; None when they are missing, after one line on stderr). Returns (args, what setup
    returned), or (None, 2) after one line on stderr."""
    try:
        args = parse(argv)
    except UsageError as e:
        print("%s: error: %s" % (prog, guard.one_line(e)), file=sys.stderr)
        return None, 2
    found = setup(prog, args)
    return (args, found) if found is not None else (None, 2)


def run_command(cmd, timeout):
    """(exit code, stdout + stderr) of cmd; the exit code is None when it ran past `timeout` seconds."""
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        return proc.returncode, proc.stdout + proc.stderr
    except subprocess.TimeoutExpired as e:
        partial = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        return None, "%s\ntimed out after %g s" % (partial, timeout)


def stage_results(cmd, json_path, timeout, run=run_command):
    """Runs a stage (cmd writes json_path): its exit code, its output and its result rows ([] when it
    wrote none)."""
    code, output = run(cmd, timeout)
    try:  # within the reader's limits (a stage that wrote a FIFO or 100,000 brackets wrote no rows)
        doc = guard.read_json(json_path)
        rows = doc.get("results", []) if isinstance(doc, dict) else []
    except guard.BadInput:
        rows = []
    return code, output, rows if isinstance(rows, list) else []


def tail(text, lines=30):
    """The last lines of a command's output, indented, for a failure message."""
    return "\n".join("    " + ln for ln in (text or "").splitlines()[-lines:])


def finish(prog, title, summary, rows, path, failures, what_failed):
    """The run's last words: the summary lines under a title, where the rows went, and the exit code
    (1 when anything failed)."""
    print("\n== " + title)
    for line in summary:
        print("  " + line)
    print("%s: %d rows written to %s" % (prog, len(rows), path))
    if failures:
        print("%s: FAIL: %d %s" % (prog, failures, what_failed))
        return 1
    return 0
