#!/usr/bin/python3
"""Every figure the docs quote from partune, regenerated from the binary (issue 53 item 6).

  scripts/doc-figures.py --write [--fast] [--only TEXT] [--partune BIN] [FILE.md ...]
  scripts/doc-figures.py --check [--all]  [--only TEXT] [--partune BIN] [FILE.md ...]

A generated region in a Markdown file is the output of one command between two lines:

  <!-- generated: partune search scenarios/jobs/X.yaml | sed -n '/^best:/,+1p' -->
  ...the command's output, written by this script...
  <!-- end generated -->

The command is bash, run from the repository root with `partune` meaning the binary
under test (--partune, default build/partune). Everything before the first ' | ' is the
partune command (run once per distinct text and reused by every region that quotes it);
the rest is a filter that selects the lines the text refers to (keep regions short). The
helper `untimed` deletes wall-clock figures ('(2.16 s)', 'in 1.2 s'), which would never
compare equal. Markers indented (inside a list item) indent the output as much. Words
between 'generated' and the colon are options:

  code     the output goes in a ``` block, after a line '$ <the partune command>'
  slow     the command takes more than ~20 s here: --write runs it, --check skips it
           unless --all is given (ctest check_doc_figures runs --check)
  exit=N   the partune command is expected to exit N (default 0; e.g. exit=2 for an
           error message, with 2>&1 in the command)

--write rewrites each region in place (a temporary file beside it, then a rename), and
also runs scripts/readme-accuracy.sh (the README's accuracy table, its own markers).
--check changes nothing; it exits 1 naming the file, the line and the command of every
region whose text is not what the binary prints now, with a diff. Exit 2: bad usage, no
binary, unpaired markers, a command that exited with another status or printed nothing.
Default files: README.md and docs/*.md. Wall-clock timings and measurements of this
machine are not generated: the docs quote them as measured, with their date.
"""
import argparse
import difflib
import glob
import os
import re
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BEGIN = re.compile(r"^(?P<indent> *)<!-- generated(?P<opts>(?: [a-z]+(?:=\d+)?)*): (?P<cmd>.+) -->$")
END = "<!-- end generated -->"
OPTIONS = {"code", "slow"}
REGENERATE = "scripts/doc-figures.py --write"

# Defined in the shell that runs every command and filter.
PRELUDE = r"""set -o pipefail
untimed() { sed -E 's/ ?\([0-9.]+ s\)//g; s/ in [0-9.]+ s\b//g'; }
export -f untimed
"""


class Usage(Exception):
    """Bad input: exit status 2."""


class Region:
    """One marked region: where it is, what runs it, what it holds now."""

    def __init__(self, path, begin, end, opts, cmd, body, indent=""):
        self.path, self.begin, self.end = path, begin, end  # begin/end: 0-based line numbers
        self.indent = indent  # the markers' indentation (inside a list item), given to the body
        self.cmd, self.body = cmd, body
        self.code = "code" in opts
        self.slow = "slow" in opts
        self.exit = 0
        for o in opts:
            if o.startswith("exit="):
                self.exit = int(o[5:])
            elif o not in OPTIONS:
                raise Usage(f"{self.where()}: unknown option '{o}' (code, slow, exit=N)")
        head, sep, tail = cmd.partition(" | ")
        self.head, self.filter = head.strip(), tail.strip() if sep else ""

    def where(self):
        return f"{os.path.relpath(self.path, ROOT)}:{self.begin + 1}"


def parse(path):
    """The regions of one file, in order; unpaired or nested markers are an error."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    regions, open_at = [], None
    for i, line in enumerate(lines):
        if line.lstrip().startswith("<!-- generated"):
            m = BEGIN.match(line)
            if not m:
                raise Usage(f"{os.path.relpath(path, ROOT)}:{i + 1}: a marker reads "
                            "'<!-- generated[ OPTIONS]: COMMAND -->'")
            if open_at is not None:
                raise Usage(f"{os.path.relpath(path, ROOT)}:{i + 1}: a region opens before "
                            f"the one at line {open_at[0] + 1} ends")
            open_at = (i, m)
        elif line.strip() == END:
            if open_at is None:
                raise Usage(f"{os.path.relpath(path, ROOT)}:{i + 1}: '{END}' without a region")
            b, m = open_at
            opts = m.group("opts").split()
            regions.append(Region(path, b, i, opts, m.group("cmd"), lines[b + 1:i], m.group("indent")))
            open_at = None
    if open_at is not None:
        raise Usage(f"{os.path.relpath(path, ROOT)}:{open_at[0] + 1}: no '{END}' after it")
    return lines, regions


class Runner:
    """Runs commands with `partune` meaning one binary; caches each partune command."""

    def __init__(self, partune):
        self.bindir = tempfile.mkdtemp(prefix="doc-figures.")
        os.symlink(partune, os.path.join(self.bindir, "partune"))
        self.env = dict(os.environ, PATH=self.bindir + os.pathsep + os.environ["PATH"])
        self.env.pop("PARTUNE_SCENARIOS", None)
        self.cache = {}

    def close(self):
        os.unlink(os.path.join(self.bindir, "partune"))
        os.rmdir(self.bindir)

    def bash(self, script, stdin=None):
        return subprocess.run(["bash", "-c", PRELUDE + script], cwd=ROOT, env=self.env,
                              input=stdin, capture_output=True, text=True)

    def output(self, region):
        """The region's new body (a list of lines); Usage when the command misbehaves."""
        if region.head not in self.cache:
            t = time.monotonic()
            p = self.bash(region.head)
            self.cache[region.head] = (p, time.monotonic() - t)
        p, secs = self.cache[region.head]
        if p.returncode != region.exit:
            raise Usage(f"{region.where()}: '{region.head}' exited {p.returncode}, "
                        f"not {region.exit}:\n{p.stderr.strip()[-2000:]}")
        text = p.stdout
        if region.filter:
            f = self.bash(region.filter, stdin=text)
            if f.returncode != 0:
                raise Usage(f"{region.where()}: the filter '{region.filter}' exited "
                            f"{f.returncode}: {f.stderr.strip()[-500:]}")
            text = f.stdout
        if not text.strip():
            raise Usage(f"{region.where()}: '{region.cmd}' printed nothing")
        body = [line.rstrip() for line in text.rstrip("\n").split("\n")]  # editors strip them
        if region.code:
            body = ["```", "$ " + region.head] + body + ["```"]
        body = [region.indent + line if line else line for line in body]
        return body, secs


def write_atomic(path, text):
    fd, tmp = tempfile.mkstemp(prefix=".doc-figures.", dir=os.path.dirname(path))
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, os.stat(path).st_mode & 0o7777)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def splice(path, outputs):
    """Writes each region of PATH whose command has an output; True if the file changed."""
    lines, regions = parse(path)
    new_lines, last = [], 0
    for r in regions:
        new_lines += lines[last:r.begin + 1] + outputs.get(r.cmd, r.body)
        last = r.end
    new_lines += lines[last:]
    if new_lines == lines:
        return False
    write_atomic(path, "\n".join(new_lines))
    return True


def default_files():
    return [os.path.join(ROOT, "README.md")] + sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))


def main(argv):
    ap = argparse.ArgumentParser(
        prog="doc-figures.py", formatter_class=argparse.RawDescriptionHelpFormatter,
        description=__doc__.split("\n\n", 1)[1])
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true", help="rewrite every region in place")
    mode.add_argument("--check", action="store_true", help="change nothing; exit 1 on drift")
    ap.add_argument("--all", action="store_true", help="--check: run the slow regions too")
    ap.add_argument("--fast", action="store_true", help="--write: skip the slow regions")
    ap.add_argument("--only", metavar="TEXT", help="only regions whose command contains TEXT")
    ap.add_argument("--times", action="store_true", help="print each command's seconds")
    ap.add_argument("--partune", metavar="BIN", default=os.path.join(ROOT, "build", "partune"))
    ap.add_argument("files", nargs="*", metavar="FILE.md")
    args = ap.parse_args(argv)
    partune = os.path.abspath(args.partune)
    if not (os.path.isfile(partune) and os.access(partune, os.X_OK)):
        raise Usage(f"{args.partune}: no partune binary (build it, or pass --partune BIN)")
    files = [os.path.abspath(f) for f in args.files] or default_files()
    skip_slow = (args.check and not args.all) or (args.write and args.fast)

    # Run everything first, then splice each file as it is at that moment: the commands
    # take minutes, and the files may be edited meanwhile (only the regions change).
    for path in files:
        if not os.path.isfile(path):
            raise Usage(f"{path}: no such file")
    runner = Runner(partune)
    outputs, drifted, skipped, started, timed = {}, [], 0, time.monotonic(), set()
    try:
        for path in files:
            for r in parse(path)[1]:
                if (args.only and args.only not in r.cmd) or (r.slow and skip_slow):
                    skipped += 1
                    continue
                body, secs = runner.output(r)
                outputs[r.cmd] = body
                if body != r.body:
                    drifted.append((r, body))
                if args.times and r.head not in timed:
                    timed.add(r.head)
                    print(f"{secs:6.1f} s  {r.where()}  {r.head}", file=sys.stderr)
                if secs > 20 and not r.slow:
                    print(f"{r.where()}: '{r.head}' took {secs:.0f} s; mark it slow",
                          file=sys.stderr)
    finally:
        runner.close()
    counted = sum(1 for path in files for r in parse(path)[1] if r.cmd in outputs)
    if args.write:
        for path in files:
            if splice(path, outputs):
                print(f"{os.path.relpath(path, ROOT)}: regenerated")

    took = time.monotonic() - started
    if args.write:
        acc = subprocess.run(["bash", os.path.join(ROOT, "scripts", "readme-accuracy.sh"), partune])
        if acc.returncode != 0:
            return acc.returncode
        print(f"{counted} regions written ({len(drifted)} changed, {skipped} skipped) in {took:.0f} s")
        return 0
    for r, body in drifted:
        print(f"{r.where()}: the output of '{r.cmd}' drifted:")
        diff = difflib.unified_diff(r.body, body, "documented", "partune prints now", lineterm="")
        print("\n".join(diff))
        print()
    if drifted:
        print(f"{len(drifted)} of {counted} generated regions drifted. Regenerate the docs with:\n"
              f"  {REGENERATE}\nthen read `git diff` and fix any prose that quotes the old figures.")
        return 1
    print(f"{counted} generated regions equal to what partune prints "
          f"({skipped} slow or filtered out not run; {took:.0f} s)")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except Usage as e:
        print(f"doc-figures.py: {e}", file=sys.stderr)
        sys.exit(2)
