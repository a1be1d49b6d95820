#!/usr/bin/env python3
"""Size limits of the project's sources (the developers' guide): no source file over 600
lines and no function over 80 in the library and tool folders, no cli/cmd_*.cpp over 120
lines (a sub-command parses options, calls one library function and prints).

Functions are found by braces: a body opens where a line's code ends in `{` after a `)`
(optionally followed by const, noexcept, override, an initialiser list, or a trailing
return type) at namespace or class scope, and closes at its matching `}`; lambdas and
local classes count toward the function that holds them. Comments and string literals
are skipped.

Usage: scripts/check-sizes.py [ROOT]   exit 1 and one line per breach, else 0.
"""
import pathlib
import re
import sys

FOLDERS = ["costmodel", "sim", "search", "backend", "kernels", "cli", "python", "validate", "report"]
SOURCES = (".cpp", ".hpp", ".h", ".cu", ".cuh")
MAX_FILE, MAX_FUNCTION, MAX_COMMAND = 600, 80, 120
SCOPE = re.compile(r"^\s*((template\s*<.*>\s*)?(namespace|struct|class|union|enum)\b|extern\s+\"C\")")
CONTROL = re.compile(r"^\s*(if|for|while|switch|catch|do|else|try)\b")


def code_of(text):
    """The text with comments and string/char literals blanked (line structure kept)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("\n" * text.count("\n", i, j))
            i = j
        elif text.startswith('R"', i):
            m = re.match(r'R"([^(]*)\(', text[i:])
            end = text.find(")" + (m.group(1) if m else "") + '"', i)
            end = n if end < 0 else end + len(m.group(1) if m else "") + 2
            out.append('""' + "\n" * text.count("\n", i, end))
            i = end
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(c + c)
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def functions(path):
    """(name, first line, length) of every function body in the file."""
    lines, directive = [], False
    for line in code_of(path.read_text(errors="replace")).split("\n"):
        directive = directive or line.lstrip().startswith("#")  # preprocessor lines and their continuations
        lines.append("" if directive else line)
        directive = directive and line.rstrip().endswith("\\")
    found, stack, statement = [], [], ""
    for number, line in enumerate(lines, 1):
        for ch in line:
            if ch == "{":
                opener = statement.strip()
                in_function = any(kind == "function" for kind, _, _ in stack)
                if not in_function and ")" in opener and not SCOPE.match(opener) and not CONTROL.match(opener) \
                        and not opener.endswith("="):
                    name = re.findall(r"([~\w:]+)\s*\(", opener)
                    stack.append(("function", name[0] if name else "?", number))
                elif not in_function and (SCOPE.match(opener) or opener == ""):
                    stack.append(("scope", "", number))
                else:
                    stack.append(("block", "", number))
                statement = ""
            elif ch == "}":
                if stack:
                    kind, name, start = stack.pop()
                    if kind == "function":
                        found.append((name, start, number - start + 1))
                statement = ""
            elif ch == ";":
                statement = ""
            else:
                statement += ch
        statement += " "
    return found


def main():
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parent.parent)
    problems = []
    for folder in FOLDERS:
        base = root / folder
        if not base.is_dir():
            continue
        for path in sorted(p for p in base.rglob("*") if p.suffix in SOURCES and p.is_file()):
            rel = path.relative_to(root)
            count = path.read_text(errors="replace").count("\n")
            limit = MAX_COMMAND if folder == "cli" and path.name.startswith("cmd_") else MAX_FILE
            if count > limit:
                problems.append(f"{rel}: {count} lines (limit {limit})")
            for name, start, length in functions(path):
                if length > MAX_FUNCTION:
                    problems.append(f"{rel}:{start}: {name} is {length} lines (limit {MAX_FUNCTION})")
    for p in problems:
        print(p)
    print(f"check-sizes: {len(problems)} over the limits" if problems else "check-sizes: every file and function within the limits")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
