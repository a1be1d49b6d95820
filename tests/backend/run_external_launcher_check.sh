#!/bin/bash
# Two ranks started the way any launcher would (srun, mpirun, torchrun-style): the standard
# variables, rank 0 hosting the store; they train together and rank 0 reports the same
# losses as `--nproc 2`.
# usage: run_external_launcher_check.sh PARTUNE_RUN JOB
set -u
run=$1
job=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
env_for() { echo "RANK=$1 WORLD_SIZE=2 LOCAL_RANK=$1 LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port"; }
# A random port another program (a concurrent test's connection) holds is named as such by
# rank 0: try another, up to three times.
first=1
for attempt in 1 2 3; do
  port=$(( 20000 + ($$ * 7 + RANDOM) % 40000 ))
  env $(env_for 1) timeout 60 "$run" run "$job" --steps 3 --json >"$dir/rank1.out" 2>"$dir/rank1.err" &
  one=$!
  env $(env_for 0) timeout 60 "$run" run "$job" --steps 3 --json >"$dir/rank0.out" 2>"$dir/rank0.err"
  zero=$?
  if [ "$zero" != 0 ] && grep -q "already in use" "$dir/rank0.err"; then
    kill "$one" 2>/dev/null
    wait "$one" 2>/dev/null
    continue
  fi
  wait "$one"
  first=$?
  break
done
[ "$zero" = 0 ] && [ "$first" = 0 ] || { echo "FAIL: exit statuses $zero and $first"; cat "$dir"/*.err; exit 1; }
[ -s "$dir/rank1.out" ] && { echo "FAIL: rank 1 printed a report"; exit 1; }
timeout 60 "$run" run "$job" --steps 3 --json --nproc 2 >"$dir/supervised.out" 2>"$dir/supervised.err" ||
  { echo "FAIL: --nproc 2"; cat "$dir/supervised.err"; exit 1; }
losses() { grep -o '"loss": [0-9.e+-]*' "$1"; }
[ "$(losses "$dir/rank0.out")" = "$(losses "$dir/supervised.out")" ] ||
  { echo "FAIL: different losses"; losses "$dir/rank0.out"; losses "$dir/supervised.out"; exit 1; }
echo "ok: two externally launched ranks (store on rank 0, port $port) gave the losses of --nproc 2:"
losses "$dir/rank0.out"
