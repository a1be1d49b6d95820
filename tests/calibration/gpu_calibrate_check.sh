#!/bin/bash
# `partune calibrate --device cuda` where it can be checked without a GPU, and the
# single-GPU datasheet files under `partune estimate`.
# usage: gpu_calibrate_check.sh PARTUNE PARTUNE_RUN JOB.yaml
#   1. With no CUDA device (a CPU-only LibTorch, or no GPU) calibrate --device cuda refuses
#      with exit 2 and one line naming why, and writes nothing. Where a GPU is visible it
#      runs --quick instead and its file must be a loadable instance type (or, for a GPU
#      with no datasheet file, the refusal names it).
#   2. `partune estimate` accepts a job on h100-sxm-device and on h200-device.
set -u
partune=$1
runner=$2
job=$3
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; for f in "$dir"/*; do echo "--- $f"; cat "$f"; done; exit 1; }

"$runner" calibrate --device cuda --quick --out "$dir/gpu.yaml" --json >"$dir/cal.out" 2>"$dir/cal.err"
rc=$?
if [ $rc = 2 ]; then
  [ "$(wc -l <"$dir/cal.err")" = 1 ] || fail "the refusal should be one line"
  grep -qE 'calibrate --device cuda: (no CUDA device is visible \(LibTorch [0-9.a-z+]+ built without CUDA, or no GPU\)|no datasheet instance type for)' \
    "$dir/cal.err" || fail "the refusal should say why"
  [ ! -e "$dir/gpu.yaml" ] || fail "a refused calibration wrote $dir/gpu.yaml"
  ls "$dir"/.gpu.yaml.tmp-* >/dev/null 2>&1 && fail "a refused calibration left a temporary file"
elif [ $rc = 0 ]; then
  grep -q '^  device: cuda' "$dir/gpu.yaml" || fail "the profile has no calibration.device: cuda"
  grep -q '"device": "cuda"' "$dir/cal.out" || fail "--json has no device"
  "$partune" estimate "$job" --set "instance_type=$dir/gpu.yaml" --json >"$dir/est.json" 2>"$dir/est.err" ||
    fail "estimate on the measured profile exited $?"
else
  fail "calibrate --device cuda exited $rc"
fi
# An unknown device is refused by the option check.
"$runner" calibrate --device tpu --out "$dir/x.yaml" >/dev/null 2>&1
[ $? = 0 ] && fail "--device tpu should be refused"

for it in h100-sxm-device h200-device; do
  "$partune" estimate "$job" --set "instance_type=$it" --json >"$dir/est-$it.json" 2>"$dir/est-$it.err" ||
    fail "estimate on $it exited $?"
  grep -qE '"step_time_s": [0-9]' "$dir/est-$it.json" || fail "estimate on $it printed no step time"
  grep -qE '"fits": true' "$dir/est-$it.json" || fail "the job should fit in one $it GPU's memory"
done
exit 0
