#!/usr/bin/env python3
"""plot_results.py — turn the stages' results files into the course's figures.

    plot_results.py RESULTS.json [MORE.json | DIR ...] --out DIR [--prefix NAME] [--device TEXT]
    plot_results.py RESULTS.json [MORE.json | DIR ...] --list      (a Markdown table of the files)

A DIR argument stands for every *.json file in it (this is what `cmake --build build --target
plots` passes: the folder the tour writes its results into). Four PNG figures come out per device,
and the path of each is printed on its own line:

    PREFIX_memory.png       measured memory against N (extra and peak bytes), log-log, with
                            dashed guides of slope N and N^2: the chart the course is about
    PREFIX_time.png         median time against N, log-log, with an N^2 guide
    PREFIX_tflops.png       TFLOP/s against N, one panel per (pass, dtype, D, causal), with
                            PyTorch's SDPA backends measured in the results given (rows of stage
                            "anchor", tools/compare_pytorch.py) as dashed lines across N, and the
                            H100 anchors of anchors.json as horizontal lines where no such rows are
    PREFIX_progression.png  stage by stage at one common shape: time (with the gain over the bar
                            before) and TFLOP/s as bars on linear axes from 0, extra memory as
                            points on a log axis; a stage's ladder of variants named
                            v1_..., v2_, ... is shown rung by rung, then the stage's own variant

One figure shows one device. The tour's folder holds CPU results (stages 01, 02, and stage 03's
CPU comparison row) beside GPU ones: each device then gets its own set of four, named
PREFIX_<device>_memory.png and so on (e.g. results_h100-80gb-hbm3_time.png, results_intel-xeon_time.png).
--device TEXT keeps only the rows whose device contains TEXT (case-insensitive) and names the
figures PREFIX_*.png; the rows left out are reported.

What is a line: rows of the same device, stage, variant, pass, dtype, D, causal and shape, where
the shape is decided per results file and per variant from all of its rows, whatever their status
(so a skipped row never moves a row to another line): a sweep in which B changes while B*Nq stays
fixed (the FlashAttention papers' benchmarks, stage 06's --paper-shapes, step03_paper_*.json) is
a fixed-token sweep, "B·N = 16k tokens", said on the N axis (or in the legend when lines differ);
anything else is a line per B·H. Two different shapes never share a line.

Rows of stage "anchor" (PyTorch's backends: variants sdpa_flash, sdpa_cudnn, sdpa_efficient,
sdpa_math; and FlashAttention-4, fa4) are references, not a course stage: they are drawn only in
the TFLOP/s figure, each backend a dashed grey line with markers across N ("PyTorch FA2
(sdpa_flash)") in the panel of its pass, dtype, D and causal flag (on the course stages' panels; a
device with anchor rows only gets the anchors' own panels), with their shape in the label when it
is not the stages'; and in the
stage-by-stage figure as horizontal lines at exactly its shape. They never make a bar, a ladder
rung or a line of the memory and time figures. Where a panel has such rows, anchors.json's
attention lines are left out of it (its matmul ceilings stay); anchor rows that no panel shows are
reported in a note.

Only ok rows are data. An oom row is a marker, an x on the top edge labelled OOM, because where a
stage runs out of memory is part of the lesson; skipped and failed rows are not drawn. A measured
0 bytes cannot sit on a log axis: it is a triangle on the bottom edge. When the same case is in
two files, the row from the stage's own run is drawn (else the first file's).

Every file named is accounted for: a file of which some ok rows are not drawn (the same case drawn
from another file, another device than --device), or of which nothing is drawn, gets one note line
on stderr saying why. Stage 06's deterministic backward (schema 1: variant "flash" with
values.deterministic; schema 2: "flash-deterministic") is its own line, "flash-deterministic".

Exit codes: 0 figures written; 2 bad usage or bad input (missing file, not JSON or past the
reader's limits, not a results file, a value no log axis can hold, more lines or panels than a
figure can show, --device matching no row), with one line on stderr. Names from the files are drawn
as written: a `$` starts no mathtext, control bytes are shown escaped. Needs only the standard library and
matplotlib.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import sys
from collections import Counter, OrderedDict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
from flashcourse import guard  # noqa: E402  (one-line errors; text safe for a label)
from flashcourse.results import READABLE as SCHEMAS, ResultsError, read_results  # noqa: E402

# SCHEMAS: version 2 (docs/results_schema.md) added heads_kv, driver_bytes and error_vs_plain and
# dropped "values"; the fields read here are in both.
ANCHORS_SCHEMA = "flash-course-anchors/1"
STATUSES = ("ok", "oom", "skipped", "failed")
PROG = "plot_results.py"
MAX_PANEL_LEGEND = 7  # more lines than this in a panel: one legend for the figure, at its right
LADDER = re.compile(r"^v(\d+)_")  # a rung of a stage's ladder of variants: v1_algorithm1, v2_...
ANCHOR_STAGE = "anchor"  # PyTorch's backends, measured by tools/compare_pytorch.py: not a course stage
# How each anchor variant is named and drawn (grey, dashed, its own marker); others: "PyTorch".
ANCHOR_NAMES = {"sdpa_flash": "PyTorch FA2", "sdpa_cudnn": "cuDNN", "sdpa_efficient": "PyTorch mem-efficient",
                "sdpa_math": "PyTorch math", "fa4": "FlashAttention-4"}
ANCHOR_STYLE = {"sdpa_flash": ("0.0", "s"), "sdpa_cudnn": ("0.3", "D"), "sdpa_efficient": ("0.5", "^"),
                "sdpa_math": ("0.65", "v"), "fa4": ("0.15", "P")}

# Every row must carry these; the C++ writer (common/src/results.cpp) always does.
REQUIRED = {
    "stage": str, "variant": str, "pass": str, "batch": int, "heads": int, "seq_q": int,
    "seq_k": int, "dim": int, "dtype": str, "causal": bool, "status": str,
}
NUMERIC_OPTIONAL = ("median_ms", "tflops", "gbps", "peak_bytes", "extra_bytes")
# What a log axis of these figures can hold: counts up to 2^40, and measured values of 0 or between
# 1e-12 and 1e18 (an axis reaches 25 times its largest value and an eighth of its smallest; float64
# holds both ends, and no run of the course measures past them: an exabyte, a year is 3e10 ms).
MAX_COUNT = 2 ** 40
VALUE_RANGE = (1e-12, 1e18)
MAX_TEXT = 200  # characters in a stage, variant, dtype, pass or device name: one label's worth
# What one device's set of figures can show: lines (the legend of a figure of 400 lines already
# fills a page) and TFLOP/s panels (pass, dtype, D, causal: two per row of the figure).
MAX_LINES = 400
MAX_PANELS = 40

BadInput = guard.BadInput  # bad usage or bad input: one line on stderr, exit 2


# ------------------------------------------------------------------------------------------------
# Reading and checking the input


def canonical_dtype(name: str) -> str:
    n = name.strip().lower()
    if n in ("float32", "fp32", "f32", "float"):
        return "float32"
    if n in ("bf16", "bfloat16"):
        return "bf16"
    if n in ("fp16", "float16", "half", "f16"):
        return "fp16"
    if n in ("tf32",):
        return "tf32"
    return n


def expand_inputs(args: list[str]) -> list[Path]:
    files: list[Path] = []
    for a in args:
        p = Path(a)
        if p.is_dir():
            found = sorted(q for q in p.glob("*.json") if q.is_file())
            if not found:
                raise BadInput(f"{a}: no *.json results files in this folder (run the tour first)")
            files.extend(found)
        elif p.is_file():
            files.append(p)
        elif p.exists():
            raise BadInput(f"{a}: not a regular file")
        elif a.endswith(".json"):
            raise BadInput(f"{a}: no such file")
        else:
            raise BadInput(f"{a}: no such file or folder (write results with a stage's --json, "
                           "or run the tour, first)")
    return files


def variant_of(row: dict) -> str:
    """The variant's name, version 2's spelling: version 1 wrote stage 06's deterministic backward
    as "flash" with values.deterministic set; version 2 names it "flash-deterministic"."""
    v = row["variant"]
    values = row.get("values")
    if v == "flash" and isinstance(values, dict) and values.get("deterministic"):
        return "flash-deterministic"
    return v


def load_results(path: Path) -> dict:
    try:
        doc = read_results(path, SCHEMAS)  # the course's reader (tools/flashcourse/results.py)
    except ResultsError as e:
        raise BadInput(str(e)) from None
    rows = doc["results"]
    device = doc.get("device") if isinstance(doc.get("device"), dict) else {}
    for i, row in enumerate(rows):
        where = f"{path}: results[{i}]"
        if not isinstance(row, dict):
            raise BadInput(f"{where}: not an object")
        for key, kind in REQUIRED.items():
            if key not in row:
                raise BadInput(f"{where}: missing {key!r}")
            value = row[key]
            ok = isinstance(value, kind) and not (kind is int and isinstance(value, bool))
            if not ok:
                raise BadInput(f"{where}: {key!r} should be {kind.__name__}, got {value!r}")
        if row["status"] not in STATUSES:
            raise BadInput(f"{where}: status {row['status']!r} is not one of {', '.join(STATUSES)}")
        for key in ("batch", "heads", "seq_q", "seq_k", "dim"):
            if row[key] < 1:
                raise BadInput(f"{where}: {key!r} must be at least 1, got {row[key]}")
            if row[key] > MAX_COUNT:
                raise BadInput(f"{where}: {key!r} = {row[key]} is past what a figure can draw (2^40)")
        for key in ("stage", "variant", "pass", "dtype"):
            if len(row[key]) > MAX_TEXT:
                raise BadInput(f"{where}: {key!r} is {len(row[key])} characters long (at most {MAX_TEXT})")
            row[key] = guard.one_line(row[key])  # drawn as it is: no control byte reaches a label
        for key in NUMERIC_OPTIONAL:
            v = row.get(key)
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))):
                raise BadInput(f"{where}: {key!r} should be a number or null, got {guard.brief(v)}")
            if v is not None and v != 0 and not VALUE_RANGE[0] <= abs(v) <= VALUE_RANGE[1]:
                raise BadInput(f"{where}: {key!r} = {v:g} is outside what a figure can draw (0, or "
                               f"{VALUE_RANGE[0]:g} to {VALUE_RANGE[1]:g})")
        if row["status"] == "ok" and not _positive(row.get("median_ms")):
            raise BadInput(f"{where}: an ok row needs a positive 'median_ms'")
        row["_dtype"] = canonical_dtype(row["dtype"])
        row["_variant"] = variant_of(row)
        name = row.get("device") or device.get("name") or "unknown device"
        if not isinstance(name, str) or len(name) > MAX_TEXT:
            raise BadInput(f"{where}: the device should be a name of at most {MAX_TEXT} characters, got {guard.brief(name)}")
        row["_device"] = guard.one_line(name)
        row["_file"] = path
        row["_file_stage"] = doc.get("stage")
    doc["_path"] = path
    return doc


def load_anchors(path: Path | None, explicit: bool) -> dict | None:
    if path is None:
        return None
    if not path.is_file():
        if explicit:
            raise BadInput(f"{path}: no such anchors file")
        print(f"{PROG}: note: {path} not found, drawing no anchors", file=sys.stderr)
        return None
    try:
        doc = guard.read_json(path)
    except BadInput as e:
        raise BadInput(f"not a readable anchors JSON file: {e}") from None
    if not isinstance(doc, dict) or doc.get("schema") != ANCHORS_SCHEMA:
        raise BadInput(f"{path}: not an anchors file (expected schema {ANCHORS_SCHEMA!r})")
    return doc


def _positive(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0


def _finite_nonneg(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0


# ------------------------------------------------------------------------------------------------
# Lines: which rows belong together


def _nq(r: dict) -> int:
    return 0 if r["seq_q"] == r["seq_k"] else r["seq_q"]  # 0: square (Nq = Nk, the sweep's N)


def assign_shapes(docs: list[dict]) -> None:
    """Set each row's "_shape": (1, B·Nq, H, label) for a fixed-token sweep, else (0, B·H, 0,
    label). A sweep is the rows of one file with the same device, stage, variant, pass, dtype, D,
    causal, H and Nq-or-square, of every status: it is fixed-token when B takes two or more values,
    N two or more, and B·Nq one. Statuses play no part, so a skipped row cannot move another row
    to a different line."""
    for d in docs:
        sweeps: "OrderedDict[tuple, list]" = OrderedDict()
        for r in d["results"]:
            k = (r["_device"], r["stage"], r["_variant"], r["pass"], r["_dtype"], r["dim"],
                 r["causal"], r["heads"], _nq(r))
            sweeps.setdefault(k, []).append(r)
        for rs in sweeps.values():
            tokens = {r["batch"] * r["seq_q"] for r in rs}
            fixed = (len({r["batch"] for r in rs}) > 1 and len({r["seq_k"] for r in rs}) > 1
                     and len(tokens) == 1)
            for r in rs:
                if fixed:
                    t = r["batch"] * r["seq_q"]
                    r["_shape"] = (1, t, r["heads"], f"B·N = {fmt_n(t)} tokens, H = {r['heads']}")
                else:
                    bh = r["batch"] * r["heads"]
                    r["_shape"] = (0, bh, 0, f"B·H = {bh}")


def group_key(r: dict) -> tuple:
    """(device, stage, variant, pass, dtype, D, causal, shape, Nq or 0): one line of a figure."""
    return (r["_device"], r["stage"], r["_variant"], r["pass"], r["_dtype"], r["dim"], r["causal"],
            r["_shape"], _nq(r))


def describe(r: dict) -> str:
    return f"{r['stage']} {r['_variant']} {r['pass']}"


class Selection:
    """What is drawn: per device, the ok rows (one per line and N) and the oom markers; and per
    file, why any of its rows are not drawn."""

    def __init__(self, docs: list[dict], device: str | None = None):
        self.docs = docs
        assign_shapes(docs)
        all_rows = [r for d in docs for r in d["results"]]
        devices = list(OrderedDict.fromkeys(r["_device"] for r in all_rows))
        if device is not None:
            chosen = [x for x in devices if device.lower() in x.lower()]
            if not chosen:
                raise BadInput(f"--device {device!r}: no row of such a device (devices here: "
                               f"{', '.join(devices) or 'none'})")
        else:
            chosen = devices
        self.device_filter = device
        fate: dict = {}  # id(row) -> ("drawn"|"oom"|"status"|"device"|"duplicate", detail)
        ok_kept: "OrderedDict[tuple, dict]" = OrderedDict()
        oom_kept: "OrderedDict[tuple, dict]" = OrderedDict()
        for r in all_rows:
            if r["_device"] not in chosen:
                fate[id(r)] = ("device", r["_device"])
            elif r["status"] in ("skipped", "failed"):
                fate[id(r)] = ("status", r["status"])
            elif r["status"] == "ok":
                k = group_key(r) + (r["seq_k"],)
                old = ok_kept.get(k)
                if old is None:
                    ok_kept[k] = r
                elif old["_file_stage"] != old["stage"] and r["_file_stage"] == r["stage"]:
                    fate[id(old)] = ("duplicate", r)   # the stage's own run wins
                    ok_kept[k] = r
                else:
                    fate[id(r)] = ("duplicate", old)
        for r in all_rows:
            if r["status"] == "oom" and id(r) not in fate:
                k = group_key(r) + (r["seq_k"],)
                if k in ok_kept:
                    fate[id(r)] = ("duplicate", ok_kept[k])  # measured ok elsewhere: no marker
                elif k in oom_kept:
                    fate[id(r)] = ("duplicate", oom_kept[k])
                else:
                    oom_kept[k] = r
                    fate[id(r)] = ("oom", None)
        for r in ok_kept.values():
            fate[id(r)] = ("drawn", None)
        self.fate = fate
        drawn = [r for r in all_rows if fate[id(r)][0] in ("drawn", "oom")]
        self.sets: "OrderedDict[str, list[dict]]" = OrderedDict()
        for r in drawn:
            self.sets.setdefault(r["_device"], []).append(r)
        if not self.sets:  # nothing ran (a GPU stage without a GPU): one set of empty figures
            self.sets[chosen[0] if chosen else "unknown device"] = []

    def notes(self) -> list[str]:
        """One line per file of which something is not drawn for a reason other than its status."""
        out = []
        for d in self.docs:
            rows = d["results"]
            fates = [self.fate[id(r)] for r in rows]
            name = d["_path"].name
            n_drawn = sum(f[0] in ("drawn", "oom") for f in fates)
            dups = [(r, f[1]) for r, f in zip(rows, fates) if f[0] == "duplicate"]
            other = Counter(f[1] for f in fates if f[0] == "device")
            status = Counter(f[1] for f in fates if f[0] == "status")
            if dups:
                where: "OrderedDict[tuple, list]" = OrderedDict()
                for r, kept in dups:
                    where.setdefault((describe(r), kept["_file"].name), []).append(r["seq_k"])
                parts = [f"{what} at N={','.join(fmt_n(n) for n in sorted(set(ns)))} is drawn from {src}"
                         for (what, src), ns in where.items()]
                out.append(f"{name}: {len(dups)} rows not drawn, the same case is in another file: "
                           + "; ".join(parts))
            if other:
                out.append(f"{name}: {sum(other.values())} rows not drawn, their device is not "
                           f"--device {self.device_filter!r}: "
                           + ", ".join(f"{n} on {short_device(dv)}" for dv, n in other.items()))
            if n_drawn == 0 and not dups and not other:
                why = ", ".join(f"{n} {s}" for s, n in status.items()) or "no rows"
                note = next((r.get("note") for r in rows if r.get("note")), "")
                out.append(f"{name}: nothing drawn: {why}" + (f" ({note})" if note else ""))
        return out


def groups_of(rows: list[dict]) -> "OrderedDict[tuple, list[dict]]":
    out: "OrderedDict[tuple, list[dict]]" = OrderedDict()
    for r in sorted(rows, key=lambda r: (group_key(r)[1:], group_key(r)[0], r["seq_k"])):
        out.setdefault(group_key(r), []).append(r)
    return out


def common_shape_text(keys: list[tuple]) -> str | None:
    """The shape shared by every line, for the N axis; None when the lines differ."""
    shapes = {k[7] for k in keys}
    return next(iter(shapes))[3] if len(shapes) == 1 else None


def labels_for(keys: list[tuple]) -> dict:
    """'01 eigen' plus only the descriptors that differ between the lines of one figure; a
    shape that all lines share is said on the N axis instead."""
    fields = list(zip(*keys)) if keys else []
    varies = [len(set(f)) > 1 for f in fields]

    def label(k: tuple) -> str:
        device, stage, variant, pss, dtype, dim, causal, shape, nq = k
        parts = [f"{stage} {variant}"]
        if varies[3] and pss != "fwd":
            parts.append(pss)
        if varies[4]:
            parts.append(dtype)
        if varies[5]:
            parts.append(f"D={dim}")
        if varies[6]:
            parts.append("causal" if causal else "non-causal")
        if varies[7]:
            parts.append(shape[3].replace(" = ", "="))  # "B·H=8" or "B·N=16k tokens, H=32"
        if varies[8] and nq != 0:
            parts.append(f"Nq={nq}")
        if varies[0]:
            parts.append(f"[{short_device(device)}]")
        return " ".join(parts)

    return {k: label(k) for k in keys}


def short_device(name: str) -> str:
    for junk in ("NVIDIA ", "(R)", "(TM)", " CPU", " Processor"):
        name = name.replace(junk, "")
    return " ".join(name.split())[:32]


def device_slug(name: str) -> str:
    """'NVIDIA H100 80GB HBM3' -> 'h100-80gb-hbm3', for file names."""
    return re.sub(r"[^a-z0-9]+", "-", short_device(name).lower()).strip("-") or "device"


def is_anchor(r: dict) -> bool:
    return r["stage"] == ANCHOR_STAGE


def anchor_name(variant: str) -> str:
    """'PyTorch FA2 (sdpa_flash)'."""
    return f"{ANCHOR_NAMES.get(variant, 'PyTorch')} ({variant})"


def ladder_rung(variant: str) -> int | None:
    m = LADDER.match(variant)
    return int(m.group(1)) if m else None


# ------------------------------------------------------------------------------------------------
# Figures


class Plotter:
    """The four figures of one device."""

    def __init__(self, rows: list[dict], device: str, docs: list[dict], anchors: dict | None,
                 out: Path, prefix: str, at_seq: int | None):
        import matplotlib

        matplotlib.use("Agg")
        # Names from the results files are drawn as written: a `$` in one is no mathtext.
        matplotlib.rcParams["text.parse_math"] = False
        import matplotlib.pyplot as plt
        from matplotlib import ticker, transforms

        self.plt, self.ticker, self.transforms = plt, ticker, transforms
        self.device, self.anchors, self.out, self.prefix, self.at_seq = device, anchors, out, prefix, at_seq
        # The course's stages are the data; PyTorch's anchor rows only references (the TFLOP/s
        # panels and the stage-by-stage TFLOP/s bars).
        self.rows = [r for r in rows if not is_anchor(r)]
        self.anchor_rows = [r for r in rows if is_anchor(r) and r["status"] == "ok"]
        self.anchor_drawn: set = set()  # id() of the anchor rows some figure shows
        used = {r["_file"] for r in rows}
        # The files this device's figures are drawn from (all of them when nothing is drawn).
        self.docs = [d for d in docs if d["_path"] in used] or docs
        self.groups = groups_of(self.rows)
        self.labels = labels_for(list(self.groups))
        palette = plt.get_cmap("tab10" if len(self.groups) <= 10 else "tab20").colors
        markers = "osD^vP*Xh<>"
        self.style = {k: (palette[i % len(palette)], markers[i % len(markers)])
                      for i, k in enumerate(self.groups)}
        self.written: list[Path] = []

    # -- shared pieces ---------------------------------------------------------------------------

    def header(self) -> str:
        dates = sorted({guard.one_line(str(d.get("date", ""))[:10]) for d in self.docs if d.get("date")})
        when = dates[0] if len(dates) == 1 else (f"{dates[0]} … {dates[-1]}" if dates else "date unknown")
        return f"{short_device(self.device)}, {when}"

    def footer(self, fig) -> int:
        lines = []
        for d in self.docs:
            cmd = guard.one_line(" ".join(str(d.get("command", "")).split()))
            if len(cmd) > 90:
                cmd = cmd[:87] + "..."
            commit = guard.one_line(str(d.get("git_commit", ""))[:10])
            lines.append(f"{d['_path'].name}: stage {d.get('stage', '?')}, commit {commit or '?'}: {cmd}")
        if len(lines) > 4:
            lines = lines[:3] + [f"... and {len(lines) - 3} more results files"]
        fig.text(0.01, 0.005, "\n".join(lines), fontsize=6.5, color="0.35", va="bottom", ha="left",
                 family="monospace")
        return len(lines)

    def save(self, fig, name: str, nfooter: int) -> None:
        # Margins in inches, so that tall figures (many panels) keep the title and footer clear.
        height = fig.get_figheight()
        fig.tight_layout(rect=(0, min(0.4, (0.12 * nfooter + 0.08) / height), 1,
                               1 - min(0.2, 0.35 / height)))
        path = self.out / f"{self.prefix}_{name}.png"
        fig.savefig(path, dpi=130, bbox_inches="tight")
        self.plt.close(fig)
        self.written.append(path)
        print(path)

    def bytes_axis(self, ax) -> None:
        ax.yaxis.set_major_formatter(self.ticker.FuncFormatter(lambda v, _: fmt_bytes(v)))

    def n_axis(self, ax, xs: list[int], keys: list[tuple]) -> None:
        ax.set_xscale("log", base=2)
        label = "N (sequence length" + ("; Nk where Nq ≠ Nk)" if any(k[8] for k in keys) else ")")
        shape = common_shape_text(keys)
        if shape:
            label += f", {shape}"
            if shape.startswith("B·N"):  # B = tokens / N: the N² terms summed over B grow as N
                label += f"\nso B = {shape.split()[2]} / N and B·N² ∝ N"
        ax.set_xlabel(label)
        if xs:
            lo, hi = min(xs), max(xs)
            ax.set_xlim(lo / 1.4, hi * 1.4)
        ax.xaxis.set_major_formatter(self.ticker.FuncFormatter(lambda v, _: fmt_n(v)))
        ax.grid(True, which="major", alpha=0.3)
        ax.grid(True, which="minor", alpha=0.1)

    def mark_oom(self, ax, oom_points: list[tuple[int, tuple]]) -> None:
        """An x on the top edge for each oom case (a marker, not a measurement); the word once per N."""
        trans = self.transforms.blended_transform_factory(ax.transData, ax.transAxes)
        seen: set = set()
        for x, key in oom_points:
            color = self.style[key][0]
            ax.plot([x], [1.0], marker="x", color=color, markersize=9, mew=2.2, transform=trans,
                    clip_on=False, zorder=5, gid="oom-marker")
            if x not in seen:  # above the frame, where no legend can cover it
                ax.text(x, 1.025, "OOM", transform=trans, ha="center", va="bottom", fontsize=7,
                        color="firebrick", fontweight="bold", clip_on=False)
                seen.add(x)
        if oom_points:
            ax.plot([], [], ls="none", marker="x", color="0.3", mew=2, gid="oom-marker",
                    label="x on the top edge: OOM, out of memory (a marker, not a measurement)")

    def mark_zero(self, ax, zero_points: list[tuple[int, tuple]]) -> None:
        trans = self.transforms.blended_transform_factory(ax.transData, ax.transAxes)
        seen: set = set()
        for x, key in zero_points:
            ax.plot([x], [0.0], marker="v", color=self.style[key][0], markersize=8, transform=trans,
                    clip_on=False, zorder=5, gid="zero-marker")
            if x not in seen:
                ax.text(x, 0.035, "0 B", transform=trans, ha="center", va="bottom", fontsize=7, color="0.3")
                seen.add(x)

    def guides(self, ax, anchor_x: float, anchor_y: float, slopes: dict) -> None:
        x0, x1 = ax.get_xlim()
        ylim = ax.get_ylim()
        for (name, power), ls in zip(slopes.items(), ("--", (0, (6, 3)))):
            xs = [x0, x1]
            ys = [anchor_y * (x / anchor_x) ** power for x in xs]
            ax.plot(xs, ys, ls=ls, color="0.55" if power == 1 else "0.3", lw=1.0, zorder=1,
                    label=f"∝ {name} (guide)", gid="guide")
        ax.set_xlim(x0, x1)
        ax.set_ylim(*ylim)

    def no_data(self, ax, what: str) -> None:
        ax.text(0.5, 0.5, f"no {what} in these results", transform=ax.transAxes, ha="center",
                va="center", color="0.4")

    # -- (a) memory --------------------------------------------------------------------------------

    def memory(self) -> None:
        plt = self.plt
        fig, axes = plt.subplots(1, 2, figsize=(13, 5.4))
        many = len(self.groups) > MAX_PANEL_LEGEND
        for ax, field, title in ((axes[0], "extra_bytes", "extra memory: beyond inputs and outputs"),
                                 (axes[1], "peak_bytes", "peak memory: everything the run allocated")):
            self.series_plot(ax, field, title, "bytes, measured (log)", bytes_axis=True,
                             slopes={"N": 1, "N²": 2}, legend=not many)
        if many:
            self.figure_legend(fig, axes)
        fig.suptitle(f"Memory against N — {self.header()}", fontsize=11)
        self.save(fig, "memory", self.footer(fig))

    # -- (b) time ----------------------------------------------------------------------------------

    def time(self) -> None:
        fig, ax = self.plt.subplots(1, 1, figsize=(8.5, 5.6))
        many = len(self.groups) > MAX_PANEL_LEGEND
        self.series_plot(ax, "median_ms", "median time per call", "ms (log)", slopes={"N²": 2},
                         legend=not many)
        if many:
            self.figure_legend(fig, [ax])
        fig.suptitle(f"Time against N — {self.header()}", fontsize=11)
        self.save(fig, "time", self.footer(fig))

    def series_plot(self, ax, field: str, title: str, ylabel: str, bytes_axis: bool = False,
                    slopes: dict | None = None, groups=None, legend: bool = True) -> None:
        """One panel: a line per group, through its ok rows only. With legend=False the caller
        draws one legend for the whole figure (many lines), and the labels are the figure's."""
        groups = self.groups if groups is None else groups
        labels = labels_for(list(groups)) if legend else self.labels
        xs_all, oom, zero, firsts = [], [], [], []
        for key, rows in groups.items():
            color, marker = self.style[key]
            pts = [(r["seq_k"], r.get(field)) for r in rows if r["status"] == "ok"]
            good = [(x, y) for x, y in pts if _positive(y)]
            zero += [(x, key) for x, y in pts if _finite_nonneg(y) and y == 0]
            oom += [(r["seq_k"], key) for r in rows if r["status"] == "oom"]
            xs_all += [r["seq_k"] for r in rows]
            if good:
                ax.plot([p[0] for p in good], [p[1] for p in good], marker=marker, color=color,
                        lw=1.6, ms=5, label=labels[key], zorder=3, gid="data")
                firsts.append(good[0])
            elif any(k == key for _, k in oom):
                ax.plot([], [], ls="none", marker="x", color=color, mew=2,
                        label=labels[key] + " (OOM only)", gid="oom-marker")
            elif any(k == key for _, k in zero):
                ax.plot([], [], ls="none", marker="v", color=color, label=labels[key], gid="zero-marker")
        ax.set_title(title, fontsize=10, pad=16)
        ax.set_ylabel(ylabel)
        ax.set_yscale("log")
        # Decades as plain numbers: with text.parse_math off, the default 10^k labels are mathtext
        # and would be drawn as raw "$\\mathdefault{10^{3}}$".
        ax.yaxis.set_major_formatter(self.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
        self.n_axis(ax, xs_all, list(groups))
        if bytes_axis:
            self.bytes_axis(ax)
        if not firsts and not oom and not zero:
            self.no_data(ax, "measured rows")
            return
        if firsts:
            ys = [y for key, rows in groups.items() for r in rows
                  if r["status"] == "ok" and _positive(y := r.get(field))]
            lo, hi = min(ys), max(ys)
            ax.set_ylim(lo / 6, hi * 4)
            if slopes:
                # The guides start just below the lowest first point, so that they run beside the
                # data (compare slopes) instead of on top of it.
                ax0 = min(x for x, _ in firsts)
                ay = min(y for x, y in firsts if x == ax0) / 2.5
                self.guides(ax, ax0, ay, slopes)
        self.mark_oom(ax, oom)
        self.mark_zero(ax, zero)
        if zero:
            ax.plot([], [], ls="none", marker="v", color="0.3", gid="zero-marker",
                    label="▽ on the bottom edge: measured 0 B")
        if legend:
            ax.legend(fontsize=7, loc="best", framealpha=0.85)

    def figure_legend(self, fig, axes) -> None:
        """One legend for every panel, right of them: for figures with many lines."""
        handles, labels, seen = [], [], set()
        for ax in axes:
            for h, l in zip(*ax.get_legend_handles_labels()):
                if l not in seen:
                    seen.add(l)
                    handles.append(h)
                    labels.append(l)
        if handles:
            fig.legend(handles, labels, loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=7,
                       ncol=1 + (len(handles) - 1) // 40, frameon=False)

    # -- (c) TFLOP/s against the anchors -------------------------------------------------------

    def tflops(self) -> None:
        plt = self.plt
        panels: "OrderedDict[tuple, OrderedDict]" = OrderedDict()
        for key, rows in self.groups.items():
            pk = (key[3], key[4], key[5], key[6])  # pass, dtype, D, causal
            panels.setdefault(pk, OrderedDict())[key] = rows
        anchor_panels: "OrderedDict[tuple, OrderedDict]" = OrderedDict()
        for key, rows in groups_of(self.anchor_rows).items():
            anchor_panels.setdefault((key[3], key[4], key[5], key[6]), OrderedDict())[key] = rows
        if not panels:  # only anchors on this device: their own panels
            panels = OrderedDict((pk, OrderedDict()) for pk in anchor_panels)
        panels = OrderedDict(sorted(panels.items(), key=lambda kv: (kv[0][0] != "fwd", kv[0])))
        n = max(1, len(panels))
        cols = min(n, 2)
        nrows = math.ceil(n / cols)
        fig, axes = plt.subplots(nrows, cols, figsize=(7.2 * cols, 5.0 * nrows), squeeze=False)
        for ax in axes.flat[n:]:
            ax.axis("off")
        if not panels:
            self.no_data(axes[0][0], "measured rows")
        many = any(len(g) + len(anchor_panels.get(pk, ())) > MAX_PANEL_LEGEND for pk, g in panels.items())
        any_rows = False
        for ax, ((pss, dtype, dim, causal), groups) in zip(axes.flat, panels.items()):
            title = f"{pss}, {dtype}, D={dim}, {'causal' if causal else 'not causal'}"
            anchor_groups = anchor_panels.get((pss, dtype, dim, causal), OrderedDict())
            if groups:
                self.series_plot(ax, "tflops", title, "TFLOP/s (log)", groups=groups, legend=not many)
            else:
                ax.set_title(title, fontsize=10, pad=16)
                ax.set_ylabel("TFLOP/s (log)")
                ax.set_yscale("log")
                self.n_axis(ax, [r["seq_k"] for rs in anchor_groups.values() for r in rs], list(anchor_groups))
            drew = self.draw_anchor_rows(ax, anchor_groups, [k[7] for k in groups])
            any_rows = any_rows or drew
            self.draw_anchors(ax, pss, dtype, dim, causal, attention=not drew)
            if not many:
                ax.legend(fontsize=7, loc="lower right", framealpha=0.85)
        if many:
            self.figure_legend(fig, list(axes.flat[:len(panels)]))
        what = "PyTorch's SDPA backends (dashed)" if any_rows else "the H100 anchors"
        fig.suptitle(f"TFLOP/s against N, with {what} — {self.header()}", fontsize=11)
        self.save(fig, "tflops", self.footer(fig))

    def draw_anchor_rows(self, ax, anchor_groups: "OrderedDict[tuple, list]", stage_shapes: list) -> bool:
        """PyTorch's backends as measured in the results (rows of stage "anchor"): a dashed line
        with markers across N per backend and shape, named "PyTorch FA2 (sdpa_flash)"; the shape
        joins the name when it is not the one shape of the panel's course-stage lines. The axes
        grow to hold them. Returns whether anything was drawn."""
        if not anchor_groups:
            return False
        shapes = {k[7] for k in anchor_groups}
        own = set(stage_shapes)
        say_shape = len(shapes) > 1 or (bool(own) and own != shapes)
        xs, ys = [], []
        for key, rows in anchor_groups.items():
            pts = [(r["seq_k"], r["tflops"]) for r in rows if _positive(r.get("tflops"))]
            if not pts:
                continue
            variant = key[2]
            color, marker = ANCHOR_STYLE.get(variant, ("0.45", "o"))
            label = anchor_name(variant)
            if say_shape:
                label += f" [{key[7][3].replace(' = ', '=')}]"
            if key[8]:
                label += f" Nq={key[8]}"
            ax.plot([p[0] for p in pts], [p[1] for p in pts], ls="--", lw=1.3, marker=marker, ms=4.5,
                    color=color, mfc="white", zorder=2.8, gid="anchor-row", label=label)
            xs += [p[0] for p in pts]
            ys += [p[1] for p in pts]
            self.anchor_drawn.update(id(r) for r in rows)
        if not ys:
            return False
        lo, hi = ax.get_ylim()
        if not stage_shapes:  # nothing else on the panel: the anchors set the scale
            lo, hi = min(ys) / 3, max(ys) * 3
        ax.set_ylim(min(lo, min(ys) / 1.5), max(hi, max(ys) * 2.0))
        x0, x1 = ax.get_xlim()
        ax.set_xlim(min(x0, min(xs) / 1.4), max(x1, max(xs) * 1.4))
        return True

    def anchor_rows_at(self, shape: tuple, dtype: str) -> list[dict]:
        """The anchor rows measured at exactly this (pass, D, causal, B, H, Nq, Nk) and dtype."""
        return [r for r in self.anchor_rows if r["_dtype"] == dtype and _positive(r.get("tflops")) and
                (r["pass"], r["dim"], r["causal"], r["batch"], r["heads"], r["seq_q"], r["seq_k"]) == shape]

    def draw_anchors(self, ax, pss: str, dtype: str, dim: int, causal: bool,
                     legend: bool = False, attention: bool = True, extra: list | None = None) -> None:
        """The anchors as horizontal lines, labelled at the line (legend=False) or in a legend of
        their own (legend=True: bar charts, where a label at the line would sit on a bar):
        anchors.json's ceilings, its attention rows unless attention=False (the results hold
        measured ones), and `extra` lines (value, label, style, color)."""
        lines = list(extra or [])  # (value, label, style)
        anchors = self.anchors or {}
        for c in anchors.get("ceilings", []):
            if canonical_dtype(str(c.get("dtype", ""))) == dtype and _positive(c.get("tflops")):
                lines.append((float(c["tflops"]), f"H100 {c.get('name', 'matmul')}: {c['tflops']:g}", "-.", "0.25"))
        best: "OrderedDict[str, tuple]" = OrderedDict()
        for a in (anchors.get("attention", []) if attention else []):
            if (canonical_dtype(str(a.get("dtype", ""))) == dtype and a.get("dim") == dim
                    and bool(a.get("causal")) == causal and _positive(a.get(pss))):
                k = a.get("kernel", "?")
                seqs = best.get(k, (0.0, []))[1] + [a.get("seq")]
                best[k] = (max(best.get(k, (0.0, []))[0], float(a[pss])), seqs)
        for k, (v, seqs) in best.items():
            seqs = sorted(s for s in seqs if isinstance(s, int))
            span = f"best of N={fmt_n(seqs[0])}–{fmt_n(seqs[-1])}" if seqs else ""
            lines.append((v, f"H100 SDPA {k} {dtype}: {v:g} ({span})", ":", "0.25"))
        if not lines:
            return
        lo, hi = ax.get_ylim()
        hi = max(hi, max(line[0] for line in lines) * 2.0)
        trans = self.transforms.blended_transform_factory(ax.transAxes, ax.transData)
        if legend:
            for v, label, ls, color in sorted(lines, reverse=True):
                ax.axhline(v, color=color, ls=ls, lw=1.1, zorder=2, gid="anchor", label=label)
            ax.set_ylim(lo, hi)
            ax.legend(fontsize=7, loc="upper left", framealpha=0.9)
            return
        right, last = True, None
        for v, label, ls, color in sorted(lines):
            ax.axhline(v, color=color, ls=ls, lw=1.1, zorder=2, gid="anchor")
            # Two anchors within 25% of each other: put the second label on the other side.
            right = not right if last is not None and v / last < 1.25 else True
            ax.text(0.99 if right else 0.01, v * 1.04, label, transform=trans,
                    ha="right" if right else "left", va="bottom", fontsize=6.5, color="0.2",
                    bbox=dict(facecolor="white", edgecolor="none", alpha=0.6, pad=0.5),
                    zorder=2.5)  # over the anchor lines and grid, under the data
            last = v
        ax.set_ylim(lo, hi)

    # -- (d) stage-by-stage progression ---------------------------------------------------------

    def progression_bars(self, per_stage: "OrderedDict[str, list]") -> list[dict]:
        """The bars, left to right: per stage its fastest ok variant; a stage with a ladder
        (variants v1_..., v2_, ... of that stage) shows every rung in order of its number, then its
        fastest other variant of its own (its "ours", e.g. flash); a stage with only oom rows
        there, one OOM slot. With one stage only, every variant of it, slowest first."""
        bars = []
        for stage, rows in per_stage.items():
            ok = [r for r in rows if r["status"] == "ok"]
            if not ok:
                bars.append(next(r for r in rows if r["status"] == "oom"))
                continue
            rungs = sorted((r for r in ok if r["stage"] == stage and ladder_rung(r["_variant"]) is not None),
                           key=lambda r: (ladder_rung(r["_variant"]), r["_variant"], r["median_ms"]))
            if rungs:
                bars += rungs
                ours = [r for r in ok if r["stage"] == stage and ladder_rung(r["_variant"]) is None]
                if ours:
                    bars.append(min(ours, key=lambda r: r["median_ms"]))
            elif len(per_stage) == 1:  # one stage only: each of its variants, slowest first
                bars += sorted(ok, key=lambda r: (-r["median_ms"], r["_variant"]))
            else:
                bars.append(min(ok, key=lambda r: r["median_ms"]))
        return bars

    def progression(self) -> None:
        plt = self.plt
        choice = self.common_shape()
        if choice is None:
            fig, axes = plt.subplots(3, 1, figsize=(9, 11))
            for ax in axes:
                self.no_data(ax, "shape shared by measured rows" if self.at_seq is None
                             else f"measured rows at N={self.at_seq}")
                ax.set_xticks([])
            fig.suptitle(f"Stage by stage — {self.header()}", fontsize=11)
            self.save(fig, "progression", self.footer(fig))
            return
        shape, per_stage = choice
        pss, dim, causal, batch, heads, nq, nk = shape
        best = self.progression_bars(per_stage)
        names = []
        for r in best:
            dt = "" if r["_dtype"] == "float32" else f"\n{r['dtype']}"
            names.append(f"{r['stage']}\n{r['_variant']}{dt}")
        xs = list(range(len(best)))
        colors = [self.style[group_key(r)][0] for r in best]
        fig, axes = plt.subplots(3, 1, figsize=(max(9.0, 1.25 * len(best) + 3.0), 12))
        # A bar's length is its value only on a linear axis from 0: time and TFLOP/s are bars there,
        # each labelled with its value above it (a slow first rung leaves the others short but
        # still read). Memory spans decades (N² against N), so it stays log, as points, not bars.
        panels = ((axes[0], "median_ms", "median time (lower is better); ×: speed-up over the bar before", "ms", fmt_ms),
                  (axes[1], "tflops", "TFLOP/s (higher is better)", "TFLOP/s", fmt_tf),
                  (axes[2], "extra_bytes", "extra memory, measured (lower is better; points on a log axis)",
                   "bytes (log)", fmt_bytes))
        for ax, field, title, ylabel, fmt in panels:
            vals = [r.get(field) if r["status"] == "ok" else None for r in best]
            pos = [v for v in vals if _positive(v)]
            as_bars = field != "extra_bytes"
            if as_bars:
                # Headroom for the labels above the bars (three lines over the time bars).
                ax.set_ylim(0, max(pos) * (1.4 if field == "median_ms" else 1.15) if pos else 1.0)
            else:
                ax.set_yscale("log")
                if pos:
                    ax.set_ylim(min(pos) / 8, max(pos) * 10)
            # Words for a slot with no value sit just above the axis's floor, whatever its scale.
            floor = self.transforms.blended_transform_factory(ax.transData, ax.transAxes)
            prev = None  # the last bar with a time: what the speed-up is measured against
            for x, v, r, c in zip(xs, vals, best, colors):
                if _positive(v):
                    if as_bars:
                        ax.bar(x, v, color=c, width=0.65, zorder=3, gid="bar")
                    else:
                        ax.plot([x], [v], ls="none", marker="o", markersize=10, color=c, zorder=3, gid="point")
                    text = fmt(v)
                    if field == "median_ms":
                        if _positive(r.get("tflops")):
                            text += f"\n{fmt_tf(r['tflops'])} TFLOP/s"
                        if prev is not None:
                            text += f"\n×{prev['median_ms'] / v:.3g} vs {prev['_variant']}"
                        prev = r
                    ax.annotate(text, (x, v), xytext=(0, 4 if as_bars else 9), textcoords="offset points",
                                ha="center", va="bottom", fontsize=7.5, gid="bar-label", zorder=6,
                                bbox=dict(facecolor="white", edgecolor="none", alpha=0.8, pad=0.8))
                else:
                    word = {"oom": "OOM\n(marker)", "skipped": "skipped", "failed": "failed"}.get(r["status"], "0 B")
                    ax.text(x, 0.04, word, transform=floor, ha="center", va="bottom", fontsize=9,
                            color="firebrick" if r["status"] == "oom" else "0.3", fontweight="bold")
            if field == "tflops":
                dts = {r["_dtype"] for r in best if r["status"] == "ok"}
                if len(dts) == 1:
                    dt = dts.pop()
                    at = self.anchor_rows_at(shape, dt)  # PyTorch measured at this very shape
                    self.anchor_drawn.update(id(r) for r in at)
                    extra = [(float(r["tflops"]), f"{anchor_name(r['_variant'])} {dt}: {fmt_tf(r['tflops'])}", "--",
                              ANCHOR_STYLE.get(r["_variant"], ("0.45", "o"))[0]) for r in at]
                    self.draw_anchors(ax, pss, dt, dim, causal, legend=True, attention=not at, extra=extra)
                    # Still from 0, up to the highest line with room above it for the legend.
                    tops = [line.get_ydata()[0] for line in ax.get_lines() if line.get_gid() == "anchor"]
                    if tops:
                        ax.set_ylim(0, max([t * 1.45 for t in tops] + [v * 1.15 for v in pos]))
            if field == "extra_bytes":
                self.bytes_axis(ax)
            if not pos:  # nothing above 0 (all 0 B, or no ok row): the words say it, no scale
                ax.set_yticks([])
                ax.set_yticks([], minor=True)
            ax.set_xticks(xs)
            ax.set_xticklabels(names, fontsize=8)
            ax.set_xlim(-0.6, len(xs) - 0.4)
            ax.set_title(title, fontsize=10)
            ax.set_ylabel(ylabel)
            ax.grid(True, axis="y", alpha=0.3, zorder=0)
        n = fmt_n(nk) if nq == nk else f"{fmt_n(nq)}×{fmt_n(nk)}"
        shape_text = f"{pss}, N={n}, D={dim}, B={batch}, H={heads}{', causal' if causal else ''}"
        fig.suptitle(f"Stage by stage at {shape_text} — {self.header()}", fontsize=11)
        self.save(fig, "progression", self.footer(fig))

    def common_shape(self):
        """The shape that the most stages measured ok; ties go to the later stages, then to the
        larger N. Forward rows first: the backward has its own stages."""
        by_shape: "OrderedDict[tuple, OrderedDict]" = OrderedDict()
        for r in self.rows:
            if self.at_seq is not None and r["seq_k"] != self.at_seq:
                continue
            shape = (r["pass"], r["dim"], r["causal"], r["batch"], r["heads"], r["seq_q"], r["seq_k"])
            by_shape.setdefault(shape, OrderedDict()).setdefault(r["stage"], []).append(r)
        if not by_shape:
            return None

        def rank(item):
            (pss, dim, causal, batch, heads, nq, nk), stages = item
            ok_stages = sum(any(r["status"] == "ok" for r in rs) for rs in stages.values())
            ok_rows = sum(r["status"] == "ok" for rs in stages.values() for r in rs)
            return (pss == "fwd", ok_stages, len(stages), max(stages), ok_rows, nk, nq, -dim, not causal)

        shape, stages = max(by_shape.items(), key=rank)
        return shape, OrderedDict(sorted(stages.items()))

    def all(self) -> list[Path]:
        self.memory()
        self.time()
        self.tflops()
        self.progression()
        return self.written


def check_size(selection: Selection) -> None:
    """BadInput when a device's figures would hold more lines or TFLOP/s panels than can be drawn."""
    for device, rows in selection.sets.items():
        keys = list(groups_of(rows))
        panels = {k[3:7] for k in keys}
        if len(keys) > MAX_LINES or len(panels) > MAX_PANELS:
            raise BadInput(f"{short_device(device)}: {len(keys)} lines in {len(panels)} panels (pass, dtype, D, "
                           f"causal), more than a figure can show (at most {MAX_LINES} lines, {MAX_PANELS} panels); "
                           "give fewer files, or --device")


def anchor_notes(selection: Selection, drawn: set) -> list[str]:
    """One line per file with ok anchor rows that no figure shows (no course-stage panel of their
    pass, dtype, D and causal flag): which ones."""
    out = []
    for d in selection.docs:
        left: "OrderedDict[str, int]" = OrderedDict()
        for r in d["results"]:
            if is_anchor(r) and r["status"] == "ok" and selection.fate[id(r)][0] == "drawn" and id(r) not in drawn:
                k = f"{r['pass']} {r['_dtype']} D={r['dim']}{' causal' if r['causal'] else ''}"
                left[k] = left.get(k, 0) + 1
        if left:
            cases = [f"{k} ({n})" for k, n in left.items()]
            if len(cases) > 4:
                cases = cases[:3] + [f"and {len(cases) - 3} more"]
            out.append(f"{d['_path'].name}: {sum(left.values())} anchor rows not drawn, no course stage was "
                       "measured at their pass, dtype, D and causal flag: " + ", ".join(cases))
    return out


# ------------------------------------------------------------------------------------------------
# Number formats for axes and labels


def fmt_bytes(v: float) -> str:
    if v <= 0 or not math.isfinite(v):
        return "0 B"
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if v >= scale:
            return f"{v / scale:.3g} {unit}"
    return f"{v:.3g} B"


def fmt_n(v: float) -> str:
    v = int(round(v))
    if v >= 1024 and v % 1024 == 0:
        return f"{v // 1024}k"
    return str(v)


def fmt_ms(v: float) -> str:
    if v >= 1000:
        return f"{v / 1000:.3g} s"
    if v < 0.1:
        return f"{v * 1000:.3g} µs"
    return f"{v:.3g} ms"


def fmt_tf(v: float) -> str:
    return f"{v:.3g}"


def markdown_table(docs: list[dict]) -> str:
    """The provenance of each results file, for docs/results/README.md."""
    lines = ["| file | stage | device | date (UTC) | commit | rows (ok / oom / other) | command |",
             "|---|---|---|---|---|---|---|"]
    for d in docs:
        rows = d["results"]
        ok = sum(r["status"] == "ok" for r in rows)
        oom = sum(r["status"] == "oom" for r in rows)
        dev = d.get("device", {}).get("name", "?") if isinstance(d.get("device"), dict) else "?"
        cmd = " ".join(str(d.get("command", "")).split()).replace("|", "\\|")
        lines.append(f"| `{d['_path'].name}` | {d.get('stage', '?')} | {dev} | "
                     f"{str(d.get('date', '?')).replace('T', ' ').rstrip('Z')} | `{d.get('git_commit', '?')}` | "
                     f"{ok} / {oom} / {len(rows) - ok - oom} | `{cmd}` |")
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------
# Command line


class OneLineParser(argparse.ArgumentParser):
    def error(self, message):  # argparse prints usage + message; the course's tools print one line
        raise BadInput(message)


def main(argv: list[str] | None = None) -> int:
    here = Path(__file__).resolve().parent
    ap = OneLineParser(prog=PROG, description="Turn flash-course results JSON files into PNG figures.")
    ap.add_argument("inputs", nargs="+", metavar="RESULTS.json|DIR",
                    help="results files written with --json, or folders of them")
    ap.add_argument("--out", metavar="DIR", help="folder for the PNG files (created); required unless --list")
    ap.add_argument("--list", action="store_true",
                    help="print a Markdown table of the files (stage, device, date, commit, command) and stop")
    ap.add_argument("--prefix", metavar="NAME",
                    help="file name prefix (default: the input's name for one file, else 'results')")
    ap.add_argument("--anchors", metavar="FILE", help=f"anchors JSON (default: {here / 'anchors.json'})")
    ap.add_argument("--no-anchors", action="store_true", help="draw no anchor lines")
    ap.add_argument("--device", metavar="TEXT",
                    help="only the rows whose device contains TEXT (case-insensitive), e.g. H100; "
                         "default: one set of figures per device")
    ap.add_argument("--seq", type=int, metavar="N",
                    help="the N of the stage-by-stage figure (default: the shape most stages share)")
    try:
        args = ap.parse_args(argv)
        files = expand_inputs(args.inputs)
        docs = [load_results(f) for f in files]
        if args.list:
            print(markdown_table(docs))
            return 0
        if not args.out:
            raise BadInput("the following arguments are required: --out")
        if args.no_anchors:
            anchors = None
        elif args.anchors:
            anchors = load_anchors(Path(args.anchors), explicit=True)
        else:
            anchors = load_anchors(here / "anchors.json", explicit=False)
        prefix = args.prefix or (files[0].stem if len(files) == 1 else "results")
        if not prefix or any(c in prefix for c in "/\\") or prefix.startswith("."):
            raise BadInput(f"--prefix {prefix!r}: must be a plain file name part")
        out = Path(args.out)
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise BadInput(f"--out {out}: cannot create ({e.strerror})") from None
        if not os.access(out, os.W_OK):
            raise BadInput(f"--out {out}: not writable")
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise BadInput("matplotlib is not installed for this Python "
                           f"({sys.executable}); install python3-matplotlib") from None
        selection = Selection(docs, args.device)
        check_size(selection)
        anchors_drawn: set = set()
        for device, rows in selection.sets.items():
            name = prefix if len(selection.sets) == 1 else f"{prefix}_{device_slug(device)}"
            plotter = Plotter(rows, device, docs, anchors, out, name, args.seq)
            plotter.all()
            anchors_drawn |= plotter.anchor_drawn
        for note in selection.notes() + anchor_notes(selection, anchors_drawn):
            print(f"{PROG}: note: {note}", file=sys.stderr)
    except BadInput as e:  # a ResultsError is one
        print(f"{PROG}: error: {guard.one_line(e)}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(guard.run_main(PROG, main))
