#!/usr/bin/env bash
# Capture what partune prints for every shipped job, so a refactor can be checked to
# change no output: estimate (text, JSON), simulate --json, search --estimator-only
# --json, and reproduce --estimator. Usage:
#   scripts/capture-outputs.sh BINARY OUTDIR      then  diff -r OLD NEW
# Lines that carry wall-clock time ("in 12.3 s", "elapsed") are dropped.
set -u
bin=${1:?binary}; out=${2:?output folder}
mkdir -p "$out"
cd "$(dirname "$0")/.."
strip_time() { grep -v -E '"(elapsed|wall)[a-z_]*"|searched in|evaluations/s| in [0-9.]+ s\b' || true; }
for job in scenarios/jobs/*.yaml; do
  name=$(basename "$job" .yaml)
  "$bin" estimate "$job" > "$out/$name.estimate.txt" 2>&1; echo "rc=$?" >> "$out/$name.estimate.txt"
  "$bin" estimate --json "$job" > "$out/$name.estimate.json" 2>&1
  "$bin" simulate --json "$job" 2>&1 | strip_time > "$out/$name.simulate.json"
  "$bin" search --estimator-only --json "$job" 2>&1 | strip_time > "$out/$name.search.json"
done
"$bin" reproduce --estimator 2>&1 | strip_time > "$out/reproduce.txt"
