#!/bin/bash
# reproduce --markdown and scripts/readme-accuracy.sh, checked against the text and JSON
# reports of the same build (independent formatters of the same rows):
# - one Markdown row per JSON row, with the same published value and error;
# - every row off by more than 10% carries its table file's known_gap (none says "no
#   known_gap recorded"), and rows within 10% have an empty why;
# - the MAPE line repeats the text report's figures;
# - --check fails with a diff on a README whose block was altered, the generator restores
#   it, and a README without markers is exit 2 with one line.
# usage: readme_accuracy_check.sh PARTUNE REPO_ROOT
set -u
partune=$1
root=$2
fail() { echo "FAIL: $*"; exit 1; }
md=$("$partune" reproduce "$root/scenarios/tables" --estimator --markdown) || fail "--markdown exited $?"
json=$("$partune" reproduce "$root/scenarios/tables" --estimator --json) || fail "--json exited $?"
text=$("$partune" reproduce "$root/scenarios/tables" --estimator) || fail "text exited $?"

# The rows as "table|row|published|error%|why" from the Markdown, and the same from the JSON.
rows_md=$(awk -F' [|] ' '/^\| [a-z]/ && NF == 7 && $2 != "row" {
  sub(/^\| /, "", $1); sub(/ \|$/, "", $7); print $1 "|" $2 "|" $4 "|" $6 "|" $7 }' <<<"$md")
rows_json=$(python3 -c '
import json, sys
for r in json.load(sys.stdin)["rows"]:
    p = r["published"]
    pub = "%.0f" % p if abs(p) >= 1000 else "%.2f" % p
    print("%s|%s|%s|%+.1f%%|%s" % (r["table"], r["row"], pub, r["error_pct"], r["known_gap"]))
' <<<"$json") || fail "the JSON did not parse"
n_md=$(grep -c . <<<"$rows_md"); n_json=$(grep -c . <<<"$rows_json")
[ "$n_md" = "$n_json" ] && [ "$n_md" -gt 20 ] || fail "$n_md Markdown rows, $n_json JSON rows"
while IFS='|' read -r table row pub err why; do
  j=$(grep -F "$table|$row|" <<<"$rows_json") || fail "$row: not in the JSON"
  IFS='|' read -r _ _ jpub jerr jgap <<<"$j"
  [ "$pub" = "$jpub" ] && [ "$err" = "$jerr" ] || fail "$row: Markdown $pub $err, JSON $jpub $jerr"
  far=$(awk -v e="${err%\%}" 'BEGIN { print (e > 10 || e < -10) ? 1 : 0 }')
  if [ "$far" = 1 ]; then
    [ -n "$jgap" ] || fail "$row is $err off and its table file has no known_gap"
    [[ "$why" == *"${jgap:0:40}"* ]] || fail "$row: why '$why' is not its known_gap '${jgap:0:40}...'"
  else
    # Within 10% the column keeps only the verdicts (fit, direction), never a known_gap.
    flags=$(sed -E 's/predicted not to fit\.//; s/direction wrong[^.]*\.//; s/^ +| +$//g' <<<"$why")
    [ -z "$flags" ] || fail "$row is $err off (within 10%) but has a why: '$why'"
  fi
done <<<"$rows_md"
grep -q 'no `known_gap` recorded' <<<"$md" && fail "a far-off row has no known_gap"

# The summary line against the text report's.
read -r n mape tflops right pairs < <(sed -nE \
  's|^MAPE over all ([0-9]+) rows: ([0-9.]+)%   over TFLOPs rows: ([0-9.]+)%   directions right: ([0-9]+)/([0-9]+)$|\1 \2 \3 \4 \5|p' <<<"$text")
[ -n "${pairs:-}" ] || fail "no MAPE line in the text report"
grep -qE "^MAPE over all $n rows: $mape%; over the [0-9]+ TFLOPs rows: $tflops%; before/after and speedup directions right: $right of $pairs\.$" <<<"$md" ||
  fail "the Markdown's MAPE line does not say $n rows, $mape%, $tflops%, $right of $pairs"

# The generator on a copy of the README.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp "$root/README.md" "$tmp/README.md"
bash "$root/scripts/readme-accuracy.sh" --check --readme "$tmp/README.md" "$partune" >/dev/null ||
  fail "--check fails on the README itself (run scripts/readme-accuracy.sh)"
sed -i -E '/^\| smp-vs-deepspeed \| smp-sharded-30b \|/s/\| 141\.00 \|/| 151.00 |/' "$tmp/README.md"
cmp -s "$tmp/README.md" "$root/README.md" && fail "could not alter the copy's smp-sharded-30b row"
out=$(bash "$root/scripts/readme-accuracy.sh" --check --readme "$tmp/README.md" "$partune"); rc=$?
[ "$rc" = 1 ] || fail "--check on an altered block exited $rc, not 1"
grep -q '^-| smp-vs-deepspeed | smp-sharded-30b | .*| 151.00 |' <<<"$out" || fail "the diff does not show the altered row: $out"
bash "$root/scripts/readme-accuracy.sh" --readme "$tmp/README.md" "$partune" >/dev/null || fail "regenerating exited $?"
cmp -s "$tmp/README.md" "$root/README.md" || fail "regenerating did not restore the README"
grep -v 'reproduce:end' "$root/README.md" >"$tmp/README.md"
err=$(bash "$root/scripts/readme-accuracy.sh" --check --readme "$tmp/README.md" "$partune" 2>&1 >/dev/null); rc=$?
[ "$rc" = 2 ] && [ "$(grep -c . <<<"$err")" = 1 ] && [[ "$err" == *"reproduce:end"* ]] ||
  fail "a README without its end marker: exit $rc, '$err'"
echo "reproduce --markdown: $n_md rows equal to the JSON, every far-off row with its known_gap; the generator checks and restores"
