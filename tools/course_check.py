#!/usr/bin/env python3
"""The course check: exercises, solutions and stage code agree, and the exercises work.

    course_check.py --source DIR --build DIR

It proves, and reports each point:
  (a) exercises/ and solutions/ mirror each other path by path; every exercise has the same holes
      (regions between `// >>> exNN:tag` and `// <<< exNN:tag`) in the same files, in the same order;
  (b) every solution's checks pass (exit 0; exit 77, skipped, is allowed only for GPU exercises);
  (c) every starter's checks fail (non-zero, not 77) with output that names one of its TODO tags;
  (d) nothing drifts: each solution region equals the region with the same tag in the stage
      source (steps/NN_*/ for exNN), whitespace aside; every stage region of an existing exercise
      has its hole; each starter hole holds a TODO (FA_TODO("tag", ...) in host code, a device-side
      todo call in CUDA code); starter and solution are identical outside the regions, and files
      without regions (checks, headers, CMakeLists.txt) are identical.
The build folder must hold the built exercises: fa_add_exercise writes <build>/course/*.json, which
say where each executable is. Exit 0 when everything holds, 1 otherwise. Standard library only.
"""
import argparse
import glob
import json
import os
import re
import subprocess
import sys

OPEN = re.compile(r"^\s*//\s*>>>\s*(\S+)\s*$")
CLOSE = re.compile(r"^\s*//\s*<<<\s*(\S+)\s*$")
TAG = re.compile(r"^ex(\d\d):[A-Za-z0-9_]+$")
SKIP_NAMES = {"__pycache__", ".DS_Store"}
TIMEOUT_S = 300


class Report:
    def __init__(self):
        self.failures = 0

    def section(self, title):
        print("\n== " + title)

    def ok(self, text):
        print("  ok    " + text)

    def note(self, text):
        print("  note  " + text)

    def fail(self, text):
        self.failures += 1
        print("  FAIL  " + text)


def files_under(root):
    out = set()
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_NAMES and not d.startswith("."))
        for f in files:
            if f in SKIP_NAMES or f.startswith(".") or f.endswith(".pyc"):
                continue
            out.add(os.path.relpath(os.path.join(folder, f), root))
    return out


def read(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read()


def parse_regions(path):
    """Returns (text outside the regions, with each region's body replaced by its tag;
    [(tag, body lines)] in file order). Raises ValueError on malformed markers."""
    outside, regions, current, body = [], [], None, []
    for n, line in enumerate(read(path).split("\n"), 1):
        o, c = OPEN.match(line), CLOSE.match(line)
        if o:
            if current:
                raise ValueError("%s:%d: region %s opens inside region %s" % (path, n, o.group(1), current))
            if not TAG.match(o.group(1)):
                raise ValueError("%s:%d: '%s' is not a tag of the form exNN:name" % (path, n, o.group(1)))
            current, body = o.group(1), []
            outside.append(line)
        elif c:
            if c.group(1) != current:
                raise ValueError("%s:%d: region %s closes, but %s is open" % (path, n, c.group(1), current))
            regions.append((current, body))
            outside.append("<region %s>" % current)
            outside.append(line)
            current = None
        elif current:
            body.append(line)
        else:
            outside.append(line)
    if current:
        raise ValueError("%s: region %s never closes" % (path, current))
    tags = [t for t, _ in regions]
    if len(set(tags)) != len(tags):
        raise ValueError("%s: a tag appears twice: %s" % (path, tags))
    return "\n".join(outside), regions


TODO_CALL = re.compile(r"\b\w*todo\w*\s*\(", re.IGNORECASE)
FA_TODO_TAG = re.compile(r'\bFA_TODO\s*\(\s*"([^"]*)"')


def starter_hole_problem(tag, body):
    """Why a starter hole is not a proper hole, or None. A hole holds a TODO call: FA_TODO("tag",
    ...) in host code (it throws), or a device-side todo call in CUDA code, which cannot throw."""
    text = "\n".join(body)
    if not TODO_CALL.search(text):
        return 'holds no TODO (FA_TODO("%s", ...), or a device-side todo call): is it filled in?' % tag
    named = FA_TODO_TAG.findall(text)
    if any(n != tag for n in named):
        return "holds an FA_TODO that names %s" % ", ".join(n for n in named if n != tag)
    return None


def normalized(lines):
    return " ".join(" ".join(lines).split())


def exercise_folders(root):
    return sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)) and d not in SKIP_NAMES)


def is_gpu_exercise(source, folder):
    cm = os.path.join(source, "exercises", folder, "CMakeLists.txt")
    if not os.path.isfile(cm):
        return False
    for call in re.findall(r"fa_add_exercise\s*\(([^)]*)\)", read(cm)):
        if re.search(r"\bGPU\b", call):
            return True
    return False


# ---- (a) and (d): the sources ----------------------------------------------------------------

def check_sources(source, report):
    ex_root, sol_root = os.path.join(source, "exercises"), os.path.join(source, "solutions")
    report.section("(a) exercises/ and solutions/ mirror each other")
    ex_files, sol_files = files_under(ex_root), files_under(sol_root)
    for p in sorted(ex_files - sol_files):
        report.fail("exercises/%s has no twin in solutions/" % p)
    for p in sorted(sol_files - ex_files):
        report.fail("solutions/%s has no twin in exercises/" % p)
    ex_dirs, sol_dirs = exercise_folders(ex_root), exercise_folders(sol_root)
    if ex_dirs == sol_dirs:
        report.ok("%d exercises in both: %s" % (len(ex_dirs), ", ".join(ex_dirs)))
    else:
        report.fail("exercise folders differ: exercises/ %s, solutions/ %s" % (ex_dirs, sol_dirs))

    holes = {}  # tag -> (exercise folder, solution body)
    tags_by_folder = {}
    shared = sorted(ex_files & sol_files)
    report.section("(d) starters and solutions differ only inside the holes")
    for rel in shared:
        try:
            ex_out, ex_regions = parse_regions(os.path.join(ex_root, rel))
            sol_out, sol_regions = parse_regions(os.path.join(sol_root, rel))
        except ValueError as e:
            report.fail(str(e))
            continue
        folder = rel.split(os.sep)[0]
        ex_tags, sol_tags = [t for t, _ in ex_regions], [t for t, _ in sol_regions]
        if ex_tags != sol_tags:
            report.fail("%s: the holes differ: exercises/ %s, solutions/ %s" % (rel, ex_tags, sol_tags))
            continue
        if not ex_tags:
            if read(os.path.join(ex_root, rel)) == read(os.path.join(sol_root, rel)):
                report.ok("%s: identical in both (no holes)" % rel)
            else:
                report.fail("%s: has no holes, so it must be identical in exercises/ and solutions/, and is not" % rel)
            continue
        if ex_out != sol_out:
            first = next(i for i, (a, b) in enumerate(zip(ex_out.split("\n") + [""], sol_out.split("\n") + [""])) if a != b)
            report.fail("%s: starter and solution differ outside the holes (first at line %d of the text outside)"
                        % (rel, first + 1))
        else:
            report.ok("%s: %d holes %s; identical outside them" % (rel, len(ex_tags), ", ".join(ex_tags)))
        m = re.match(r"^(\d\d)_", folder)
        for (tag, ex_body), (_, sol_body) in zip(ex_regions, sol_regions):
            if not m or TAG.match(tag).group(1) != m.group(1):
                report.fail("%s: hole %s does not belong to exercise folder %s" % (rel, tag, folder))
            if tag in holes:
                report.fail("%s: hole %s also appears in another file" % (rel, tag))
            holes[tag] = (folder, sol_body, rel)
            tags_by_folder.setdefault(folder, []).append(tag)
            problem = starter_hole_problem(tag, ex_body)
            if problem:
                report.fail("exercises/%s: hole %s %s" % (rel, tag, problem))
            if normalized(ex_body) == normalized(sol_body):
                report.fail("%s: hole %s is the same in the starter and the solution" % (rel, tag))
    for folder in ex_dirs:
        if folder not in tags_by_folder:
            report.fail("exercises/%s has no holes" % folder)

    report.section("(d) every solution hole equals the stage code with the same tag")
    stage_regions = {}  # tag -> [(path, body)]
    for stage_dir in sorted(glob.glob(os.path.join(source, "steps", "[0-9][0-9]_*"))):
        for rel in sorted(files_under(stage_dir)):
            path = os.path.join(stage_dir, rel)
            try:
                _, regions = parse_regions(path)
            except ValueError as e:
                report.fail(str(e))
                continue
            for tag, body in regions:
                stage_regions.setdefault(tag, []).append((os.path.relpath(path, source), body))
    for tag, (folder, sol_body, rel) in sorted(holes.items()):
        number = TAG.match(tag).group(1)
        stage_dirs = glob.glob(os.path.join(source, "steps", number + "_*"))
        if len(stage_dirs) != 1:
            report.fail("%s: expected one stage folder steps/%s_*, found %d" % (tag, number, len(stage_dirs)))
            continue
        found = [(p, b) for p, b in stage_regions.get(tag, []) if p.startswith(os.path.relpath(stage_dirs[0], source) + os.sep)]
        if len(found) != 1:
            report.fail("%s: the stage %s holds %d regions with this tag, expected 1"
                        % (tag, os.path.relpath(stage_dirs[0], source), len(found)))
            continue
        path, body = found[0]
        if normalized(body) == normalized(sol_body):
            report.ok("%s: solutions/%s = %s" % (tag, rel, path))
        else:
            report.fail("%s: solutions/%s differs from %s (copy the stage code into the solution, or fix the stage)"
                        % (tag, rel, path))
    numbers = set(f[:2] for f in exercise_folders(os.path.join(source, "exercises")))
    for tag, places in sorted(stage_regions.items()):
        if tag in holes:
            continue
        if TAG.match(tag).group(1) in numbers:
            report.fail("%s: %s marks a region that exercise %s does not have as a hole"
                        % (tag, places[0][0], TAG.match(tag).group(1)))
        else:  # the stage is marked up before its exercise is written: not drift yet
            report.note("%s: %s marks a region, and there is no exercise %s yet"
                        % (tag, places[0][0], TAG.match(tag).group(1)))
    return ex_dirs, tags_by_folder


# ---- (b) and (c): the executables ------------------------------------------------------------

def load_manifests(build, report):
    entries = {}
    for path in sorted(glob.glob(os.path.join(build, "course", "*.json"))):
        try:
            with open(path) as f:
                e = json.load(f)
            entries[(e["folder"], e["role"])] = e
        except (ValueError, KeyError) as err:
            report.fail("%s: unreadable manifest (%s)" % (path, err))
    return entries


def run_checks(exe):
    try:
        proc = subprocess.run([exe], capture_output=True, text=True, timeout=TIMEOUT_S)
        return proc.returncode, proc.stdout + proc.stderr
    except subprocess.TimeoutExpired:
        return None, "did not finish within %d s" % TIMEOUT_S


def check_executables(source, build, ex_dirs, tags_by_folder, report):
    entries = load_manifests(build, report)
    for (folder, role) in sorted(entries):
        if not os.path.isdir(os.path.join(source, folder)):
            report.note("%s: a manifest in %s/course names a folder that no longer exists; ignored" % (folder, build))
    rows = []
    for folder in ex_dirs:
        gpu = is_gpu_exercise(source, folder)
        tags = tags_by_folder.get(folder, [])
        for role, tree in (("solution", "solutions"), ("starter", "exercises")):
            e = entries.get((tree + "/" + folder, role))
            what = "%s/%s" % (tree, folder)
            if e is None:
                if gpu:
                    report.note("%s: not built (a GPU exercise, and this build has no CUDA): skipped" % what)
                    rows.append((folder, role, "skipped (not built)"))
                else:
                    report.fail("%s: no %s/course manifest: was it added with fa_add_exercise and configured?" % (what, build))
                    rows.append((folder, role, "missing"))
                continue
            if not os.path.isfile(e["exe"]):
                report.fail("%s: %s is not built (run: cmake --build %s)" % (what, e["exe"], build))
                rows.append((folder, role, "not built"))
                continue
            code, output = run_checks(e["exe"])
            if code == 77:
                if e.get("gpu"):
                    report.note("%s (%s): skipped, exit 77 (no CUDA device)" % (what, e["target"]))
                    rows.append((folder, role, "skipped (77)"))
                else:
                    report.fail("%s (%s): exit 77 (skipped), which only a GPU exercise may return" % (what, e["target"]))
                    rows.append((folder, role, "FAIL: 77"))
                continue
            if role == "solution":
                if code == 0:
                    report.ok("%s (%s): its checks pass" % (what, e["target"]))
                    rows.append((folder, role, "pass"))
                else:
                    report.fail("%s (%s): its checks fail (exit %s):\n%s" % (what, e["target"], code, indent(output)))
                    rows.append((folder, role, "FAIL: exit %s" % code))
            else:
                named = [t for t in tags if t in output]
                if code is None or code == 0:
                    report.fail("%s (%s): its checks %s; a starter must fail"
                                % (what, e["target"], "pass" if code == 0 else "hang"))
                    rows.append((folder, role, "FAIL: passes" if code == 0 else "FAIL: hangs"))
                elif not named:
                    report.fail("%s (%s): fails (exit %s) but its output names none of its TODOs %s:\n%s"
                                % (what, e["target"], code, tags, indent(output)))
                    rows.append((folder, role, "FAIL: no TODO named"))
                else:
                    report.ok("%s (%s): fails as it should (exit %s), naming %s" % (what, e["target"], code, named[0]))
                    rows.append((folder, role, "fails, names %s" % named[0]))
    return rows


def indent(text, lines=25):
    tail = text.strip().splitlines()[-lines:]
    return "\n".join("          " + line for line in tail)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", required=True, help="the course's source folder")
    parser.add_argument("--build", required=True, help="a build folder where the exercises are built")
    args = parser.parse_args()
    source, build = os.path.abspath(args.source), os.path.abspath(args.build)
    report = Report()
    print("course check: source %s, build %s" % (source, build))
    ex_dirs, tags_by_folder = check_sources(source, report)
    report.section("(b) every solution passes its checks, (c) every starter fails them, naming a TODO")
    rows = check_executables(source, build, ex_dirs, tags_by_folder, report)

    report.section("summary")
    for folder in ex_dirs:
        results = dict((role, r) for f, role, r in rows if f == folder)
        print("  %-28s %2d holes   solution: %-14s starter: %s"
              % (folder, len(tags_by_folder.get(folder, [])), results.get("solution", "-"), results.get("starter", "-")))
    if report.failures:
        print("\nFAIL: %d problem(s) above" % report.failures)
        return 1
    print("\nPASS: the course check holds")
    return 0


if __name__ == "__main__":
    sys.exit(main())
