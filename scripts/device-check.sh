#!/usr/bin/env bash
# The one command the GPU machine runs (docs/validation.md, "On a GPU"): builds partune's
# GPU half (scripts/device-build.sh), then checks, most important first, each bounded by
# what is left of the time budget, every figure written as JSON under $OUT so that a run
# cut short still returns what it measured:
#   1. partune's CUDA FlashAttention against a double reference and against LibTorch's
#      scaled_dot_product_attention (values, gradients, speed ratio)   -> flash-sdpa.json
#   2. calibrate --device cuda --quick: the card's profile             -> calibrate.json, *-measured.yaml
#   3. single-GPU jobs sized to the card (scenarios/device/validate-*), predicted by the
#      simulator on that profile and measured on the backend (2 interleaved runs each;
#      summary.json adds the prediction on the datasheet file)        -> validate.json
#   4. two ranks on the one GPU, tensor parallel 2 and pipeline 2, against one process; the
#      same model with fp8 GEMMs; and NCCL's answer to two ranks on one device -> ranks.json
#   5. one profiled step of four jobs, their kernels' time by category (step_kernel_profile),
#      and the 1.3B job once more with the per-tensor Adam loop        -> breakdown.json
#   6. validate --replay of this run: each job predicted on this run's profile against its
#      measurements, steps, kinds and kernel categories                  -> replay.json
#   summary.json gathers the verdicts; device-check.log is everything printed.
# Usage: scripts/device-check.sh [--only STEP,...] [BUDGET_SECONDS]   (default 460; $OUT must be set)
#        scripts/device-check.sh --dry-run [--only STEP,...] [BUDGET_SECONDS]
# --dry-run runs the same sequence here on the CPU with build/'s binaries (the tests'
# ctest `device_check_dry_run`): the jobs' models scaled down, the CUDA-only steps
# recorded as skipped. Exits 0 when every step that ran passed, 1 otherwise.
set -uo pipefail
cd "$(dirname "$0")/.."
dry=0
only=""
while [ $# -gt 0 ]; do
  case "$1" in
    --dry-run) dry=1; shift ;;
    --only) only=$2; shift 2 ;;
    *) break ;;
  esac
done
budget=${1:-460}
# --only A,B,...: only the named steps (attention, a job's file name, ranks, profile-JOB,
# adam-per-tensor, nccl); the build and the calibration always run.
want() { [ -z "$only" ] || [[ ",$only," == *",$1,"* ]]; }
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
  bin=${PARTUNE_BUILD_DIR:-build}; device=cpu; instance=h100-sxm-device; steps=(--steps 2 --warmup 1); repeats=1
  say "dry run on the CPU with $bin/"
else
  bin=build-device; device=cuda; steps=(--steps 5 --warmup 2); repeats=2
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv >>"$log" 2>&1
  card=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
  case "$card" in *H200*) instance=h200-device ;; *) instance=h100-sxm-device ;; esac
  say "card: ${card:-unknown}; instance type $instance"
  if run 300 build scripts/device-build.sh; then verdict build passed; else
    verdict build failed
    python3 scripts/device_summary.py "$out" "$bin" "${instance:-}" "$device" $(( $(date +%s) - t0 )) > "$out/summary.json"
    rm -f "$out/verdicts.tmp"
    exit 1
  fi
fi
export PARTUNE_SCENARIOS=$PWD/scenarios

# 1. FlashAttention on CUDA (exit 77: no CUDA device, skipped).
for check in flash_attention_cuda_check flash_attention_sdpa_check; do
  want attention || continue
  [ -x "$bin/$check" ] || { verdict $check "not built"; continue; }
  extra=(); [ $check = flash_attention_sdpa_check ] && extra=(--quick --json "$out/flash-sdpa.json")
  run 90 "$check" "$bin/$check" "${extra[@]}"; rc=$?
  case $rc in 0) verdict $check passed ;; 77) verdict $check skipped ;; *) verdict $check "failed ($rc)"; status=1 ;; esac
done

# 2. The card's calibration (the CPU calibration is the tests' own: skipped in a dry run):
#    the jobs below are predicted on the profile it writes (the datasheet file if it
#    writes none); summary.json adds each job's prediction on the datasheet file.
profile=$instance
if [ $dry -eq 0 ]; then
  run 120 calibrate sh -c "'$bin/partune-run' calibrate --device cuda --quick --out '$out/$instance-measured.yaml' \
    --json > '$out/calibrate.json'"
  rc=$?; [ $rc -eq 0 ] && verdict calibrate passed || { verdict calibrate "failed ($rc)"; status=1; }
  [ -f "$out/$instance-measured.yaml" ] && profile=$out/$instance-measured.yaml
else
  verdict calibrate skipped
fi
verdict profile "$(basename "$profile" .yaml)"

# 3. Single-GPU jobs, one validate call each (a job cut short loses only itself):
#    predicted vs measured step time and peak memory. validate exits 1 when a job misses
#    the accuracy targets: a result, reported as such.
validate() {  # JOB (a file of scenarios/device without .yaml)
  want "$1" || return 0
  run 150 "$1" sh -c "'$bin/partune' validate 'scenarios/device/$1.yaml' --device $device ${steps[*]} \
    --repeats $repeats --set instance_type=$profile --json > '$out/validate-$1.json.tmp'"
  case $? in 0) verdict "$1" "ran; accuracy targets met" ;; 1) verdict "$1" "ran; targets missed" ;;
    *) verdict "$1" "failed"; status=1 ;; esac
}

# 4. Two ranks on the one GPU against one process (the same model, batch and seed).
ranks() {  # NAME RANKS FILE [VAR=VALUE] [--set ...]: partune-run's --json report into ranks-NAME.json.tmp
  local name=$1 n=$2 file=$3 env=${4:-} extra=${5:-}
  run 90 "ranks-$name" sh -c "$env '$bin/partune-run' run 'scenarios/device/$file' --device $device --nproc $n \
    --steps 3 --json --set 'instance_type={base: $instance, gpus_per_node: $n}' $extra > '$out/ranks-$name.json.tmp'"
}

# The per-tensor Adam run and the profiles as one breakdown.json, the jobs' reports as one
# validate.json: gathered after every step, so that a run cut short still returns them.
collect() {
  python3 - "$out" <<'PY'
import glob, json, os, sys
out = sys.argv[1]
def load(path):
    try:
        text = open(path).read()
        return json.loads(text[text.find("{"):])
    except (OSError, ValueError):
        return None
jobs = []
for f in sorted(glob.glob(os.path.join(out, "validate-*.json.tmp"))):
    jobs += (load(f) or {}).get("jobs", [])
json.dump({"jobs": jobs}, open(os.path.join(out, "validate.json"), "w"), indent=2)
profiles = [p for p in (load(f) for f in sorted(glob.glob(os.path.join(out, "profile-*.json.tmp")))) if p]
json.dump({"adam_per_tensor": load(os.path.join(out, "adam-per-tensor.json.tmp")), "profiles": profiles},
          open(os.path.join(out, "breakdown.json"), "w"), indent=2)
PY
}

# 5. One profiled step of a job: its kernels' time by category (step_kernel_profile; exit
#    77: no CUDA or a LibTorch before 2.0, skipped).
profile() {  # JOB
  want "profile-$1" || return 0
  if [ ! -x "$bin/step_kernel_profile" ]; then verdict "profile-$1" "not built"; return; fi
  run 60 "profile-$1" "$bin/step_kernel_profile" "scenarios/device/$1.yaml" "$out/profile-$1.json.tmp" 2
  case $? in 0) verdict "profile-$1" ran ;; 77) verdict "profile-$1" skipped ;; *) verdict "profile-$1" failed ;; esac
  collect
}

# Most important first: the 1.3B FlashAttention job (the MFU figure), the two-rank runs and
# fp8 (the projections' GEMMs through at::_scaled_mm) against the bf16 one-process run, the
# fp8 job, the profiles of the 1.3B and 7B-block steps, then the other jobs, the per-tensor
# Adam comparison, the other profiles, and NCCL's answer to two ranks on one device.
validate validate-01-gpt-1.3b-flash; collect
if want ranks; then
  ranks one 1 ranks-1.yaml; ranks tp2 2 ranks-tp2.yaml; ranks pp2 2 ranks-pp2.yaml
  ranks fp8 1 ranks-1.yaml "" "--set training.precision=fp8"
  python3 scripts/device_ranks.py "$out" "$device" > "$out/ranks.json" 2>>"$log"
  rc=$?; [ $rc -eq 0 ] && verdict ranks passed || { verdict ranks "failed ($rc)"; status=1; }
fi
validate validate-06-gpt-1.3b-flash-fp8; collect
profile validate-01-gpt-1.3b-flash
profile validate-04-llama-7b-4l-flash
for job in validate-04-llama-7b-4l-flash validate-02-gpt-1.3b-standard validate-03-gpt-1.3b-flash-ckpt \
           validate-05-llama-7b-4l-standard-ckpt; do
  validate $job; collect
done
# The optimizer's share: job 01 once more with torch::optim::Adam's per-tensor loop instead
# of the multi-tensor step (PARTUNE_ADAM=per-tensor): its breakdown beside job 01's.
if want adam-per-tensor; then
  run 100 adam-per-tensor sh -c "PARTUNE_ADAM=per-tensor '$bin/partune' validate \
    scenarios/device/validate-01-gpt-1.3b-flash.yaml --device $device ${steps[*]} --repeats 1 \
    --set instance_type=$profile --json > '$out/adam-per-tensor.json.tmp'"
  case $? in 0|1) verdict adam-per-tensor ran ;; *) verdict adam-per-tensor failed ;; esac
fi
collect
profile validate-02-gpt-1.3b-standard
profile validate-06-gpt-1.3b-flash-fp8
# 6. Today's prediction of this run's jobs against its own measurements and kernel profiles
#    (validate --replay: every step, instruction kind and kernel category)  -> replay.json
if want replay; then
  run 60 replay sh -c "'$bin/partune' validate --replay '$out' --json > '$out/replay.json.tmp'"
  case $? in 0|1) mv "$out/replay.json.tmp" "$out/replay.json"; verdict replay ran ;; *) verdict replay failed ;; esac
fi

if [ $dry -eq 0 ] && want nccl; then  # NCCL with two ranks on one device: recorded, not required
  ranks nccl 2 ranks-tp2.yaml PARTUNE_COMM_BACKEND=nccl
  tail -c 2000 "$out/ranks-nccl.json.tmp" >> "$log" 2>/dev/null
fi
rm -f "$out"/ranks-*.json.tmp "$out"/validate-*.json.tmp "$out"/profile-*.json.tmp "$out"/adam-per-tensor.json.tmp

python3 scripts/device_summary.py "$out" "$bin" "$instance" "$device" $(( $(date +%s) - t0 )) > "$out/summary.json" 2>>"$log"
rm -f "$out/verdicts.tmp"
say "summary: $(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["steps"])' "$out/summary.json")"
exit $status
