#!/bin/bash
# When no configuration fits (issue 53 item 2): `search` answers in a few lines, the
# closest candidates one per layout, each with the changes that make it fit; and every
# change suggested works where the answer says to write it: given by --set, and written
# into a copy of the job file, the search then finds a configuration that fits, and
# `estimate` of the job it writes says it fits.
# usage: nothing_fits_check.sh PARTUNE JOB (JOB must not fit on one node)
set -u
partune=$1
job=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

err=$("$partune" search "$job" --set nodes=1 --estimator-only 2>&1 >/dev/null)
rc=$?
[ "$rc" = 3 ] || { echo "FAIL: search on one node exited $rc, not 3"; echo "$err"; exit 1; }
lines=$(wc -l <<<"$err")
[ "$lines" -le 12 ] || { echo "FAIL: $lines lines when nothing fits (at most 12)"; echo "$err"; exit 1; }
grep -qE '^  1\. .*: [0-9.]+ GiB short \(needs [0-9.]+ GiB' <<<"$err" ||
  { echo "FAIL: no ranked closest candidate"; echo "$err"; exit 1; }
if grep -qE 'Why some were dropped|does not fit: stage' <<<"$err"; then
  echo "FAIL: the old per-candidate lines are back"; echo "$err"; exit 1
fi

# Every suggested --set works through --set ...
n=0
while IFS= read -r sets; do
  n=$((n + 1))
  args=()
  read -ra words <<<"$sets"
  for w in "${words[@]}"; do [ "$w" = --set ] || args+=(--set "$w"); done
  "$partune" search "$job" --set nodes=1 "${args[@]}" --estimator-only --write-job "$tmp/best.yaml" >/dev/null ||
    { echo "FAIL: search with the suggested ${args[*]} exited $?"; exit 1; }
  "$partune" estimate "$tmp/best.yaml" --require-fit >/dev/null ||
    { echo "FAIL: the job found with ${args[*]} does not fit by estimate"; exit 1; }
done < <(sed -nE 's/.* in the job file \(or --set ([^)]*)\).*/\1/p' <<<"$err" | sort -u)
[ "$n" -gt 0 ] || { echo "FAIL: no change suggested"; echo "$err"; exit 1; }

# ... and the state offload written into the job file, where the answer says, does too.
if grep -q 'parallel.offload_optimizer: true in the job file' <<<"$err"; then
  sed -E 's/^(  nodes:).*/\1 1/; s/^parallel:$/parallel:\n  offload_optimizer: true/' "$job" >"$tmp/job.yaml"
  grep -q '^  offload_optimizer: true' "$tmp/job.yaml" || { echo "FAIL: could not edit the job file"; exit 1; }
  "$partune" search "$tmp/job.yaml" --estimator-only >/dev/null ||
    { echo "FAIL: parallel.offload_optimizer: true in the job file did not make the search fit"; exit 1; }
fi
echo "nothing fits: $lines lines, $n suggested change(s), each verified by search and estimate"
