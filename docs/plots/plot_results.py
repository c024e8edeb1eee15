#!/usr/bin/env python3
"""plot_results.py — turn the stages' results files into the course's figures.

    plot_results.py RESULTS.json [MORE.json | DIR ...] --out DIR [--prefix NAME]
    plot_results.py RESULTS.json [MORE.json | DIR ...] --list      (a Markdown table of the files)

A DIR argument stands for every *.json file in it (this is what `cmake --build build --target
plots` passes: the folder the tour writes its results into). Four PNG figures come out, and the
path of each is printed on its own line:

    PREFIX_memory.png       measured memory against N (extra and peak bytes), log-log, with
                            dashed guides of slope N and N^2: the chart the course is about
    PREFIX_time.png         median time against N, log-log, with an N^2 guide
    PREFIX_tflops.png       TFLOP/s against N, one panel per (pass, dtype, D, causal), with the
                            H100 anchors (anchors.json) as horizontal reference lines
    PREFIX_progression.png  stage by stage at one common shape: best time, TFLOP/s, extra memory

Rows are grouped by (device, stage, variant, pass, dtype, D, causal, B*H, and Nq when Nq != Nk):
two different shapes never share a line. Rows with status oom, skipped or failed are not points;
an oom row is marked with an x on the top edge, because where a stage runs out of memory is part
of the lesson. A measured 0 bytes cannot sit on a log axis: it is drawn as a triangle on the
bottom edge.

Exit codes: 0 figures written; 2 bad usage or bad input (missing file, not JSON, not a results
file), with one line on stderr. Needs only the standard library and matplotlib.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections import OrderedDict
from pathlib import Path

# Version 2 (docs/results_schema.md) added heads_kv, driver_bytes and error_vs_plain and dropped
# "values"; the fields read here are in both.
SCHEMAS = ("flash-course-results/1", "flash-course-results/2")
ANCHORS_SCHEMA = "flash-course-anchors/1"
STATUSES = ("ok", "oom", "skipped", "failed")
PROG = "plot_results.py"
MAX_PANEL_LEGEND = 7  # more lines than this in a panel: one legend for the figure, at its right

# Every row must carry these; the C++ writer (common/src/results.cpp) always does.
REQUIRED = {
    "stage": str, "variant": str, "pass": str, "batch": int, "heads": int, "seq_q": int,
    "seq_k": int, "dim": int, "dtype": str, "causal": bool, "status": str,
}
NUMERIC_OPTIONAL = ("median_ms", "tflops", "gbps", "peak_bytes", "extra_bytes")


class BadInput(Exception):
    """Bad usage or bad input: one line on stderr, exit 2."""


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


def load_results(path: Path) -> dict:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise BadInput(f"{path}: cannot read ({e.__class__.__name__})") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise BadInput(f"{path}: not JSON (line {e.lineno}, column {e.colno}: {e.msg})") from None
    if not isinstance(doc, dict) or doc.get("schema") not in SCHEMAS:
        found = doc.get("schema") if isinstance(doc, dict) else type(doc).__name__
        raise BadInput(f"{path}: not a results file (schema {found!r}, expected one of {SCHEMAS!r})")
    rows = doc.get("results")
    if not isinstance(rows, list):
        raise BadInput(f"{path}: 'results' must be a list of rows")
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
        for key in NUMERIC_OPTIONAL:
            v = row.get(key)
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))):
                raise BadInput(f"{where}: {key!r} should be a number or null, got {v!r}")
        if row["status"] == "ok" and not _positive(row.get("median_ms")):
            raise BadInput(f"{where}: an ok row needs a positive 'median_ms'")
        row["_dtype"] = canonical_dtype(row["dtype"])
        row["_device"] = row.get("device") or device.get("name") or "unknown device"
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
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        raise BadInput(f"{path}: not a readable anchors JSON file ({e.__class__.__name__})") from None
    if not isinstance(doc, dict) or doc.get("schema") != ANCHORS_SCHEMA:
        raise BadInput(f"{path}: not an anchors file (expected schema {ANCHORS_SCHEMA!r})")
    return doc


def _positive(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0


def _finite_nonneg(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0


# ------------------------------------------------------------------------------------------------
# Grouping


def group_key(r: dict) -> tuple:
    nq = 0 if r["seq_q"] == r["seq_k"] else r["seq_q"]  # 0: square (Nq = Nk, the sweep's N)
    shape = r.get("_shape") or (0, r["batch"] * r["heads"], f"B·H={r['batch'] * r['heads']}")
    return (r["_device"], r["stage"], r["variant"], r["pass"], r["_dtype"], r["dim"], r["causal"],
            shape, nq)


def assign_shapes(rows: list[dict]) -> None:
    """Which rows may share a line besides (stage, variant, pass, dtype, D, causal): the same B·H
    (a plain sweep of N), or the same number of tokens (the FlashAttention papers' benchmarks keep
    B·N fixed, 16k tokens, so B shrinks as N grows): rows whose B·H·Nq is shared by two or more
    different B·H form one such family. Anything else is a different shape and a different line."""
    coarse: dict = {}
    for r in rows:
        nq = 0 if r["seq_q"] == r["seq_k"] else r["seq_q"]
        k = (r["_device"], r["stage"], r["variant"], r["pass"], r["_dtype"], r["dim"], r["causal"], nq)
        coarse.setdefault(k, []).append(r)
    for rs in coarse.values():
        by_product: dict = {}
        for r in rs:
            by_product.setdefault(r["batch"] * r["heads"] * r["seq_q"], []).append(r)
        for product, members in by_product.items():
            if len({m["batch"] * m["heads"] for m in members}) > 1:
                heads = {m["heads"] for m in members}
                label = (f"B·N={fmt_n(product // next(iter(heads)))} tokens, H={next(iter(heads))}"
                         if len(heads) == 1 else f"B·H·N={fmt_n(product)}")
                for m in members:
                    m["_shape"] = (1, product, label)
            else:
                for m in members:
                    bh = m["batch"] * m["heads"]
                    m["_shape"] = (0, bh, f"B·H={bh}")


def dedupe(rows: list[dict]) -> list[dict]:
    """One row per (group, N). A stage's file also measures the previous stage beside it; when
    the same case comes from several files, keep the row from the stage's own run (else the first)."""
    chosen: "OrderedDict[tuple, dict]" = OrderedDict()
    for r in rows:
        k = group_key(r) + (r["seq_k"],)
        old = chosen.get(k)
        if old is None:
            chosen[k] = r
        elif old["_file_stage"] != old["stage"] and r["_file_stage"] == r["stage"]:
            chosen[k] = r
    return list(chosen.values())


def groups_of(rows: list[dict]) -> "OrderedDict[tuple, list[dict]]":
    out: "OrderedDict[tuple, list[dict]]" = OrderedDict()
    for r in sorted(rows, key=lambda r: (group_key(r)[1:], group_key(r)[0], r["seq_k"])):
        out.setdefault(group_key(r), []).append(r)
    return out


def labels_for(keys: list[tuple]) -> dict:
    """'01 eigen' plus only the descriptors that differ between the groups of one figure."""
    fields = list(zip(*keys)) if keys else []
    varies = [len(set(f)) > 1 for f in fields]

    def label(k: tuple) -> str:
        device, stage, variant, pss, dtype, dim, causal, bh, nq = k
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
            parts.append(bh[2])  # "B·H=8" or "B·N=16k tokens, H=32"
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


# ------------------------------------------------------------------------------------------------
# Figures


class Plotter:
    def __init__(self, docs: list[dict], anchors: dict | None, out: Path, prefix: str,
                 at_seq: int | None):
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib import ticker, transforms

        self.plt, self.ticker, self.transforms = plt, ticker, transforms
        self.docs, self.anchors, self.out, self.prefix, self.at_seq = docs, anchors, out, prefix, at_seq
        all_rows = [r for d in docs for r in d["results"]]
        assign_shapes(all_rows)
        self.rows = dedupe(all_rows)
        self.groups = groups_of(self.rows)
        self.labels = labels_for(list(self.groups))
        palette = plt.get_cmap("tab10").colors
        markers = "osD^vP*Xh<>"
        self.style = {k: (palette[i % len(palette)], markers[i % len(markers)])
                      for i, k in enumerate(self.groups)}
        self.written: list[Path] = []

    # -- shared pieces ---------------------------------------------------------------------------

    def header(self) -> str:
        devices = list(OrderedDict.fromkeys(short_device(d.get("device", {}).get("name", "?"))
                                            if isinstance(d.get("device"), dict) else "?"
                                            for d in self.docs))
        dates = sorted({str(d.get("date", ""))[:10] for d in self.docs if d.get("date")})
        when = dates[0] if len(dates) == 1 else (f"{dates[0]} … {dates[-1]}" if dates else "date unknown")
        return f"{' + '.join(devices)}, {when}"

    def footer(self, fig) -> None:
        lines = []
        for d in self.docs:
            cmd = " ".join(str(d.get("command", "")).split())
            if len(cmd) > 90:
                cmd = cmd[:87] + "..."
            commit = str(d.get("git_commit", ""))[:10]
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
                               1 - min(0.2, 0.2 / height)))
        path = self.out / f"{self.prefix}_{name}.png"
        fig.savefig(path, dpi=130, bbox_inches="tight")
        self.plt.close(fig)
        self.written.append(path)
        print(path)

    def bytes_axis(self, ax) -> None:
        ax.yaxis.set_major_formatter(self.ticker.FuncFormatter(lambda v, _: fmt_bytes(v)))

    def n_axis(self, ax, xs: list[int]) -> None:
        ax.set_xscale("log", base=2)
        ax.set_xlabel("N (sequence length; Nk where Nq ≠ Nk)")
        if xs:
            lo, hi = min(xs), max(xs)
            ax.set_xlim(lo / 1.4, hi * 1.4)
        ax.xaxis.set_major_formatter(self.ticker.FuncFormatter(lambda v, _: fmt_n(v)))
        ax.grid(True, which="major", alpha=0.3)
        ax.grid(True, which="minor", alpha=0.1)

    def mark_oom(self, ax, oom_points: list[tuple[int, tuple]]) -> None:
        """An x on the top edge for each oom case; the word once per N."""
        trans = self.transforms.blended_transform_factory(ax.transData, ax.transAxes)
        seen: set = set()
        for x, key in oom_points:
            color = self.style[key][0]
            ax.plot([x], [1.0], marker="x", color=color, markersize=9, mew=2.2, transform=trans,
                    clip_on=False, zorder=5)
            if x not in seen:  # above the frame, where no legend can cover it
                ax.text(x, 1.025, "OOM", transform=trans, ha="center", va="bottom", fontsize=7,
                        color="firebrick", fontweight="bold", clip_on=False)
                seen.add(x)

    def mark_zero(self, ax, zero_points: list[tuple[int, tuple]]) -> None:
        trans = self.transforms.blended_transform_factory(ax.transData, ax.transAxes)
        seen: set = set()
        for x, key in zero_points:
            ax.plot([x], [0.0], marker="v", color=self.style[key][0], markersize=8, transform=trans,
                    clip_on=False, zorder=5)
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
                    label=f"∝ {name} (guide)")
        ax.set_xlim(x0, x1)
        ax.set_ylim(*ylim)

    def no_data(self, ax, what: str) -> None:
        ax.text(0.5, 0.5, f"no {what} in these results", transform=ax.transAxes, ha="center",
                va="center", color="0.4")

    # -- (a) memory --------------------------------------------------------------------------------

    def memory(self) -> None:
        plt = self.plt
        fig, axes = plt.subplots(1, 2, figsize=(13, 5.4))
        many = self.drawn_groups() > MAX_PANEL_LEGEND
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
        many = self.drawn_groups() > MAX_PANEL_LEGEND
        self.series_plot(ax, "median_ms", "median time per call", "ms (log)", slopes={"N²": 2},
                         legend=not many)
        if many:
            self.figure_legend(fig, [ax])
        fig.suptitle(f"Time against N — {self.header()}", fontsize=11)
        self.save(fig, "time", self.footer(fig))

    def series_plot(self, ax, field: str, title: str, ylabel: str, bytes_axis: bool = False,
                    slopes: dict | None = None, groups=None, legend: bool = True) -> None:
        """One panel: a line per group. With legend=False the caller draws one legend for the
        whole figure (many lines), and the labels are the figure's, not the panel's."""
        groups = self.groups if groups is None else groups
        labels = labels_for(list(groups)) if legend else self.labels
        xs_all, oom, zero, firsts = [], [], [], []
        for key, rows in groups.items():
            color, marker = self.style[key]
            pts = [(r["seq_k"], r.get(field)) for r in rows if r["status"] == "ok"]
            good = [(x, y) for x, y in pts if _positive(y)]
            zero += [(x, key) for x, y in pts if _finite_nonneg(y) and y == 0]
            oom += [(r["seq_k"], key) for r in rows if r["status"] == "oom"]
            xs_all += [r["seq_k"] for r in rows if r["status"] in ("ok", "oom")]
            if good:
                ax.plot([p[0] for p in good], [p[1] for p in good], marker=marker, color=color,
                        lw=1.6, ms=5, label=labels[key], zorder=3)
                firsts.append(good[0])
            elif any(k == key for _, k in oom + zero):
                ax.plot([], [], marker=marker, color=color, label=labels[key])
        ax.set_title(title, fontsize=10, pad=16)
        ax.set_ylabel(ylabel)
        ax.set_yscale("log")
        self.n_axis(ax, xs_all)
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
        if legend:
            ax.legend(fontsize=7, loc="best", framealpha=0.85)

    def drawn_groups(self, groups=None) -> int:
        groups = self.groups if groups is None else groups
        return sum(any(r["status"] in ("ok", "oom") for r in rows) for rows in groups.values())

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
            if not any(r["status"] in ("ok", "oom") for r in rows):
                continue
            pk = (key[3], key[4], key[5], key[6])  # pass, dtype, D, causal
            panels.setdefault(pk, OrderedDict())[key] = rows
        panels = OrderedDict(sorted(panels.items(), key=lambda kv: (kv[0][0] != "fwd", kv[0])))
        n = max(1, len(panels))
        cols = min(n, 2)
        nrows = math.ceil(n / cols)
        fig, axes = plt.subplots(nrows, cols, figsize=(7.2 * cols, 5.0 * nrows), squeeze=False)
        for ax in axes.flat[n:]:
            ax.axis("off")
        if not panels:
            self.no_data(axes[0][0], "measured rows")
        many = any(self.drawn_groups(g) > MAX_PANEL_LEGEND for g in panels.values())
        for ax, ((pss, dtype, dim, causal), groups) in zip(axes.flat, panels.items()):
            self.series_plot(ax, "tflops", f"{pss}, {dtype}, D={dim}, {'causal' if causal else 'not causal'}",
                             "TFLOP/s (log)", groups=groups, legend=not many)
            self.draw_anchors(ax, pss, dtype, dim, causal)
            if not many:
                ax.legend(fontsize=7, loc="best", framealpha=0.85)
        if many:
            self.figure_legend(fig, list(axes.flat[:len(panels)]))
        fig.suptitle(f"TFLOP/s against N, with the H100 anchors — {self.header()}", fontsize=11)
        self.save(fig, "tflops", self.footer(fig))

    def draw_anchors(self, ax, pss: str, dtype: str, dim: int, causal: bool) -> None:
        if not self.anchors:
            return
        lines = []  # (value, label, style)
        for c in self.anchors.get("ceilings", []):
            if canonical_dtype(str(c.get("dtype", ""))) == dtype and _positive(c.get("tflops")):
                lines.append((float(c["tflops"]), f"H100 {c.get('name', 'matmul')}: {c['tflops']:g}", "-."))
        best: "OrderedDict[str, tuple]" = OrderedDict()
        for a in self.anchors.get("attention", []):
            if (canonical_dtype(str(a.get("dtype", ""))) == dtype and a.get("dim") == dim
                    and bool(a.get("causal")) == causal and _positive(a.get(pss))):
                k = a.get("kernel", "?")
                seqs = best.get(k, (0.0, []))[1] + [a.get("seq")]
                best[k] = (max(best.get(k, (0.0, []))[0], float(a[pss])), seqs)
        for k, (v, seqs) in best.items():
            seqs = sorted(s for s in seqs if isinstance(s, int))
            span = f"best of N={fmt_n(seqs[0])}–{fmt_n(seqs[-1])}" if seqs else ""
            lines.append((v, f"H100 SDPA {k} {dtype}: {v:g} ({span})", ":"))
        if not lines:
            return
        lo, hi = ax.get_ylim()
        hi = max(hi, max(v for v, _, _ in lines) * 2.0)
        trans = self.transforms.blended_transform_factory(ax.transAxes, ax.transData)
        right, last = True, None
        for v, label, ls in sorted(lines):
            ax.axhline(v, color="0.25", ls=ls, lw=1.1, zorder=2)
            # Two anchors within 25% of each other: put the second label on the other side.
            right = not right if last is not None and v / last < 1.25 else True
            ax.text(0.99 if right else 0.01, v * 1.04, label, transform=trans,
                    ha="right" if right else "left", va="bottom", fontsize=6.5, color="0.2")
            last = v
        ax.set_ylim(lo, hi)

    # -- (d) stage-by-stage progression ---------------------------------------------------------

    def progression(self) -> None:
        plt = self.plt
        fig, axes = plt.subplots(1, 3, figsize=(15, 5.2))
        choice = self.common_shape()
        if choice is None:
            for ax in axes:
                self.no_data(ax, "shape shared by measured rows" if self.at_seq is None
                             else f"measured rows at N={self.at_seq}")
                ax.set_xticks([])
            fig.suptitle(f"Stage by stage — {self.header()}", fontsize=11)
            self.save(fig, "progression", self.footer(fig))
            return
        shape, per_stage = choice
        pss, dim, causal, bh, nq, nk = shape
        names, best = [], []
        for stage, rows in per_stage.items():
            ok = [r for r in rows if r["status"] == "ok"]
            if ok:
                r = min(ok, key=lambda r: r["median_ms"])
                dt = "" if r["_dtype"] == "float32" else f"\n{r['dtype']}"
                names.append(f"{stage}\n{r['variant']}{dt}")
                best.append(r)
            else:
                r = next((r for r in rows if r["status"] == "oom"), rows[0])
                names.append(f"{stage}\n{r['variant']}")
                best.append(r)
        xs = list(range(len(best)))
        colors = [self.style[group_key(r)][0] for r in best]
        panels = ((axes[0], "median_ms", "best median time (lower is better)", "ms (log)", fmt_ms),
                  (axes[1], "tflops", "TFLOP/s of that variant (higher is better)", "TFLOP/s (log)", fmt_tf),
                  (axes[2], "extra_bytes", "its extra memory, measured (lower is better)", "bytes (log)", fmt_bytes))
        for ax, field, title, ylabel, fmt in panels:
            vals = [r.get(field) if r["status"] == "ok" else None for r in best]
            pos = [v for v in vals if _positive(v)]
            ax.set_yscale("log")
            if pos:
                ax.set_ylim(min(pos) / 8, max(pos) * 8)
            bottom = ax.get_ylim()[0] if pos else 1.0
            for x, v, r, c in zip(xs, vals, best, colors):
                if _positive(v):
                    ax.bar(x, v - bottom, bottom=bottom, color=c, width=0.65, zorder=3)
                    ax.text(x, v * 1.15, fmt(v), ha="center", va="bottom", fontsize=8)
                else:
                    word = {"oom": "OOM", "skipped": "skipped", "failed": "failed"}.get(r["status"], "0 B")
                    ax.text(x, bottom * 1.5, word, ha="center", va="bottom", fontsize=9,
                            color="firebrick" if r["status"] == "oom" else "0.3", fontweight="bold")
            if field == "tflops":
                dts = {r["_dtype"] for r in best if r["status"] == "ok"}
                if len(dts) == 1:
                    self.draw_anchors(ax, pss, dts.pop(), dim, causal)
            if field == "extra_bytes":
                self.bytes_axis(ax)
            ax.set_xticks(xs)
            ax.set_xticklabels(names, fontsize=8)
            ax.set_xlim(-0.6, len(xs) - 0.4)
            ax.set_title(title, fontsize=10)
            ax.set_ylabel(ylabel)
            ax.grid(True, axis="y", alpha=0.3, zorder=0)
        n = fmt_n(nk) if nq == nk else f"{fmt_n(nq)}×{fmt_n(nk)}"
        shape_text = f"{pss}, N={n}, D={dim}, B·H={bh}{', causal' if causal else ''}"
        fig.suptitle(f"Stage by stage at {shape_text} — {self.header()}", fontsize=11)
        self.save(fig, "progression", self.footer(fig))

    def common_shape(self):
        """The shape that the most stages measured (ok or oom); ties go to the later stages, then
        to the larger N. Forward rows first: the backward has its own stages."""
        by_shape: "OrderedDict[tuple, OrderedDict]" = OrderedDict()
        for r in self.rows:
            if r["status"] not in ("ok", "oom"):
                continue
            if self.at_seq is not None and r["seq_k"] != self.at_seq:
                continue
            shape = (r["pass"], r["dim"], r["causal"], r["batch"] * r["heads"], r["seq_q"], r["seq_k"])
            by_shape.setdefault(shape, OrderedDict()).setdefault(r["stage"], []).append(r)
        if not by_shape:
            return None

        def rank(item):
            # Forward first; then the most stages; then the latest stage (results from several
            # machines: the GPU shapes, not the CPU ones); then the longest N.
            (pss, dim, causal, bh, nq, nk), stages = item
            ok_stages = sum(any(r["status"] == "ok" for r in rs) for rs in stages.values())
            return (pss == "fwd", len(stages), max(stages), ok_stages, nk, nq, -dim, not causal)

        shape, stages = max(by_shape.items(), key=rank)
        return shape, OrderedDict(sorted(stages.items()))

    def all(self) -> list[Path]:
        self.memory()
        self.time()
        self.tflops()
        self.progression()
        return self.written


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
        Plotter(docs, anchors, out, prefix, args.seq).all()
    except BadInput as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
