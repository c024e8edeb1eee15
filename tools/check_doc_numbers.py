#!/usr/bin/env python3
"""Checks that every measured figure in the chapters equals the results file it comes from.

    check_doc_numbers.py [--docs DIR] [--suggest | --fix] [FILE.md ...]
    check_doc_numbers.py --self-test

The convention: a measured figure in a chapter is followed, on the same line, by an HTML comment
(invisible once rendered) that names where it comes from:

    39.3 TFLOP/s<!-- fig: step04_d64.json variant=flash seq_q=4096 field=tflops -->

  FILE         a results file in docs/results/ (a glob such as step03_paper_d*.json, or a comma list), or
               a path relative to docs/ (plots/anchors.json: rows `attention` and `ceilings`)
  key=value    selects rows: every key must equal the row's field (numbers compare as numbers,
               true/false as booleans; a dotted key reads a nested field: split_ms.qk)
  field=NAME   the field whose value the figure prints (dotted for nested: split_ms.softmax)
  A / B        a ratio of two terms; B names its own FILE or keeps A's, and its own selectors.
               When A and B match several rows, rows are paired on their shape (pass, batch,
               heads, seq_q, seq_k, dim, causal) and agg= picks one ratio.
  agg=min|max|sum  several matching rows (or pairs) reduce to one value
  agg=sums     a ratio whose terms each sum their rows, unpaired: the ratio of the means of as many
               rounds (A B B A runs, one file per round)
  unit=U       KiB MiB GiB KB MB GB (from bytes), s (from ms), GFLOP/s (from TFLOP/s)
  scale=X      multiply by X;  as=pct: multiply by 100 (print it with %);
               as=gain: a ratio r as the gain (r − 1)·100 %

The figure is the last number before the comment (units and ** between them are fine); it may be
written 39.3, 2,700, 1.2e-4 or 6.3·10⁻⁵. It passes when the value, rounded to the decimals
printed, reads the same. Exit 0 when every figure matches, 1 with `file:line: printed X, the
results say Y` for each that does not (or whose source cannot be found), 2 on bad usage.
--suggest prints the value every annotated figure should have, as it would be printed, so that
prose can follow regenerated results mechanically; --fix writes those values into the files (only
the numbers; read the diff: words around a number, such as "faster", are yours to check).
Standard library only.
"""
import glob
import json
import math
import os
import re
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from flashcourse import guard  # noqa: E402

COMMENT = re.compile(r"<!--\s*fig:(.*?)-->")
SUPERSCRIPT = str.maketrans("⁻⁰¹²³⁴⁵⁶⁷⁸⁹", "-0123456789")
NUMBER = re.compile(r"(\d{1,3}(?:,\d{3})+|\d+)(?:\.(\d+))?(?:[eE]([-+]?\d+)|·10([⁻⁰¹²³⁴⁵⁶⁷⁸⁹]+))?([^0-9]{0,20})$")
SHAPE = ("pass", "batch", "heads", "seq_q", "seq_k", "dim", "causal")
UNITS = {"KiB": 1 / 2**10, "MiB": 1 / 2**20, "GiB": 1 / 2**30, "KB": 1e-3, "MB": 1e-6, "GB": 1e-9,
         "s": 1e-3, "GFLOP/s": 1e3}
GLOBAL_KEYS = ("agg", "unit", "scale", "as")


class SpecError(Exception):
    pass


def load_rows(docs, name, cache):
    paths = []
    for part in name.split(","):
        pattern = os.path.join(docs, part) if "/" in part else os.path.join(docs, "results", part)
        found = sorted(glob.glob(pattern))
        if not found:
            raise SpecError("no file matches %s" % os.path.relpath(pattern, docs))
        paths += found
    rows = []
    for path in paths:
        if path not in cache:
            data = guard.read_json(path)  # guard.BadInput (a ValueError) names the file
            if isinstance(data, dict) and isinstance(data.get("results"), list):
                cache[path] = data["results"]
            elif isinstance(data, dict) and isinstance(data.get("attention"), list):  # plots/anchors.json
                ceilings = data.get("ceilings", [])
                cache[path] = data["attention"] + (ceilings if isinstance(ceilings, list) else [])
            else:
                raise SpecError("%s is neither a results file nor the anchors file" % path)
            cache[path] = [r for r in cache[path] if isinstance(r, dict)]
        rows.extend(cache[path])
    return rows


def lookup(row, key):
    value = row
    for part in key.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


def matches(row, key, want):
    got = lookup(row, key)
    if isinstance(got, bool):
        return want.lower() == str(got).lower()
    if isinstance(got, (int, float)):
        try:
            return float(want) == float(got)
        except ValueError:
            return False
    return got is not None and str(got) == want


def parse_spec(text):
    """-> ([(file or None, [(key, value)], field)], {global options})"""
    terms, options, current = [], {}, None
    for token in text.split():
        if token == "/":
            if current is None:
                raise SpecError("'/' with nothing before it")
            terms.append(current)
            current = None
            continue
        if current is None:
            current = {"file": None, "select": [], "field": None}
        if "=" not in token:
            if current["file"] or current["select"]:
                raise SpecError("'%s': a file name must come first in its term" % token)
            current["file"] = token
            continue
        key, value = token.split("=", 1)
        if key in GLOBAL_KEYS:
            options[key] = value
        elif key == "field":
            current["field"] = value
        else:
            current["select"].append((key, value))
    if current is not None:
        terms.append(current)
    if not terms or len(terms) > 2:
        raise SpecError("expected one term or a ratio of two")
    if terms[0]["file"] is None:
        raise SpecError("the first term names no file")
    for t in terms:
        if t["field"] is None:
            raise SpecError("a term has no field=")
    if len(terms) == 2 and terms[1]["file"] is None:
        terms[1]["file"] = terms[0]["file"]
    if options.get("agg", "min") not in ("min", "max", "sum", "sums"):
        raise SpecError("agg must be min, max, sum or sums")
    if options.get("agg") == "sums" and len(terms) != 2:
        raise SpecError("agg=sums is for a ratio of two terms")
    if "unit" in options and options["unit"] not in UNITS:
        raise SpecError("unknown unit %s (known: %s)" % (options["unit"], " ".join(UNITS)))
    return terms, options


def term_rows(docs, term, cache):
    rows = [r for r in load_rows(docs, term["file"], cache) if all(matches(r, k, v) for k, v in term["select"])]
    if not rows:
        raise SpecError("no row of %s has %s" % (term["file"], " ".join("%s=%s" % kv for kv in term["select"])))
    values = []
    for r in rows:
        v = lookup(r, term["field"])
        if v is None:  # not measured in this row (an oom or skipped row; an anchor without it)
            continue
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v):
            raise SpecError("field %s is %r in a row of %s" % (term["field"], v, term["file"]))
        values.append((r, float(v)))
    if not values:
        raise SpecError("field %s is null or absent in every selected row of %s" % (term["field"], term["file"]))
    return values


def reduce(values, options, what):
    if len(values) == 1:
        return values[0]
    if "agg" not in options:
        raise SpecError("%d %s match: add selectors, or agg=min|max" % (len(values), what))
    return {"min": min, "max": max, "sum": sum}[options["agg"]](values)


def evaluate(docs, spec, cache):
    terms, options = parse_spec(spec)
    a = term_rows(docs, terms[0], cache)
    if len(terms) == 1:
        value = reduce([v for _, v in a], options, "rows")
    else:
        b = term_rows(docs, terms[1], cache)
        if options.get("agg") == "sums":  # unpaired: sum over sum
            if len(a) != len(b):
                raise SpecError("agg=sums: %d rows over %d rows, not as many" % (len(a), len(b)))
            pairs = [(sum(v for _, v in a), sum(v for _, v in b))]
        elif len(a) == 1 and len(b) == 1:
            pairs = [(a[0][1], b[0][1])]
        else:
            by_shape = {}
            for r, v in b:
                key = tuple(lookup(r, k) for k in SHAPE)
                if key in by_shape:
                    raise SpecError("the denominator has two rows of one shape: add selectors")
                by_shape[key] = v
            pairs = [(v, by_shape[k]) for r, v in a for k in [tuple(lookup(r, s) for s in SHAPE)] if k in by_shape]
            if not pairs:
                raise SpecError("no row of the numerator has a denominator row of the same shape")
        if any(d == 0 for _, d in pairs):
            raise SpecError("division by 0")
        value = reduce([n / d for n, d in pairs], options, "row pairs")
    value *= UNITS.get(options.get("unit"), 1.0) * float(options.get("scale", 1.0))
    if options.get("as") == "pct":
        value *= 100.0
    elif options.get("as") == "gain":  # a ratio r printed as a gain of (r − 1)·100 %
        value = (value - 1.0) * 100.0
    elif "as" in options:
        raise SpecError("as= takes pct or gain")
    return value


def printed_number(before):
    m = NUMBER.search(before.rstrip())
    if not m:
        return None
    integer, decimals, exp_e, exp_sup = m.group(1), m.group(2) or "", m.group(3), m.group(4)
    exponent = int(exp_e) if exp_e else int(exp_sup.translate(SUPERSCRIPT)) if exp_sup else 0
    text = m.group(0)[: len(m.group(0)) - len(m.group(5))]
    return text, integer, len(decimals), exponent, "e" if exp_e else "sup"


def render(value, integer, decimals, exponent, style):
    """value as the figure was written: same decimals, same power of ten, same grouping."""
    mantissa = value / 10.0 ** exponent
    out = "%.*f" % (decimals, mantissa)
    if "," in integer:
        whole, _, frac = out.partition(".")
        out = "{:,}".format(int(whole)) + ("." + frac if frac else "")
    if exponent:
        return out + ("e%d" % exponent if style == "e" else "·10" + str(exponent).translate(
            str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")))
    return out


def check_file(docs, path, cache, suggest, out, fix=False):
    problems = 0
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().split("\n")
    except UnicodeDecodeError as e:
        raise guard.BadInput("%s: not UTF-8 (byte %d)" % (path, e.start)) from None
    except OSError as e:
        raise guard.BadInput("%s: cannot read (%s)" % (path, e.strerror)) from None
    name = os.path.relpath(path)
    count = 0
    fixed = 0
    for n, line in enumerate(lines, 1):
        # Right to left, so that a fix does not move the comments still to be read.
        for m in reversed(list(COMMENT.finditer(line))):
            count += 1
            before = COMMENT.sub("", line[: m.start()])
            found = printed_number(before)
            if not found:
                out.append("%s:%d: a fig comment with no number before it" % (name, n))
                problems += 1
                continue
            text, integer, decimals, exponent, style = found
            try:
                value = evaluate(docs, m.group(1), cache)
            except (SpecError, OSError, ValueError) as e:
                out.append("%s:%d: %s: %s" % (name, n, text, e))
                problems += 1
                continue
            expected = render(value, integer, decimals, exponent, style)
            shown = text.split("·")[0].split("e")[0].replace(",", "")
            ok = "%.*f" % (decimals, value / 10.0 ** exponent) == shown
            if fix and not ok:
                at = line.rfind(text, 0, m.start())
                line = line[:at] + expected + line[at + len(text):]
                lines[n - 1] = line
                fixed += 1
            elif suggest:
                out.append("%s:%d: %s -> %s%s" % (name, n, text, expected, "" if ok else "   (differs)"))
            elif not ok:
                out.append("%s:%d: printed %s, the results say %s (%.6g)" % (name, n, text, expected, value))
                problems += 1
    if fixed:
        with open(path, "w", encoding="utf-8") as f:
            f.write("\n".join(lines))
        out.append("%s: %d figures rewritten" % (name, fixed))
    return problems, count


def run(docs, files, suggest, quiet=False, fix=False):
    cache, out, problems, count = {}, [], 0, 0
    for path in files:
        p, c = check_file(docs, path, cache, suggest, out, fix)
        problems, count = problems + p, count + c
    if out and not quiet:
        print("\n".join(out))
    if not suggest and not quiet:
        print("check_doc_numbers: %d annotated figures in %d files, %d wrong" % (count, len(files), problems))
    return 1 if problems else 0


def self_test():
    """A right figure passes, a wrong one fails, a missing row fails: the check can fail."""
    with tempfile.TemporaryDirectory() as tmp:
        os.makedirs(os.path.join(tmp, "results"))
        rows = [{"variant": "a", "pass": "fwd", "batch": 1, "heads": 1, "seq_q": n, "seq_k": n, "dim": 64,
                 "causal": False, "median_ms": ms, "extra_bytes": 3 * 2**30} for n, ms in ((1024, 2.0), (2048, 6.5))]
        rows += [dict(r, variant="b", median_ms=r["median_ms"] / 4) for r in rows]
        with open(os.path.join(tmp, "results", "x.json"), "w") as f:
            json.dump({"results": rows}, f)
        cases = [
            ("6.50 ms<!-- fig: x.json variant=a seq_q=2048 field=median_ms -->", 0),
            ("**4.0×**<!-- fig: x.json variant=a field=median_ms / variant=b field=median_ms agg=max -->", 0),
            ("3 GiB<!-- fig: x.json variant=a seq_q=1024 field=extra_bytes unit=GiB -->", 0),
            ("1.3·10⁻³ s<!-- fig: x.json variant=b seq_q=1024 field=median_ms scale=0.001 unit=s agg=max -->", 1),
            ("6.4 ms<!-- fig: x.json variant=a seq_q=2048 field=median_ms -->", 1),
            ("2.0 ms<!-- fig: x.json variant=a field=median_ms -->", 1),
            ("2.0 ms<!-- fig: x.json variant=c field=median_ms -->", 1),
            ("400 %<!-- fig: x.json variant=a seq_q=1024 field=median_ms / variant=b seq_q=1024 field=median_ms as=pct -->", 0),
            ("4.0×<!-- fig: x.json variant=a field=median_ms / variant=b field=median_ms agg=sums -->", 0),
            ("3.0×<!-- fig: x.json variant=a field=median_ms / variant=b field=median_ms agg=sums -->", 1),
            ("8.5×<!-- fig: x.json variant=a field=median_ms / variant=b seq_q=1024 field=median_ms agg=sums -->", 1),
        ]
        failed = 0
        for text, want in cases:
            md = os.path.join(tmp, "t.md")
            with open(md, "w", encoding="utf-8") as f:
                f.write(text + "\n")
            got = run(tmp, [md], False, quiet=True)
            if got != want:
                print("self-test FAILED: %r gave %d, expected %d" % (text, got, want))
                failed += 1
        print("check_doc_numbers self-test: %d of %d cases as expected" % (len(cases) - failed, len(cases)))
        return 1 if failed else 0


def main():
    ap = guard.OneLineParser(description=__doc__.split("\n")[0])
    ap.add_argument("files", nargs="*", help="Markdown files (default: every *.md under --docs, and the README beside it)")
    ap.add_argument("--docs", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "docs"),
                    help="the docs folder (results/ and plots/ are read from it)")
    ap.add_argument("--suggest", action="store_true", help="print the value each annotated figure should have")
    ap.add_argument("--fix", action="store_true", help="write the values the results give into the files")
    ap.add_argument("--self-test", action="store_true", help="check that the checker fails wrong figures")
    args = ap.parse_args()
    if args.self_test:
        return self_test()
    docs = os.path.normpath(args.docs)
    if not os.path.isdir(os.path.join(docs, "results")):
        print("check_doc_numbers: %s has no results/ folder" % docs, file=sys.stderr)
        return 2
    files = args.files or sorted(glob.glob(os.path.join(docs, "**", "*.md"), recursive=True))
    readme = os.path.join(docs, "..", "README.md")  # the repository's front page quotes figures too
    if not args.files and os.path.isfile(readme):
        files.append(os.path.normpath(readme))
    for path in files:
        if not os.path.isfile(path):
            print("check_doc_numbers: no such file: %s" % guard.one_line(path), file=sys.stderr)
            return 2
    return run(docs, files, args.suggest, fix=args.fix)


if __name__ == "__main__":
    sys.exit(guard.run_main("check_doc_numbers", main))
