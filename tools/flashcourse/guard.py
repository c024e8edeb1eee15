"""flashcourse.guard — where every tool's bad input becomes one line on stderr and exit 2: JSON read
with limits (a regular file, its size, its nesting, its integers, finite numbers only), numbers
checked against a range, text made safe for one line of a terminal and for a matplotlib label, an
argument parser whose errors are one line, and the handler each tool's main runs under, which turns
what no check foresaw into one line too (never a traceback)."""
import argparse
import json
import math
import os
import re
import stat
import sys

# A results file of the course is a few hundred kB (the largest committed one: under 1 MB); a
# timeline a few MB. Anything past these limits is not one of them, and reading it would only cost.
MAX_JSON_BYTES = 64 << 20
MAX_DEPTH = 32  # the schema nests 4 deep (document, results, row, values); json's own limit is ~1000
MAX_INT = 2 ** 64  # the C++ side writes 64-bit integers at most; a 400-digit one counts nothing
EXIT_BAD_INPUT = 2

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_BRACKETS = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]', re.S)


class BadInput(ValueError):
    """Bad usage or bad input: its text is the one line the user sees (exit 2)."""


def one_line(text):
    """`text` on one line: newlines and other control bytes as escapes (\\n, \\x1b), never raw."""
    text = str(text)
    return _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)


def label(text, limit=80):
    """`text` from an input file as a figure's label: one line, at most `limit` characters, and `$`
    escaped so that matplotlib draws it as it is instead of parsing it as mathtext."""
    text = one_line(text)
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    return text.replace("$", r"\$")


def _depth(text):
    """The deepest nesting of arrays and objects in JSON text (brackets inside strings ignored)."""
    depth = deepest = 0
    for m in _BRACKETS.finditer(text):
        c = m.group()
        if c in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif c in "]}":
            depth -= 1
    return deepest


def _bounded_int(text):
    if len(text.lstrip("-")) > 20 or abs(int(text)) > MAX_INT:
        raise BadInput("an integer of %d digits (at most 2^64 is read)" % len(text.lstrip("-")))
    return int(text)


def _finite_float(text):
    value = float(text)
    if not math.isfinite(value):
        raise BadInput("a number too large for a double: %s" % one_line(text[:40]))
    return value


def _no_constant(name):
    raise BadInput("%s is not JSON (write null)" % name)


def read_json(path, max_bytes=MAX_JSON_BYTES, max_depth=MAX_DEPTH):
    """The JSON document in file `path` (BadInput naming the file otherwise): a regular file of at
    most max_bytes, UTF-8, nested at most max_depth deep, its integers at most 2^64 in size, its numbers
    finite (NaN, Infinity and 1e400 are refused)."""
    where = one_line(path)
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise BadInput("%s: no such file" % where) from None
    except OSError as e:
        raise BadInput("%s: cannot read (%s)" % (where, e.strerror or e.__class__.__name__)) from None
    if not stat.S_ISREG(info.st_mode):
        raise BadInput("%s: not a regular file" % where)
    try:
        with open(path, "rb") as f:
            data = f.read(max_bytes + 1)
    except OSError as e:
        raise BadInput("%s: cannot read (%s)" % (where, e.strerror or e.__class__.__name__)) from None
    if len(data) > max_bytes:
        raise BadInput("%s: larger than %d MiB, not a file of the course" % (where, max_bytes >> 20))
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise BadInput("%s: not UTF-8 (byte %d)" % (where, e.start)) from None
    if _depth(text) > max_depth:
        raise BadInput("%s: nested more than %d deep, not a file of the course" % (where, max_depth))
    try:
        return json.loads(text, parse_int=_bounded_int, parse_float=_finite_float, parse_constant=_no_constant)
    except BadInput as e:
        raise BadInput("%s: %s" % (where, e)) from None
    except json.JSONDecodeError as e:
        raise BadInput("%s: not JSON (line %d, column %d: %s)" % (where, e.lineno, e.colno, e.msg)) from None
    except (ValueError, RecursionError) as e:
        raise BadInput("%s: not JSON (%s)" % (where, one_line(e))) from None


def number(value, where, lo=-math.inf, hi=math.inf, integer=False):
    """`value` if it is a number (an integer with `integer`; never a bool) within [lo, hi]; BadInput
    saying `where` otherwise."""
    kinds = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds):
        raise BadInput("%s should be %s, got %s" % (where, "an integer" if integer else "a number", brief(value)))
    if not (lo <= value <= hi):
        raise BadInput("%s = %s is outside [%g, %g]" % (where, brief(value), lo, hi))
    return value


def brief(value, limit=60):
    """A value from an input file, for a message: its repr on one line, cut to `limit` characters."""
    text = one_line(repr(value))
    return text if len(text) <= limit else text[: limit - 3] + "..."


class OneLineParser(argparse.ArgumentParser):
    """argparse whose errors are one line (argparse prints its usage too): BadInput, exit 2."""

    def error(self, message):
        raise BadInput(message + " (see --help)")


def run_main(prog, main, *args):
    """main(*args)'s exit code, with what escapes it turned into one line on stderr: BadInput (a
    ResultsError is one) and an unexpected exception exit 2, since what a tool is given is the
    likeliest cause (with FA_TRACEBACK set in the environment, an unexpected one is raised as it
    is, traceback and all); Ctrl-C exits 130."""
    try:
        return main(*args)
    except SystemExit as e:  # a tool's own `raise SystemExit("text")`: one line too
        if isinstance(e.code, str):
            print("%s: error: %s" % (prog, one_line(e.code)), file=sys.stderr)
            return EXIT_BAD_INPUT
        raise
    except KeyboardInterrupt:
        print("%s: interrupted" % prog, file=sys.stderr)
        return 130
    except BadInput as e:
        print("%s: error: %s" % (prog, one_line(e)), file=sys.stderr)
        return EXIT_BAD_INPUT
    except BrokenPipeError:
        return 1  # the reader of stdout went away (e.g. `| head`): nothing left to say it to
    except (Exception, RecursionError, MemoryError) as e:  # noqa: B902 — the last line of defence
        if os.environ.get("FA_TRACEBACK"):
            raise  # for whoever works on the tool: where it happened
        print("%s: error: unexpected %s (%s); the input is the likely cause (FA_TRACEBACK=1 shows where)"
              % (prog, e.__class__.__name__, brief(str(e), 200)), file=sys.stderr)
        return EXIT_BAD_INPUT
