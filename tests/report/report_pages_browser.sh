#!/usr/bin/env bash
# The --report pages of search, simulate and sweep, written by the partune binary from a
# shipped job and loaded in headless Chromium (Debian's `chromium`, which scripts/setup.sh
# installs): each page must load with no console message (no script error: the pages have
# no script at all), keep every SVG element through the browser's parser (the DOM it
# builds holds as many <svg>, <circle>, <rect> and <polyline> as the file), and lay every
# chart out with a size (render_check.html measures them in a frame). Also: the pages hold
# nothing outside themselves, the same search writes the same bytes, standard output is
# the same with --report as without, "wrote report FILE" is announced on standard error,
# and a path that cannot be written is one line and status 2.
# Without Chromium this test FAILS (it never skips).
# Usage: report_pages_browser.sh PARTUNE SOURCE_DIR WORK_DIR
set -euo pipefail
partune=$1 src=$2 out=$3
fail() { echo "FAIL: $*"; exit 1; }

browser=$(command -v chromium || command -v chromium-browser || true)
[ -n "$browser" ] || fail "no headless browser: install Debian's chromium (./scripts/setup.sh installs it)"
rm -rf "$out" && mkdir -p "$out"
# --disable-dev-shm-usage: a container's small /dev/shm must not crash the renderer.
chrome() { timeout 30 "$browser" --headless --no-sandbox --disable-gpu --disable-dev-shm-usage --user-data-dir="$out/profile" "$@"; }

job=$src/scenarios/jobs/gpt-neox-20b-p4d-16.yaml
"$partune" search "$job" --top-k 4 --report "$out/search.html" >"$out/search.txt" 2>"$out/search.err"
"$partune" search "$job" --top-k 4 --json --report "$out/search-again.html" >"$out/search-again.json" 2>/dev/null
cmp -s "$out/search.html" "$out/search-again.html" || fail "the same search wrote different pages"
"$partune" search "$job" --top-k 4 --json >"$out/search-plain.json"  # (the text has timings; the JSON none)
cmp -s "$out/search-again.json" "$out/search-plain.json" || fail "search printed something else with --report"
"$partune" simulate "$job" --report "$out/simulate.html" >"$out/simulate.txt" 2>"$out/simulate.err"
"$partune" simulate "$job" >"$out/simulate-plain.txt"
cmp -s "$out/simulate.txt" "$out/simulate-plain.txt" || fail "simulate printed something else with --report"
"$partune" sweep "$job" --vary nodes=8,16,32 --vary tensor_parallel_degree=2,4,8 --tokens 300e9 \
  --report "$out/sweep.html" >"$out/sweep.txt" 2>"$out/sweep.err"
for page in search simulate sweep; do
  grep -qx "wrote report $out/$page.html" "$out/$page.err" || fail "$page: no 'wrote report' line on stderr"
done

# A folder that does not exist: one line naming the path, status 2, before any work.
set +e
"$partune" simulate "$job" --report "$out/no-such-folder/page.html" >/dev/null 2>"$out/bad-path.err"
status=$?
set -e
[ "$status" -eq 2 ] || fail "a bad --report path exited $status, not 2"
[ "$(wc -l <"$out/bad-path.err")" -eq 1 ] && grep -q "no-such-folder/page.html" "$out/bad-path.err" ||
  fail "a bad --report path: expected one line naming it, got: $(cat "$out/bad-path.err")"

count() { grep -o "$2" "$1" | wc -l; }
for page in search simulate sweep; do
  file=$out/$page.html
  ! grep -qiE "<script|https?://|src=|<link" "$file" || fail "$page: the page reaches outside itself or has a script"
  chrome --enable-logging=stderr --v=0 --dump-dom "file://$file" >"$out/$page.dom" 2>"$out/$page.log" ||
    fail "$page: chromium failed: $(tail -3 "$out/$page.log")"
  ! grep -E ":CONSOLE|Uncaught" "$out/$page.log" || fail "$page: console messages while loading"
  for element in "<svg" "<circle" "<rect" "<polyline"; do
    [ "$(count "$out/$page.dom" "$element")" -eq "$(count "$file" "$element")" ] ||
      fail "$page: $element: $(count "$file" "$element") in the file, $(count "$out/$page.dom" "$element") in the browser's DOM"
  done
  chrome --allow-file-access-from-files --virtual-time-budget=10000 \
    --dump-dom "file://$src/tests/report/render_check.html#file://$file" >"$out/$page.render" 2>>"$out/$page.log"
  measured=$(sed -n 's:.*<pre id="result">\(.*\)</pre>.*:\1:p' "$out/$page.render" | sed 's/&quot;/"/g')
  echo "$page: $measured"
  PAGE=$page MEASURED=$measured SVGS=$(count "$file" "<svg") python3 - <<'PY' || fail "$page: not rendered as expected"
import json, os, sys
page, m, svgs = os.environ["PAGE"], json.loads(os.environ["MEASURED"]), int(os.environ["SVGS"])
# Charts each page must have: search 3 (candidates, step, memory), simulate 5 (step,
# ranks, timeline, memory, utilisation), sweep 4 (throughput, step, memory, cost).
expected = {"search": 3, "simulate": 5, "sweep": 4}[page]
problems = []
if m["svg"] != svgs or svgs < expected: problems.append(f"{m['svg']} <svg> laid out, {svgs} written, {expected} expected")
if m["svg_in_namespace"] != m["svg"]: problems.append("an <svg> not in SVG's namespace")
if m["svg_drawn"] != m["svg"]: problems.append("a chart drawn without its size")
for kind in ("circle", "rect", "polyline"):
    if m[f"{kind}_drawn"] != m[kind]: problems.append(f"{m[kind] - m[kind + '_drawn']} <{kind}> without a size")
if m["rect"] == 0 or m["text_drawn"] == 0: problems.append("no bars or no text")
if page == "search" and m["circle"] < 2: problems.append("no candidates (and ring)")
if page == "sweep" and m["polyline"] == 0: problems.append("no curves")
for p in problems: print(f"{page}: {p}")
sys.exit(1 if problems else 0)
PY
done
echo "report pages: search, simulate and sweep load and render in $("$browser" --version 2>/dev/null | head -1)"
