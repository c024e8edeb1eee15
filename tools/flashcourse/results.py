"""flashcourse.results — the results file of docs/results_schema.md (`flash-course-results/2`):
a new document's header, the writer (one row per line, NaN and Inf as null, as common/src/results.cpp
writes them), the reader, the check of its fields, and the merge of a stage's rows into a
comparison's file."""
import datetime
import json
import math
import os
import subprocess

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


class ResultsError(ValueError):
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
    missing, unreadable, not JSON, of another schema or without a list of rows)."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        raise ResultsError("%s: no such file (the results file was not written)" % path) from None
    except (OSError, UnicodeDecodeError) as e:
        raise ResultsError("%s: cannot read (%s)" % (path, e.__class__.__name__)) from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise ResultsError("%s: not JSON (line %d, column %d: %s)" % (path, e.lineno, e.colno, e.msg)) from None
    if not isinstance(doc, dict) or doc.get("schema") not in schemas:
        found = doc.get("schema") if isinstance(doc, dict) else type(doc).__name__
        raise ResultsError("%s: not a results file (schema %r, expected one of %r)" % (path, found, tuple(schemas)))
    if not isinstance(doc.get("results"), list):
        raise ResultsError("%s: 'results' must be a list of rows" % path)
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
        where = "%s: results[%d] (%s %s)" % (path, n, row.get("stage"), row.get("variant"))
        missing = [k for k in ROW_FIELDS if k not in row]
        if missing:
            raise ResultsError("%s: missing fields %s" % (where, missing))
        if row["status"] not in STATUSES:
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
        if row["pass"] == "fwd" and plain is None and row["max_abs_error"] > 0:
            raise ResultsError("%s: a forward row with an error but no error_vs_plain" % where)
        for key in ("median_ms", "max_abs_error", "max_rel_error", "rel_error"):
            if not _number(row, key):
                raise ResultsError("%s: %s = %r is not a finite non-negative number" % (where, key, row[key]))
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
