#!/bin/bash
# estimate of a job that does not fit names the changes that make it fit, where to write
# them and as --set; each, applied with --set, makes `estimate --require-fit` exit 0
# (issue 53 item 2: every suggested key works where the hint says to write it).
# usage: estimate_fit_changes_check.sh PARTUNE JOB (JOB must not fit, and some change must fix it)
set -u
partune=$1
job=$2
out=$("$partune" estimate "$job") || { echo "FAIL: estimate exited $?"; exit 1; }
grep -q '^DOES NOT FIT' <<<"$out" || { echo "FAIL: the job fits"; exit 1; }
n=0
while IFS= read -r sets; do
  n=$((n + 1))
  args=()
  read -ra words <<<"$sets"
  for w in "${words[@]}"; do [ "$w" = --set ] || args+=(--set "$w"); done
  "$partune" estimate "$job" "${args[@]}" --require-fit >/dev/null ||
    { echo "FAIL: estimate with the suggested ${args[*]} exited $? (does not fit, or refused)"; exit 1; }
done < <(sed -nE 's/^  .* in the job file \(or --set ([^)]*)\): .*/\1/p' <<<"$out")
[ "$n" -gt 0 ] || { echo "FAIL: no change suggested"; echo "$out"; exit 1; }
json=$("$partune" estimate "$job" --json) || { echo "FAIL: estimate --json exited $?"; exit 1; }
python3 -c 'import json,sys; j=json.load(sys.stdin); assert not j["fits"] and j["fit_changes"], j.get("fit_changes")' <<<"$json" ||
  { echo "FAIL: --json has no fit_changes"; exit 1; }
echo "estimate: $n suggested change(s), each makes estimate --require-fit exit 0"
