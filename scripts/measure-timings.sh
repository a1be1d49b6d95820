#!/usr/bin/env bash
# Measures the timings the README states, on this machine, idle and under load.
# usage: scripts/measure-timings.sh [--repeats N] [--reproduce] > timings.txt
# "idle": nothing else of ours running (check `uptime` before); "loaded": two CPU-bound
# processes (`yes > /dev/null`) beside each command, the load CI's 2-core machine may see.
# Runs of the two conditions are interleaved so drift in the machine's speed hits both.
# Each line: what, condition, then every run's figure and min / median / max.
set -euo pipefail
cd "$(dirname "$0")/.."
partune=${PARTUNE:-build/partune}
repeats=3
reproduce=0
while [ $# -gt 0 ]; do
  case $1 in
    --repeats) repeats=$2; shift 2 ;;
    --reproduce) reproduce=1; shift ;;
    *) echo "usage: $0 [--repeats N] [--reproduce]" >&2; exit 2 ;;
  esac
done
job=scenarios/jobs/gpt3-175b-p4d-120.yaml
hogs=()
load_on() { yes >/dev/null & hogs+=($!); yes >/dev/null & hogs+=($!); }
load_off() { [ ${#hogs[@]} -eq 0 ] || kill "${hogs[@]}" 2>/dev/null || true; hogs=(); wait 2>/dev/null || true; }
trap load_off EXIT
wall() { local t0 t1; t0=$(date +%s.%N); "$@" >/dev/null 2>&1; t1=$(date +%s.%N); awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }'; }
evals() { "$partune" bench estimate --seconds 2 | sed -nE 's/^ *evaluations\/s +([0-9]+).*/\1/p'; }
summary() {  # name condition values...
  local name=$1 cond=$2; shift 2
  printf '%s\n' "$@" | sort -g | awk -v n="$name" -v c="$cond" '
    { v[NR] = $1; all = all sprintf("%.4g ", $1) }
    END { printf "%-28s %-7s runs: %s| min %.4g  median %.4g  max %.4g\n", n, c, all, v[1], v[int((NR + 1) / 2)], v[NR] }'
}
declare -A results
record() { results["$1|$2"]+="$3 "; }
echo "# $(date -u +%FT%TZ) $(uname -n) $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); commit $(git rev-parse --short HEAD)"
echo "# load before: $(cut -d' ' -f1-3 /proc/loadavg)"
for ((i = 0; i < repeats; i++)); do
  for cond in idle loaded; do
    [ $cond = loaded ] && load_on
    record "bench estimate (evals/s)" $cond "$(evals)"
    record "search, default job (s)" $cond "$(wall "$partune" search "$job")"
    record "bench search (s)" $cond "$(wall "$partune" bench search)"
    record "reproduce --estimator (s)" $cond "$(wall "$partune" reproduce --estimator)"
    if [ $reproduce = 1 ] && [ $i = 0 ]; then
      record "reproduce, simulator (s)" $cond "$(wall "$partune" reproduce)"
    fi
    load_off
  done
done
for key in "${!results[@]}"; do
  # shellcheck disable=SC2086
  summary "${key%|*}" "${key#*|}" ${results[$key]}
done | sort
