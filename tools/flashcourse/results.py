"""flashcourse.results — the results file of docs/results_schema.md (`flash-course-results/2`):
a new document's header, the writer (one row per line, NaN and Inf as null, as common/src/results.cpp
writes them), the reader, the check of its fields, and the merge of a stage's rows into a
comparison's file."""
import datetime
import json
import math
import os
import subprocess

from . import guard

SCHEMA = "flash-course-results/2"
# The versions a reader takes: version 2 added heads_kv, driver_bytes and error_vs_plain and dropped
# "values"; committed files of both exist.
READABLE = ("flash-course-results/1", SCHEMA)
# The fields of the header and of each row (docs/results_schema.md).
TOP_FIELDS = ["schema", "stage", "command", "date", "git_commit", "device", "results"]
ROW_FIELDS = [
    "stage", "variant", "pass", "device", "cuda_runtime", "cuda_driver", "git_commit", "batch",
    "heads", "heads_kv", "seq_q", "seq_k", "dim", "dtype", "causal", "status", "median_ms", "tflops",
    "gbps", "peak_bytes", "extra_bytes", "driver_bytes", "reference", "verified", "verification_ok",
    "max_abs_error", "max_rel_error", "rel_error", "error_vs_plain",
]
STATUSES = {"ok", "oom", "skipped", "failed"}
# The fields that say which case a row is: two rows with the same key are the same measurement.
CASE_KEY = ("stage", "variant", "pass", "dtype", "dim", "causal", "batch", "heads", "heads_kv", "seq_q", "seq_k")


# The type of each field a row may hold, where it holds it (docs/results_schema.md): what every
# reader may then rely on (null where a writer had nothing to say; a tool that needs a value checks
# for it). Numbers are finite (guard.read_json refuses others) and never negative.
TEXT, TEXT_OR_NULL, COUNT_OR_NULL, FLAG_OR_NULL, AMOUNT_OR_NULL = range(5)
ROW_TYPES = {
    "stage": TEXT, "variant": TEXT, "status": TEXT, "pass": TEXT_OR_NULL, "dtype": TEXT_OR_NULL, "device": TEXT_OR_NULL,
    "cuda_runtime": TEXT_OR_NULL, "cuda_driver": TEXT_OR_NULL, "git_commit": TEXT_OR_NULL, "reference": TEXT_OR_NULL,
    "note": TEXT_OR_NULL, "batch": COUNT_OR_NULL, "heads": COUNT_OR_NULL, "seq_q": COUNT_OR_NULL,
    "seq_k": COUNT_OR_NULL, "dim": COUNT_OR_NULL, "heads_kv": COUNT_OR_NULL, "causal": FLAG_OR_NULL, "verified": FLAG_OR_NULL, "verification_ok": FLAG_OR_NULL,
    "comparison": FLAG_OR_NULL, "median_ms": AMOUNT_OR_NULL, "tflops": AMOUNT_OR_NULL, "gbps": AMOUNT_OR_NULL,
    "peak_bytes": AMOUNT_OR_NULL, "extra_bytes": AMOUNT_OR_NULL, "driver_bytes": AMOUNT_OR_NULL,
    "max_abs_error": AMOUNT_OR_NULL, "max_rel_error": AMOUNT_OR_NULL, "rel_error": AMOUNT_OR_NULL,
    "error_vs_plain": AMOUNT_OR_NULL,
}


def _type_ok(value, kind):
    if value is None:
        return kind != TEXT
    if kind in (TEXT, TEXT_OR_NULL):
        return isinstance(value, str)
    if kind == FLAG_OR_NULL:
        return isinstance(value, bool)
    if isinstance(value, bool):
        return False
    if kind == COUNT_OR_NULL:
        return isinstance(value, int) and value >= 0
    return isinstance(value, (int, float)) and value >= 0


_KIND_WORDS = {TEXT: "text", TEXT_OR_NULL: "text or null", COUNT_OR_NULL: "a count or null",
               FLAG_OR_NULL: "true, false or null", AMOUNT_OR_NULL: "a number >= 0 or null"}


class ResultsError(guard.BadInput):
    """A results file that is missing, not JSON, or not what the schema says; the text says where."""


def utc_now():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def git_commit(given=""):
    """The commit to record: `given`, else this checkout's HEAD, else "unknown"."""
    if given:
        return given
    try:
        return subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip() or "unknown"
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def new_document(stage, command, commit, device, **extra):
    """A header in the schema's order; the rows go under "results" (added last, by write_results)."""
    doc = {"schema": SCHEMA, "stage": stage, "command": command, "date": utc_now(), "git_commit": commit,
           "device": device}
    doc.update(extra)
    return doc


def finite_or_none(v):
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def json_safe(obj):
    """NaN and Inf as null, as the C++ writer writes them (JSON has neither)."""
    if isinstance(obj, dict):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    return finite_or_none(obj)


def write_results(path, doc, rows=None):
    """One row per line, as the stages write them (diffs of committed files stay readable); a list in
    the header one item per line. The rows are doc["results"] unless given."""
    rows = doc["results"] if rows is None else rows
    parts = []
    for k, v in doc.items():
        if k == "results":
            continue
        if isinstance(v, list) and v:
            parts.append(" %s: [\n%s\n ]" % (json.dumps(k), ",\n".join("  " + json.dumps(json_safe(x)) for x in v)))
        else:
            parts.append(" %s: %s" % (json.dumps(k), json.dumps(json_safe(v))))
    # Written beside, then renamed: a run stopped while writing leaves the previous whole file.
    with open(path + ".partial", "w") as f:
        f.write("{\n" + ",\n".join(parts) + ',\n "results": [\n' +
                ",\n".join("  " + json.dumps(json_safe(r)) for r in rows) + "\n ]\n}\n")
    os.replace(path + ".partial", path)


def read_results(path, schemas=READABLE):
    """The document of a results file of one of `schemas` (ResultsError, naming the file, when it is
    missing, not a regular file, unreadable, not JSON or past guard.read_json's limits, of another
    schema or without a list of rows of objects)."""
    try:
        doc = guard.read_json(path)
    except guard.BadInput as e:
        text = str(e)
        if text.endswith(": no such file"):
            text += " (the results file was not written)"
        raise ResultsError(text) from None
    where = guard.one_line(path)
    if not isinstance(doc, dict) or doc.get("schema") not in schemas:
        found = doc.get("schema") if isinstance(doc, dict) else type(doc).__name__
        raise ResultsError("%s: not a results file (schema %s, expected one of %r)" % (where, guard.brief(found), tuple(schemas)))
    rows = doc.get("results")
    if not isinstance(rows, list):
        raise ResultsError("%s: 'results' must be a list of rows" % where)
    device = doc.get("device")
    if not (device is None or isinstance(device, str) or isinstance(device, dict) and _type_ok(device.get("name"), TEXT_OR_NULL)):
        raise ResultsError("%s: 'device' should be an object with a text 'name', got %s" % (where, guard.brief(device)))
    for n, row in enumerate(rows):
        if not isinstance(row, dict):
            raise ResultsError("%s: results[%d] is %s, not an object" % (where, n, guard.brief(row)))
        for key, kind in ROW_TYPES.items():
            if key in row and not _type_ok(row[key], kind):
                raise ResultsError("%s: results[%d]: %r should be %s, got %s"
                                   % (where, n, key, _KIND_WORDS[kind], guard.brief(row[key])))
    return doc


def _number(row, key):
    v = row[key]
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0


def check_document(doc, path="results", stage=None):
    """What a stage's results file promises (ResultsError naming the file, row and field otherwise):
    the header's and every row's fields, known statuses; with `stage`, the file is that stage's and
    each of its rows ran ok and passed its verification, except the rows marked "comparison": true
    (measured beside the stage, never verified). Returns the number of rows."""
    missing = [k for k in TOP_FIELDS if k not in doc]
    if missing:
        raise ResultsError("%s: missing top-level fields %s" % (path, missing))
    rows = doc["results"]
    if not isinstance(rows, list) or not rows:
        raise ResultsError("%s: 'results' is empty" % path)
    if stage is not None and doc["stage"] != stage:
        raise ResultsError("%s: stage %r, expected %r" % (path, doc["stage"], stage))
    ours = 0
    for n, row in enumerate(rows):
        where = "%s: results[%d] (%s %s)" % (path, n, guard.brief(row.get("stage"), 20), guard.brief(row.get("variant"), 40))
        missing = [k for k in ROW_FIELDS if k not in row]
        if missing:
            raise ResultsError("%s: missing fields %s" % (where, missing))
        if not isinstance(row["status"], str) or row["status"] not in STATUSES:
            raise ResultsError("%s: status %r is not one of %s" % (where, row["status"], sorted(STATUSES)))
        if row.get("comparison") is True and row["verified"] is not False:
            raise ResultsError("%s: a comparison row (measured, never verified) says verified %r" % (where, row["verified"]))
        if stage is not None and row["stage"] != stage and row.get("comparison") is False:
            raise ResultsError("%s: a row of another stage than %s not marked as a comparison" % (where, stage))
        if stage is None or row["stage"] != stage or row.get("comparison") is True:
            continue  # another stage's row, or a comparison the stage measures but does not verify
        ours += 1
        if row["status"] != "ok":
            raise ResultsError("%s: status %r (%s), expected ok" % (where, row["status"], row.get("note", "")))
        if row["verified"] is not True or row["verification_ok"] is not True:
            raise ResultsError("%s: verified %r, verification_ok %r; expected both true"
                               % (where, row["verified"], row["verification_ok"]))
        plain = row["error_vs_plain"]  # null where no plain implementation ran (backward rows)
        if plain is not None and not _number(row, "error_vs_plain"):
            raise ResultsError("%s: error_vs_plain = %r is neither null nor a finite non-negative number" % (where, plain))
        for key in ("median_ms", "max_abs_error", "max_rel_error", "rel_error", "peak_bytes", "extra_bytes"):
            if not _number(row, key):
                raise ResultsError("%s: %s = %s is not a finite non-negative number" % (where, key, guard.brief(row[key])))
        if row["pass"] == "fwd" and plain is None and row["max_abs_error"] > 0:
            raise ResultsError("%s: a forward row with an error but no error_vs_plain" % where)
        if not (0 <= row["extra_bytes"] <= row["peak_bytes"]):
            raise ResultsError("%s: extra_bytes %r and peak_bytes %r disagree" % (where, row["extra_bytes"], row["peak_bytes"]))
    if stage is not None and ours == 0:
        raise ResultsError("%s: no result row of stage %s" % (path, stage))
    return len(rows)


def case_key(row):
    return tuple(row.get(k) for k in CASE_KEY)


def merge_stage_rows(out_rows, stage_doc, seen, variant=None):
    """Appends the rows of a stage's results document to out_rows unchanged, except that a row of a
    case already merged (seen: case keys) is dropped, e.g. the previous stage's comparison row that
    every run of the stage writes again. Returns the row whose output the stage's --save wrote: its
    first ok row of its own stage (of `variant` when given), or None when none ran."""
    own_stage = stage_doc.get("stage")
    saved = None
    for row in stage_doc.get("results", []):
        if not isinstance(row, dict):
            continue
        mine = row.get("stage") == own_stage and (variant is None or row.get("variant") == variant)
        if saved is None and mine and row.get("status") == "ok":
            saved = row
        k = case_key(row)
        if k in seen and row is not saved:
            continue
        seen.add(k)
        out_rows.append(row)
    return saved
