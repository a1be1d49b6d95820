#!/bin/bash
# Killing one rank of `partune run --nproc 4`: every other rank exits non-zero naming the
# dead rank, the run ends within 30 s, and no process is left behind.
# usage: run_fault_check.sh PARTUNE_RUN JOB
set -u
run=$1
job=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; echo "--- stdout"; cat "$dir/out"; echo "--- stderr"; cat "$dir/err"; exit 1; }

"$run" run "$job" --nproc 4 --set nodes=2 --set pipeline_parallel_degree=2 --steps 1000000 >"$dir/out" 2>"$dir/err" &
supervisor=$!

# Training has started once rank 0 printed step 1.
for _ in $(seq 1 150); do grep -qE '^ +1 ' "$dir/out" && break; sleep 0.2; done
grep -qE '^ +1 ' "$dir/out" || fail "no step ran within 30 s"

# The ranks: the supervisor's children, found by their RANK variable.
declare -A rank_pid
for p in /proc/[0-9]*; do
  [ "$(awk '/^PPid:/{print $2}' "$p/status" 2>/dev/null)" = "$supervisor" ] || continue
  r=$(tr '\0' '\n' <"$p/environ" 2>/dev/null | sed -n 's/^RANK=//p')
  [ -n "$r" ] && rank_pid[$r]=${p#/proc/}
done
[ "${#rank_pid[@]}" = 4 ] || fail "expected 4 rank processes, found ${#rank_pid[@]}"

start=$(date +%s)
kill -9 "${rank_pid[2]}"
while kill -0 "$supervisor" 2>/dev/null && [ $(( $(date +%s) - start )) -le 30 ]; do sleep 0.2; done
kill -0 "$supervisor" 2>/dev/null && { kill -9 "$supervisor"; fail "the run was still going 30 s after the kill"; }
wait "$supervisor"
status=$?
elapsed=$(( $(date +%s) - start ))
[ "$status" != 0 ] || fail "partune run exited 0 after a rank was killed"
grep -q "rank 2 (pid ${rank_pid[2]}) was killed by signal 9" "$dir/err" || fail "the supervisor did not name rank 2"
for r in 0 1 3; do
  grep -q "rank $r: stopping: rank 2 " "$dir/err" || fail "rank $r did not stop naming rank 2"
done
for r in 0 1 2 3; do
  kill -0 "${rank_pid[$r]}" 2>/dev/null && fail "rank $r (pid ${rank_pid[$r]}) is still running"
done
echo "ok: partune run exited with status $status ${elapsed} s after rank 2 was killed; ranks 0, 1, 3 named it"
cat "$dir/err"
