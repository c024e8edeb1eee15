#!/usr/bin/env python3
"""The glossary check: every course term that a chapter uses is defined in the glossary.

    check_glossary.py --docs DIR [--terms FILE]
    check_glossary.py --self-test

The terms are listed in tools/glossary_terms.txt (NAME | SPELLING ...). A chapter is a file
DIR/NN_*.md. For each term that some chapter uses (NAME or a SPELLING as a whole word, case
aside, a plural allowed), NAME must appear in the first column of a table of DIR/glossary.md,
or as a bold name that opens a line (**Name** = ...). Each missing term is reported with the
first chapter and line that use it. Exit 0 when none is missing, 1 otherwise, 2 on a usage error.
Standard library only.
"""
import argparse
import glob
import os
import re
import sys
import tempfile


def read_terms(path):
    """[(name, [patterns])] from the terms file; a pattern is a compiled regex for the chapters."""
    terms = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            spellings = [s.strip() for s in line.split("|") if s.strip()]
            terms.append((spellings[0], [chapter_pattern(s) for s in spellings]))
    return terms


def chapter_pattern(spelling):
    if spelling.endswith("*"):
        return re.compile(r"(?<![\w.])" + re.escape(spelling[:-1]), re.IGNORECASE)
    return re.compile(r"(?<![\w.])" + re.escape(spelling) + r"(?:s|es)?(?![\w])", re.IGNORECASE)


def glossary_names(path):
    """The text of every table's first column, and every bold name that opens a line, lowercased."""
    names = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.startswith("|"):
                cell = line.split("|")[1].strip()
                if cell and not set(cell) <= set("-: "):
                    names.append(cell.lower())
            bold = re.match(r"\*\*([^*]+)\*\*", line)
            if bold:
                names.append(bold.group(1).lower())
    return names


def defined(name, names):
    pattern = re.compile(r"(?<![\w.])" + re.escape(name.lower()) + r"(?![\w])")
    return any(pattern.search(cell) for cell in names)


def first_use(patterns, chapters):
    """(chapter, line number) of the first use of any pattern, or None."""
    for chapter in chapters:
        with open(chapter, encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                if any(p.search(line) for p in patterns):
                    return chapter, number
    return None


def check(docs, terms_file, out=sys.stdout):
    glossary = os.path.join(docs, "glossary.md")
    chapters = sorted(glob.glob(os.path.join(docs, "[0-9][0-9]_*.md")))
    if not os.path.isfile(glossary) or not chapters:
        print("check_glossary: %s needs glossary.md and chapters NN_*.md" % docs, file=sys.stderr)
        return 2
    names = glossary_names(glossary)
    terms = read_terms(terms_file)
    missing = used = 0
    for name, patterns in terms:
        where = first_use(patterns, chapters)
        if where is None:
            continue
        used += 1
        if not defined(name, names):
            missing += 1
            print("FAIL  %s: '%s' is used (first at %s:%d) but not defined"
                  % (glossary, name, os.path.relpath(where[0]), where[1]), file=out)
    if missing:
        print("%d of %d terms the chapters use are missing from the glossary: add a row whose first "
              "column names each" % (missing, used), file=out)
        return 1
    print("ok    the glossary defines all %d listed terms that the %d chapters use (%d listed)"
          % (used, len(chapters), len(terms)), file=out)
    return 0


def self_test():
    """The check fails on a chapter that uses a term the glossary lacks, and passes once it is added."""
    with tempfile.TemporaryDirectory() as tmp:
        terms = os.path.join(tmp, "terms.txt")
        with open(terms, "w", encoding="utf-8") as f:
            f.write("# test\nbank conflict\nswizzle | swizzl*\nunused term\n")
        with open(os.path.join(tmp, "04_x.md"), "w", encoding="utf-8") as f:
            f.write("A swizzled tile has no bank conflicts.\n")
        glossary = os.path.join(tmp, "glossary.md")
        with open(glossary, "w", encoding="utf-8") as f:
            f.write("| name | meaning |\n|---|---|\n| bank conflict | ... |\n")
        sink = open(os.devnull, "w")
        results = [check(tmp, terms, sink) == 1]  # swizzle is used and missing
        with open(glossary, "a", encoding="utf-8") as f:
            f.write("| swizzle | ... |\n")
        results.append(check(tmp, terms, sink) == 0)
        with open(os.path.join(tmp, "05_y.md"), "w", encoding="utf-8") as f:
            f.write("The unused terms are used now.\n")  # a plural counts as a use
        results.append(check(tmp, terms, sink) == 1)
        sink.close()
    if all(results):
        print("ok    self-test: a missing term fails, a defined one passes, a plural counts")
        return 0
    print("FAIL  self-test: %s" % results)
    return 1


def main():
    ap = argparse.ArgumentParser(prog="check_glossary.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--docs", help="the docs folder (chapters NN_*.md and glossary.md)")
    ap.add_argument("--terms", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "glossary_terms.txt"))
    ap.add_argument("--self-test", action="store_true")
    args = ap.parse_args()
    if args.self_test:
        return self_test()
    if not args.docs:
        ap.error("--docs DIR or --self-test")
    return check(args.docs, args.terms)


if __name__ == "__main__":
    sys.exit(main())
