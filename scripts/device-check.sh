#!/usr/bin/env bash
# The one command the GPU machine runs (docs/validation.md, "On a GPU"): builds partune's
# GPU half (scripts/device-build.sh), then checks, most important first, each bounded by
# what is left of the time budget, every figure written as JSON under $OUT so that a run
# cut short still returns what it measured:
#   1. the CUDA FlashAttention kernel against a double reference and against PyTorch's
#      scaled_dot_product_attention (values, gradients, speed ratio)   -> flash-sdpa.json
#   2. single-GPU jobs sized to the card (scenarios/device/validate-*), predicted by the
#      simulator on the card's instance type and measured on the backend  -> validate.json
#   3. two ranks on the one GPU, tensor parallel 2 and pipeline 2, against one process;
#      and NCCL's answer to two ranks on one device                      -> ranks.json
#   4. calibrate --device cuda --quick                                 -> calibrate.json, *-measured.yaml
#   summary.json gathers the verdicts; device-check.log is everything printed.
# Usage: scripts/device-check.sh [BUDGET_SECONDS]   (default 460; $OUT must be set)
#        scripts/device-check.sh --dry-run [BUDGET_SECONDS]
# --dry-run runs the same sequence here on the CPU with build/'s binaries (the tests'
# ctest `device_check_dry_run`): the jobs' models scaled down, the CUDA-only steps
# recorded as skipped. Exits 0 when every step that ran passed, 1 otherwise.
set -uo pipefail
cd "$(dirname "$0")/.."
dry=0
[ "${1:-}" = "--dry-run" ] && { dry=1; shift; }
budget=${1:-460}
out=${OUT:?device-check: set OUT to the folder the results go to}
mkdir -p "$out"
log=$out/device-check.log
t0=$(date +%s)
left() { echo $(( budget - ($(date +%s) - t0) )); }
say() { echo "[$(( $(date +%s) - t0 ))s] $*" | tee -a "$log"; }
# run LIMIT NAME CMD...: the command, its output to the log, cut at LIMIT seconds or at
# what is left of the budget; its exit status (124: cut).
run() {
  local limit=$1 name=$2; shift 2
  local l; l=$(left)
  [ "$l" -lt "$limit" ] && limit=$l
  if [ "$limit" -le 5 ]; then say "$name: skipped (budget spent)"; return 125; fi
  say "$name: $* (limit ${limit}s)"
  timeout --kill-after=5 "$limit" "$@" >>"$log" 2>&1
  local rc=$?
  say "$name: exit $rc"
  return $rc
}
status=0
verdict() { echo "$1=$2" >> "$out/verdicts.tmp"; }  # NAME VERDICT, for summary.json
: > "$out/verdicts.tmp"

if [ $dry -eq 1 ]; then
  bin=${PARTUNE_BUILD_DIR:-build}; device=cpu; instance=h100-sxm-device; steps=(--steps 2 --warmup 1); scale=""
  say "dry run on the CPU with $bin/"
else
  bin=build-device; device=cuda; steps=(--steps 5 --warmup 2)
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv >>"$log" 2>&1
  card=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
  case "$card" in *H200*) instance=h200-device ;; *) instance=h100-sxm-device ;; esac
  say "card: ${card:-unknown}; instance type $instance"
  run 300 build scripts/device-build.sh && verdict build passed || { verdict build failed; status=1; }
fi
export PARTUNE_SCENARIOS=$PWD/scenarios

# 1. FlashAttention on CUDA (exit 77: no CUDA device, skipped).
for check in flash_attention_cuda_check flash_attention_sdpa_check; do
  [ -x "$bin/$check" ] || { verdict $check "not built"; continue; }
  extra=(); [ $check = flash_attention_sdpa_check ] && extra=(--quick --json "$out/flash-sdpa.json")
  run 90 "$check" "$bin/$check" "${extra[@]}"; rc=$?
  case $rc in 0) verdict $check passed ;; 77) verdict $check skipped ;; *) verdict $check "failed ($rc)"; status=1 ;; esac
done

# 2. Single-GPU jobs: predicted vs measured step time and peak memory.
jobs=$(ls scenarios/device/validate-*.yaml | xargs -n1 basename | sed 's/\.yaml$//' | paste -sd, -)
run 240 validate sh -c "'$bin/partune' validate --suite scenarios/device --jobs '$jobs' --device $device ${steps[*]} \
  --repeats 1 --set instance_type=$instance --json > '$out/validate.json'"
# validate exits 1 when the suite misses its accuracy targets: a result, reported as such.
rc=$?
case $rc in 0) verdict validate "ran; accuracy targets met" ;; 1) verdict validate "ran; accuracy targets missed" ;;
  *) verdict validate "failed ($rc)"; status=1 ;; esac

# 3. Two ranks on the one GPU against one process (the same model, batch and seed).
ranks() {  # NAME RANKS FILE [VAR=VALUE]: partune-run's --json report into ranks-NAME.json.tmp
  local name=$1 n=$2 file=$3 env=${4:-}
  run 90 "ranks-$name" sh -c "$env '$bin/partune-run' run 'scenarios/device/$file' --device $device --nproc $n \
    --steps 3 --json --set 'instance_type={base: $instance, gpus_per_node: $n}' > '$out/ranks-$name.json.tmp'"
}
ranks one 1 ranks-1.yaml; ranks tp2 2 ranks-tp2.yaml; ranks pp2 2 ranks-pp2.yaml
if [ $dry -eq 0 ]; then  # NCCL with two ranks on one device: recorded, not required
  ranks nccl 2 ranks-tp2.yaml PARTUNE_COMM_BACKEND=nccl
fi
python3 scripts/device_ranks.py "$out" "$device" > "$out/ranks.json" 2>>"$log"
rc=$?; [ $rc -eq 0 ] && verdict ranks passed || { verdict ranks "failed ($rc)"; status=1; }
rm -f "$out"/ranks-*.json.tmp

# 4. Calibration of the card (the CPU calibration is the tests' own: skipped in a dry run).
if [ $dry -eq 0 ]; then
  run 120 calibrate sh -c "'$bin/partune-run' calibrate --device cuda --quick --out '$out/$instance-measured.yaml' \
    --json > '$out/calibrate.json'"
  rc=$?; [ $rc -eq 0 ] && verdict calibrate passed || { verdict calibrate "failed ($rc)"; status=1; }
else
  verdict calibrate skipped
fi

python3 scripts/device_summary.py "$out" "$bin" "$instance" "$device" $(( $(date +%s) - t0 )) > "$out/summary.json" 2>>"$log"
rm -f "$out/verdicts.tmp"
say "summary: $(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["steps"])' "$out/summary.json")"
exit $status
