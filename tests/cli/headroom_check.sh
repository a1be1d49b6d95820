#!/bin/bash
# `estimate` and `simulate` print the same memory total and the same headroom for it
# (HBM less the total); the simulation's timeline peak has its own line and headroom.
# usage: headroom_check.sh PARTUNE JOB...
set -u
partune=$1
shift
for job in "$@"; do
  est=$("$partune" estimate "$job") || { echo "FAIL: estimate $job exited $?"; exit 1; }
  sim=$("$partune" simulate "$job") || { echo "FAIL: simulate $job exited $?"; exit 1; }
  for what in '^  total ' '^fits: '; do
    a=$(grep -E "$what" <<<"$est"); b=$(grep -E "$what" <<<"$sim")
    [ -n "$a" ] || { echo "FAIL: $job: estimate printed no line matching '$what'"; exit 1; }
    [ "$a" = "$b" ] || { echo "FAIL: $job: estimate '$a' but simulate '$b'"; exit 1; }
  done
  # total X GiB of C GiB; headroom H GiB: H = C - X to the printed 0.01 GiB.
  read -r total cap < <(sed -nE 's/^  total +([0-9.]+) GiB of ([0-9.]+) GiB$/\1 \2/p' <<<"$est")
  head=$(sed -nE 's/^fits: yes, headroom ([0-9.]+) GiB.*/\1/p' <<<"$est")
  awk -v t="$total" -v c="$cap" -v h="$head" 'BEGIN { d = c - t - h; exit !(d < 0.011 && d > -0.011) }' ||
    { echo "FAIL: $job: headroom $head GiB is not $cap - $total GiB"; exit 1; }
  grep -qE '^peak memory over the timeline: [0-9.]+ GiB on the fullest rank \(headroom [0-9.]+ GiB\)$' <<<"$sim" ||
    { echo "FAIL: $job: simulate has no timeline peak line with its headroom"; exit 1; }
done
echo "same total and headroom in estimate and simulate for $# jobs"
