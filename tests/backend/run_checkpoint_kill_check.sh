#!/bin/bash
# Checkpoints under kill -9: a 2-rank run that resumes and saves is killed (SIGKILL to its
# whole process group) at 12 deterministic moments, most of them inside the save; after
# every kill the directory holds a complete checkpoint (the previous step or the new one)
# and a run resumed from it gives the uninterrupted run's loss of the next step.
# usage: run_checkpoint_kill_check.sh PARTUNE_RUN JOB
set -u
run=$1
job=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
ck=$dir/ck
opts=(--threads 1 --json)
fail() { echo "FAIL: $*"; ls -a "$ck"; cat "$dir"/*.err 2>/dev/null; exit 1; }
losses() { grep -o '"loss": [0-9.e+-]*' "$1" | awk '{print $2}'; }

timeout 120 "$run" run "$job" --steps 24 "${opts[@]}" >"$dir/ref.json" 2>"$dir/ref.err" || fail "reference run"
mapfile -t ref < <(losses "$dir/ref.json")
timeout 60 "$run" run "$job" --steps 2 --save "$ck" "${opts[@]}" >/dev/null 2>"$dir/first.err" || fail "first save"

step=2
for i in $(seq 0 11); do
  # Delays from 0 to 3.2 s after the start (fixed by i, spread as k = 5i/3 over 0-18): the run takes 2-4 s, its save the
  # last part; every other kill waits for the save to begin and then 0-19 ms more.
  setsid "$run" run "$job" --steps 1 --resume "$ck" --save "$ck" "${opts[@]}" >/dev/null 2>"$dir/killed.err" &
  pid=$!
  if (( i % 2 )); then
    for _ in $(seq 1 3000); do compgen -G "$ck/.partial-step-*" >/dev/null && break; kill -0 $pid 2>/dev/null || break; sleep 0.005; done
    sleep "0.0$(( (i * 7) % 20 ))"
  else
    k=$(( i * 5 / 3 ))
    sleep "$(( k / 5 )).$(( (k * 37) % 10 ))"
  fi
  kill -9 -- -"$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  timeout 60 "$run" run "$job" --steps 1 --resume "$ck" "${opts[@]}" >"$dir/check.json" 2>"$dir/check.err" ||
    fail "kill $i: the checkpoint does not resume"
  after=$(grep -o '"resumed_after": [0-9]*' "$dir/check.json" | awk '{print $2}')
  [ "$after" = "$step" ] || [ "$after" = $(( step + 1 )) ] || fail "kill $i: resumed after $after (previous $step)"
  got=$(losses "$dir/check.json")
  want=${ref[$after]}
  awk -v a="$got" -v b="$want" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 1e-6 * (b < 0 ? -b : b)) }' ||
    fail "kill $i: step $(( after + 1 )) loss $got, uninterrupted $want"
  leftovers=$(ls -A "$ck" | grep -v -E '^(latest|step-[0-9]+)$')
  [ -z "$leftovers" ] || fail "kill $i: leftovers after the resumed run: $leftovers"
  echo "kill $i: checkpoint of step $after, step $(( after + 1 )) loss $got as uninterrupted"
  step=$after
done
echo "ok: 12 kills out of 12 left a complete checkpoint"
