#!/usr/bin/env python3
"""The course check: exercises, solutions and stage code agree, and the exercises work.

    course_check.py --source DIR --build DIR

A hole is a small header that a stage's own code includes with angle brackets: a file of
steps/NN_name/holes/, or a header of common/ that stage NN taught (fa/cuda/...). exercises/NN_name/
holds the starter of each hole (same path), the checks and the CMakeLists.txt; solutions/NN_name/
holds only the filled holes. It proves, and reports each point:
  (a) the trees: the same exercise folders in exercises/ and solutions/, each with its stage
      steps/NN_name/; no file under either holds a __global__ kernel; no file of one tree is
      byte-identical to a file of the other; the checks include a hole only with angle brackets;
      each exercise has its hints, exercises/NN_name/hints.md, "## Hint 1" .. "## Hint n", each
      with text (what `./course hint` shows one at a time), and no starter keeps them in its header;
  (b) every solution file equals the stage's hole at the same path, byte for byte, and every file
      of steps/NN_name/holes/ has its solution and its starter (the counts match);
  (c) each starter hole has the solution's marked regions (`// >>> exNN:tag` .. `// <<< exNN:tag`),
      with the same tags in the same order, each holding a TODO (FA_TODO("tag", ...) in host code,
      fa::device_todo("tag", ...) in device code) where the solution holds code; a region marked
      in stage code outside a hole is drift;
  (d) every solution's checks pass (exit 0; exit 77, skipped, is allowed only for GPU exercises);
  (e) every starter's checks fail (non-zero, not 77) with output that names one of its TODO tags.
The build folder must hold the built exercises: fa_add_exercise writes <build>/course/*.json, which
say where each executable is. Exit 0 when everything holds, 1 otherwise. Standard library only.
"""
import glob
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from flashcourse import guard  # noqa: E402  (one-line errors, exit 2)

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
TODO_TAG = re.compile(r'\b(?:FA_TODO|device_todo)\s*\(\s*"([^"]*)"')
KERNEL = re.compile(r"\b__global__\b")
QUOTED_INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.MULTILINE)
# Where a hole that is a header of common/ lives: the include folders of the common library.
COMMON_INCLUDE_ROOTS = ("common/cuda/include", "common/include")


def starter_hole_problem(tag, body):
    """Why a starter region is not a proper hole, or None. A hole holds a TODO call: FA_TODO("tag",
    ...) in host code (it throws), or fa::device_todo("tag", ...) in device code, which cannot throw."""
    text = "\n".join(body)
    if not TODO_CALL.search(text):
        return 'holds no TODO (FA_TODO("%s", ...), or fa::device_todo("%s", ...)): is it filled in?' % (tag, tag)
    named = TODO_TAG.findall(text)
    if any(n != tag for n in named):
        return "holds a TODO that names %s" % ", ".join(n for n in named if n != tag)
    return None


def normalized(lines):
    return " ".join(" ".join(lines).split())


def exercise_folders(root):
    if not os.path.isdir(root):
        return []
    # A folder without files is not an exercise (git keeps no empty folder; one left behind by a
    # rename in a working copy is ignored).
    return sorted(d for d in os.listdir(root)
                  if os.path.isdir(os.path.join(root, d)) and d not in SKIP_NAMES and files_under(os.path.join(root, d)))


def is_gpu_exercise(source, folder):
    cm = os.path.join(source, "exercises", folder, "CMakeLists.txt")
    if not os.path.isfile(cm):
        return False
    for call in re.findall(r"fa_add_exercise\s*\(([^)]*)\)", read(cm)):
        if re.search(r"\bGPU\b", call):
            return True
    return False


def read_bytes(path):
    with open(path, "rb") as f:
        return f.read()


def stage_hole_path(source, stage_dir, rel):
    """The stage's file that solutions/NN_name/rel must equal: steps/NN_name/holes/rel, or, for a
    header of common/ (a path such as fa/cuda/tc/fragment_softmax.cuh), that header. None if neither."""
    candidates = [os.path.join(stage_dir, "holes", rel)]
    candidates += [os.path.join(source, root, rel) for root in COMMON_INCLUDE_ROOTS]
    for path in candidates:
        if os.path.isfile(path):
            return path
    return None


# ---- (a), (b), (c): the sources ----------------------------------------------------------------

def check_trees(source, report):
    ex_root, sol_root = os.path.join(source, "exercises"), os.path.join(source, "solutions")
    report.section("(a) the trees: exercise folders, their stages, no kernels, no identical files")
    ex_dirs, sol_dirs = exercise_folders(ex_root), exercise_folders(sol_root)
    if ex_dirs == sol_dirs:
        report.ok("%d exercises in both trees: %s" % (len(ex_dirs), ", ".join(ex_dirs)))
    else:
        report.fail("exercise folders differ: exercises/ %s, solutions/ %s" % (ex_dirs, sol_dirs))
    for folder in ex_dirs:
        if not re.match(r"^\d\d_", folder):
            report.fail("exercises/%s: an exercise folder is named NN_name, after its stage" % folder)
        elif not os.path.isdir(os.path.join(source, "steps", folder)):
            report.fail("exercises/%s: there is no stage steps/%s" % (folder, folder))

    kernels = 0
    by_content = {}
    for tree, root in (("exercises", ex_root), ("solutions", sol_root)):
        for rel in sorted(files_under(root)):
            path = os.path.join(root, rel)
            if KERNEL.search(read(path)):
                kernels += 1
                report.fail("%s/%s holds a __global__ kernel: a hole is a header the stage's kernel includes, "
                            "never a copy of the kernel" % (tree, rel))
            by_content.setdefault(read_bytes(path), []).append("%s/%s" % (tree, rel))
    if not kernels:
        report.ok("no file under exercises/ or solutions/ holds a __global__ kernel")
    identical = [paths for paths in by_content.values()
                 if any(p.startswith("exercises/") for p in paths) and any(p.startswith("solutions/") for p in paths)]
    for paths in identical:
        report.fail("byte-identical across the trees: %s (a file both trees need belongs to the stage, or "
                    "to exercises/ alone)" % ", ".join(paths))
    if not identical:
        report.ok("no file of exercises/ is byte-identical to a file of solutions/")
    return ex_dirs


def check_hints(source, ex_dirs, report):
    """Part of (a): every exercise's hints.md holds "## Hint 1" .. "## Hint n" in order, none empty,
    as `./course hint` reads them; the hints are not also in a starter's header."""
    good = 0
    for folder in ex_dirs:
        path = os.path.join(source, "exercises", folder, "hints.md")
        if not os.path.isfile(path):
            report.fail("exercises/%s/hints.md is missing: `./course hint` has nothing to show" % folder)
            continue
        sections = re.split(r"^## Hint (\d+)\s*$", read(path), flags=re.MULTILINE)
        numbers = [int(n) for n in sections[1::2]]
        empty = [n for n, body in zip(numbers, sections[2::2]) if not body.strip(" \n`text")]
        in_header = sorted(rel for rel in files_under(os.path.join(source, "exercises", folder))
                           if rel != "hints.md" and "Hints, one at a time" in read(os.path.join(source, "exercises", folder, rel)))
        if not numbers or numbers != list(range(1, len(numbers) + 1)):
            report.fail("exercises/%s/hints.md: its sections must be '## Hint 1' .. '## Hint n' in order (found %s)"
                        % (folder, numbers or "none"))
        elif empty:
            report.fail("exercises/%s/hints.md: hint %s has no text" % (folder, empty[0]))
        elif in_header:
            report.fail("exercises/%s/%s still lists the hints in its header: they are shown one at a time "
                        "from hints.md" % (folder, in_header[0]))
        else:
            good += 1
    if good == len(ex_dirs):
        report.ok("every exercise has its hints in hints.md (`./course hint exNN`), none in a starter's header")


def check_holes(source, ex_dirs, report):
    ex_root, sol_root = os.path.join(source, "exercises"), os.path.join(source, "solutions")
    report.section("(b) every solution is the stage's hole, byte for byte; every hole has its starter")
    holes_by_folder = {}  # folder -> [rel]
    for folder in ex_dirs:
        stage_dir = os.path.join(source, "steps", folder)
        sol_files = sorted(files_under(os.path.join(sol_root, folder)))
        ex_files = files_under(os.path.join(ex_root, folder))
        if not sol_files:
            report.fail("solutions/%s holds no hole" % folder)
        for rel in sol_files:
            stage_file = stage_hole_path(source, stage_dir, rel)
            if stage_file is None:
                report.fail("solutions/%s/%s: no stage file steps/%s/holes/%s (nor a header %s of common/): "
                            "solutions/ holds only the stage's holes" % (folder, rel, folder, rel, rel))
                continue
            where = os.path.relpath(stage_file, source)
            if read_bytes(stage_file) == read_bytes(os.path.join(sol_root, folder, rel)):
                report.ok("solutions/%s/%s = %s" % (folder, rel, where))
            else:
                report.fail("solutions/%s/%s differs from %s (copy the stage's file: cp %s solutions/%s/%s)"
                            % (folder, rel, where, where, folder, rel))
            if rel not in ex_files:
                report.fail("exercises/%s/%s: the starter of this hole is missing" % (folder, rel))
            holes_by_folder.setdefault(folder, []).append(rel)
        holes_dir = os.path.join(stage_dir, "holes")
        for rel in sorted(files_under(holes_dir)) if os.path.isdir(holes_dir) else []:
            if rel not in sol_files:
                report.fail("steps/%s/holes/%s has no solution solutions/%s/%s (and starter)" % (folder, rel, folder, rel))
        # The checks must reach a hole through the include path, or the solution's build would
        # compile the starter next to them.
        for rel in sorted(ex_files - set(sol_files)):
            for included in QUOTED_INCLUDE.findall(read(os.path.join(ex_root, folder, rel))):
                if included in sol_files:
                    report.fail('exercises/%s/%s: #include "%s" finds the starter even in the solution\'s build; '
                                "write #include <%s>" % (folder, rel, included, included))
    counted = sum(len(v) for v in holes_by_folder.values())
    report.ok("%d hole files in %d exercises" % (counted, len(holes_by_folder)))
    for stage_dir in sorted(glob.glob(os.path.join(source, "steps", "[0-9][0-9]_*"))):
        folder = os.path.basename(stage_dir)
        if folder not in ex_dirs and os.path.isdir(os.path.join(stage_dir, "holes")):
            report.note("steps/%s/holes/ exists, and there is no exercise %s yet" % (folder, folder[:2]))
    return holes_by_folder


def check_regions(source, holes_by_folder, report):
    ex_root, sol_root = os.path.join(source, "exercises"), os.path.join(source, "solutions")
    report.section("(c) each starter hole has the solution's regions, each a TODO")
    tags_by_folder = {}
    for folder, rels in sorted(holes_by_folder.items()):
        for rel in rels:
            starter = os.path.join(ex_root, folder, rel)
            if not os.path.isfile(starter):
                continue  # reported in (b)
            try:
                _, ex_regions = parse_regions(starter)
                _, sol_regions = parse_regions(os.path.join(sol_root, folder, rel))
            except ValueError as e:
                report.fail(str(e))
                continue
            ex_tags, sol_tags = [t for t, _ in ex_regions], [t for t, _ in sol_regions]
            if ex_tags != sol_tags:
                report.fail("%s/%s: the regions differ: exercises/ %s, solutions/ %s" % (folder, rel, ex_tags, sol_tags))
                continue
            if not ex_tags:
                report.fail("%s/%s: no marked region (// >>> ex%s:tag ... // <<< ex%s:tag)"
                            % (folder, rel, folder[:2], folder[:2]))
                continue
            bad = 0
            for (tag, ex_body), (_, sol_body) in zip(ex_regions, sol_regions):
                if TAG.match(tag).group(1) != folder[:2]:
                    bad += 1
                    report.fail("%s/%s: region %s does not belong to exercise %s" % (folder, rel, tag, folder[:2]))
                problem = starter_hole_problem(tag, ex_body)
                if problem:
                    bad += 1
                    report.fail("exercises/%s/%s: region %s %s" % (folder, rel, tag, problem))
                if normalized(ex_body) == normalized(sol_body):
                    bad += 1
                    report.fail("%s/%s: region %s is the same in the starter and the solution" % (folder, rel, tag))
                tags_by_folder.setdefault(folder, []).append(tag)
            if not bad:
                report.ok("exercises/%s/%s: %d TODO regions %s" % (folder, rel, len(ex_tags), ", ".join(ex_tags)))
        all_tags = tags_by_folder.get(folder, [])
        if len(set(all_tags)) != len(all_tags):
            report.fail("exercises/%s: a region tag appears twice: %s" % (folder, all_tags))

    # A region marked in stage code outside a hole: the code an exercise used to copy.
    hole_files = set()
    for folder, rels in holes_by_folder.items():
        for rel in rels:
            path = stage_hole_path(source, os.path.join(source, "steps", folder), rel)
            if path:
                hole_files.add(os.path.realpath(path))
    roots = sorted(glob.glob(os.path.join(source, "steps", "[0-9][0-9]_*")))
    roots += [os.path.join(source, r) for r in COMMON_INCLUDE_ROOTS]
    numbers = set(f[:2] for f in holes_by_folder)
    for root in roots:
        for rel in sorted(files_under(root)):
            path = os.path.join(root, rel)
            if os.path.realpath(path) in hole_files or not rel.endswith((".h", ".hpp", ".cuh", ".cpp", ".cu")):
                continue
            try:
                _, regions = parse_regions(path)
            except ValueError as e:
                report.fail(str(e))
                continue
            for tag, _ in regions:
                where = os.path.relpath(path, source)
                if TAG.match(tag).group(1) in numbers:
                    report.fail("%s: region %s outside the exercise's holes (move it into a hole header)" % (where, tag))
                else:
                    report.note("%s: marks region %s, and exercise %s has no hole yet" % (where, tag, tag[2:4]))
    return tags_by_folder


# ---- (d) and (e): the executables ------------------------------------------------------------

def load_manifests(build, report):
    entries = {}
    for path in sorted(glob.glob(os.path.join(build, "course", "*.json"))):
        try:
            e = guard.read_json(path)
            entries[(e["folder"], e["role"])] = e
        except (ValueError, KeyError, TypeError) as err:  # guard.BadInput is a ValueError
            report.fail("%s: unreadable manifest (%s)" % (path, guard.one_line(err)))
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
    parser = guard.OneLineParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", required=True, help="the course's source folder")
    parser.add_argument("--build", required=True, help="a build folder where the exercises are built")
    args = parser.parse_args()
    source, build = os.path.abspath(args.source), os.path.abspath(args.build)
    report = Report()
    print("course check: source %s, build %s" % (source, build))
    ex_dirs = check_trees(source, report)
    check_hints(source, ex_dirs, report)
    holes_by_folder = check_holes(source, ex_dirs, report)
    tags_by_folder = check_regions(source, holes_by_folder, report)
    report.section("(d) every solution passes its checks, (e) every starter fails them, naming a TODO")
    rows = check_executables(source, build, ex_dirs, tags_by_folder, report)

    report.section("summary")
    for folder in ex_dirs:
        results = dict((role, r) for f, role, r in rows if f == folder)
        print("  %-26s %d files %2d TODOs   solution: %-14s starter: %s"
              % (folder, len(holes_by_folder.get(folder, [])), len(tags_by_folder.get(folder, [])),
                 results.get("solution", "-"), results.get("starter", "-")))
    if report.failures:
        print("\nFAIL: %d problem(s) above" % report.failures)
        return 1
    print("\nPASS: the course check holds")
    return 0


if __name__ == "__main__":
    sys.exit(guard.run_main("course_check.py", main))
