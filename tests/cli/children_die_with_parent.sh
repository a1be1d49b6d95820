#!/usr/bin/env bash
# Signals `partune simulate` and `partune search` while their forked simulation children
# run, and checks that no child outlives its parent (issue 12, item 4e).
#   children_die_with_parent.sh PARTUNE JOB SEARCH_JOB
# JOB must keep simulate's children busy for a few seconds (the 175B job on 120 p4d: about
# 17 s without symmetry), and SEARCH_JOB the search's workers (GPT-NeoX-20B on 16 p4d with
# 64 candidates simulated rank by rank under jitter: about 5 s of simulation; the 175B
# search's 8 symmetric simulations ended within 0.1 s, too soon to be caught reliably).
# Exit 0 when every case leaves nothing behind; the failing case and the survivors otherwise.
set -u
set -m  # each background command in its own process group, SIGINT not ignored
partune=$1
job=$2
search_job=$3
failed=0

# Every descendant of $1, recursively.
descendants() {
  local kid
  for kid in $(pgrep -P "$1"); do
    echo "$kid"
    descendants "$kid"
  done
}

check() {
  local signal=$1
  shift
  "$partune" "$@" > /dev/null 2>&1 &
  local parent=$! kids="" i
  for i in $(seq 1 200); do  # up to 10 s for the first child
    kids=$(descendants "$parent")
    [ -n "$kids" ] && break
    kill -0 "$parent" 2> /dev/null || break
    sleep 0.05
  done
  if [ -z "$kids" ]; then
    echo "FAIL: partune $* ended or forked nothing within 10 s: nothing to check"
    kill -KILL "$parent" 2> /dev/null
    failed=1
    return
  fi
  sleep 0.3  # mid-run: the children are simulating
  kids=$(descendants "$parent")
  kill -"$signal" "$parent"
  wait "$parent" 2> /dev/null
  local left=""
  for i in $(seq 1 40); do  # up to 2 s for the kernel to deliver the death signals
    left=""
    for kid in $kids; do
      # A child reaped by init is gone; a zombie (state Z) has ended too.
      state=$(ps -o state= -p "$kid" 2> /dev/null)
      [ -n "$state" ] && [ "$state" != "Z" ] && left="$left $kid"
    done
    [ -z "$left" ] && break
    sleep 0.05
  done
  if [ -n "$left" ]; then
    echo "FAIL: after SIG$signal to partune $* (pid $parent), still running:$left"
    ps -o pid,ppid,state,etime,cmd -p "$(echo $left | tr ' ' ',')"
    for kid in $left; do kill -KILL "$kid" 2> /dev/null; done
    failed=1
  else
    echo "ok: SIG$signal to partune $*: its $(echo $kids | wc -w) child process(es) ended with it"
  fi
}

for signal in TERM INT KILL; do
  check "$signal" simulate "$job" --no-symmetry
  check "$signal" search "$search_job" --top-k 64 --workers 2 --slow jitter=0.05
done
exit $failed
