#!/bin/bash
# The rendezvous is bounded and names its cause (PARTUNE_RENDEZVOUS_TIMEOUT_S=5):
#  - MASTER_PORT held by another program: rank 0 refuses at once, rank 1 gives up within
#    the timeout ("could not reach rank 0 at ...");
#  - ranks started with different WORLD_SIZE: both exit non-zero naming both numbers.
# usage: run_rendezvous_check.sh PARTUNE_RUN JOB
set -u
run=$1
job=$2
dir=$(mktemp -d)
holder=
trap '[ -n "$holder" ] && kill "$holder" 2>/dev/null; rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; cat "$dir"/*.err; exit 1; }
port=$(( 20000 + ($$ * 7 + RANDOM) % 40000 ))
start_rank() {  # rank world_size
  env RANK=$1 WORLD_SIZE=$2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port PARTUNE_RENDEZVOUS_TIMEOUT_S=5 \
    timeout 60 "$run" run "$job" --steps 1 --threads 1 >"$dir/rank$1.out" 2>"$dir/rank$1.err"
}

# Another program listens on the port and never answers.
/usr/bin/python3 -c "import socket,time;s=socket.socket();s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1);s.bind(('127.0.0.1',$port));s.listen(8);time.sleep(120)" &
holder=$!
sleep 1
t0=$(date +%s)
start_rank 1 2 & one=$!
start_rank 0 2; zero=$?
wait "$one"; first=$?
elapsed=$(( $(date +%s) - t0 ))
[ "$zero" != 0 ] && [ "$first" != 0 ] || fail "port in use: exit statuses $zero and $first"
[ "$elapsed" -le 15 ] || fail "port in use: the ranks took $elapsed s (timeout 5 s)"
grep -q "MASTER_PORT=$port is already in use" "$dir/rank0.err" || fail "rank 0 did not name the port in use"
grep -q "could not reach rank 0 at 127.0.0.1:$port within 5 s" "$dir/rank1.err" || fail "rank 1 did not name the store"
echo "ok: port in use: both ranks exited non-zero within $elapsed s, naming the cause"
kill "$holder"; wait "$holder" 2>/dev/null; holder=

port=$(( port + 1 ))
t0=$(date +%s)
start_rank 1 3 & one=$!
start_rank 0 2; zero=$?
wait "$one"; first=$?
elapsed=$(( $(date +%s) - t0 ))
[ "$zero" != 0 ] && [ "$first" != 0 ] || fail "WORLD_SIZE mismatch: exit statuses $zero and $first"
[ "$elapsed" -le 15 ] || fail "WORLD_SIZE mismatch: the ranks took $elapsed s"
for r in 0 1; do
  grep -q "rank 1 was started with WORLD_SIZE=3 but rank 0 with WORLD_SIZE=2" "$dir/rank$r.err" ||
    fail "rank $r did not name both world sizes"
done
echo "ok: WORLD_SIZE mismatch: both ranks exited non-zero within $elapsed s, naming 3 and 2"
