#!/usr/bin/env bash
# Fuzzes the scenario loaders (job, published table, instance type) with libFuzzer for
# SECONDS (default 60), seeded from scenarios/ and tests/fuzz/regressions/.
#   scripts/fuzz.sh [SECONDS] [WORKERS]
# Builds build-fuzz/ with clang (-DPARTUNE_FUZZ=ON: ASan, UBSan, coverage), keeps the
# growing corpus in build-fuzz/corpus/, any finding in build-fuzz/findings/, and prints
# one summary line: executions, coverage, corpus, crashes, timeouts. Exit status 1 when
# anything was found: copy the file into tests/fuzz/regressions/ and fix it there.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
workers=${2:-1}
case "$seconds$workers" in *[!0-9]*) echo "usage: scripts/fuzz.sh [SECONDS] [WORKERS]" >&2; exit 2 ;; esac

./scripts/setup.sh clang >/dev/null
CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPARTUNE_FUZZ=ON \
  -DPARTUNE_WITH_TORCH=OFF -DPARTUNE_WITH_CUDA=OFF -DPARTUNE_BUILD_TESTS=OFF >/dev/null
cmake --build build-fuzz --target fuzz_loaders fuzz_replay >/dev/null

# Seeds: each scenario file behind the letter of the reader it belongs to.
seeds=build-fuzz/seeds
rm -rf "$seeds" && mkdir -p "$seeds" build-fuzz/corpus build-fuzz/findings
seed() {  # letter, files...
  local letter=$1 f
  shift
  for f in "$@"; do { printf '%s' "$letter"; cat "$f"; } >"$seeds/$letter-$(basename "$f")"; done
}
seed i scenarios/clusters/*.yaml
seed j scenarios/jobs/*.yaml scenarios/validation/*.yaml
seed t scenarios/tables/*.yaml
cp tests/fuzz/regressions/* "$seeds/"

log=build-fuzz/fuzz.log
rm -f build-fuzz/findings/* "$log" fuzz-*.log
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
  build-fuzz/fuzz_loaders build-fuzz/corpus "$seeds" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
  -max_len=65536 -dict=tests/fuzz/loaders.dict -artifact_prefix=build-fuzz/findings/ -print_final_stats=1 \
  $( [ "$workers" -gt 1 ] && echo "-jobs=$workers -workers=$workers" ) >"$log" 2>&1 || true
if [ "$workers" -gt 1 ]; then cat fuzz-*.log >>"$log" 2>/dev/null || true; rm -f fuzz-*.log; fi

execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | awk '{s += $2} END {print s + 0}')
cov=$(grep -oE 'cov: [0-9]+ ft: [0-9]+' "$log" | tail -1)
crashes=$(find build-fuzz/findings -name 'crash-*' -o -name 'leak-*' -o -name 'oom-*' | wc -l)
timeouts=$(find build-fuzz/findings -name 'timeout-*' -o -name 'slow-unit-*' | wc -l)
corpus=$(find build-fuzz/corpus -type f | wc -l)
echo "fuzz.sh: $(date -u +%Y-%m-%d) ${seconds} s x ${workers} worker(s): ${execs} executions, ${cov:-cov: ?}," \
     "corpus ${corpus} inputs, ${crashes} crashes, ${timeouts} timeouts (log: $log)"
[ "$crashes" -eq 0 ] && [ "$timeouts" -eq 0 ]
