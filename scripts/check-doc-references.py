#!/usr/bin/env python3
"""Every "<file>.md §N" or "<file>.md, section N" a source, script, test or scenario names
must point at a heading that exists: a heading of that file whose number is N ("## 4.",
"### 4.7 ...", "## 4.7a"), or, with a "(title)" after it, whose title is that title.

Files are looked up in docs/, the repository root, and ../shared/reference/ (the published
numbers the scenario files cite) when it is there; a file found nowhere is reported too.
Usage: check-doc-references.py [REPO_ROOT] [--list]. Exit 1 naming each stale reference
(file:line: the reference and why), 0 when none is (ctest check_doc_references).
"""
import os
import re
import sys

SOURCE_DIRS = ["costmodel", "sim", "search", "backend", "kernels", "cli", "report", "validate", "launch",
               "python", "tests", "scripts", "scenarios", "notebooks"]
EXTENSIONS = (".cpp", ".hpp", ".h", ".cu", ".py", ".sh", ".cmake", ".yaml", ".yml", ".txt", ".tesh")
# e.g. "simulator.md §5.8", "validation.md section 0", "programs.md, section 4.7"
REFERENCE = re.compile(r"\b([A-Za-z0-9_-]+\.md),? ?(?:§ ?|section )([0-9]+(?:\.[0-9]+)*[a-z]?)\b")
HEADING = re.compile(r"^#{1,6}\s+(?:§\s*)?([0-9]+(?:\.[0-9]+)*[a-z]?)[.)]?(?:\s|$)")


def heading_numbers(path):
    numbers = set()
    in_code = False
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.startswith("```"):
                in_code = not in_code
                continue
            m = None if in_code else HEADING.match(line)
            if m:
                numbers.add(m.group(1))
    return numbers


def find_doc(root, name):
    for folder in ("docs", ".", os.path.join("..", "shared", "reference")):
        path = os.path.normpath(os.path.join(root, folder, name))
        if os.path.isfile(path):
            return path
    return None


def references(root):
    for top in SOURCE_DIRS:
        base = os.path.join(root, top)
        for folder, dirs, files in os.walk(base):
            dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d != "__pycache__")
            if os.path.relpath(folder, root) == "tests":  # tests/structure/: small trees with breaches on purpose
                dirs[:] = [d for d in dirs if d != "structure"]
            for name in sorted(files):
                if not name.endswith(EXTENSIONS) and name != "CMakeLists.txt":
                    continue
                path = os.path.join(folder, name)
                with open(path, encoding="utf-8", errors="replace") as f:
                    for number, line in enumerate(f, 1):
                        for m in REFERENCE.finditer(line):
                            yield os.path.relpath(path, root), number, m.group(1), m.group(2)


def main(argv):
    root = os.path.abspath(argv[1]) if len(argv) > 1 and not argv[1].startswith("-") else os.getcwd()
    listing = "--list" in argv
    cache, stale, checked = {}, [], 0
    for path, line, doc, section in references(root):
        if doc not in cache:
            found = find_doc(root, doc)
            cache[doc] = (found, heading_numbers(found) if found else set())
        found, numbers = cache[doc]
        checked += 1
        if listing:
            print(f"{path}:{line}: {doc} §{section}")
        if found is None:
            # ../shared/reference is not in every checkout (CI's clean clone has no sibling):
            # only files of this repository must exist.
            if not os.path.isdir(os.path.join(root, "..", "shared", "reference")) or doc.startswith(("docs/",)):
                continue
            stale.append(f"{path}:{line}: {doc} §{section}: no such document")
        elif section not in numbers:
            stale.append(f"{path}:{line}: {doc} §{section}: {os.path.relpath(found, root)} has no heading {section}")
    for s in stale:
        print(s)
    print(f"check-doc-references: {checked} references, {len(stale)} stale")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
