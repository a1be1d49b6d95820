#!/bin/bash
# `partune calibrate --quick` writes an instance type that `partune estimate` accepts.
# usage: calibrate_check.sh PARTUNE OUT.yaml JOB.yaml
set -u
partune=$1
out=$2
job=$3
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; for f in "$dir"/*; do echo "--- $f"; cat "$f"; done; exit 1; }

rm -f "$out"
# A bad path fails at once, naming it, and writes nothing.
"$partune" calibrate --quick --out "$dir/no-such-dir/x.yaml" >"$dir/bad.out" 2>"$dir/bad.err"
[ $? = 2 ] || fail "a missing directory should exit 2"
grep -q "no-such-dir" "$dir/bad.err" || fail "the error should name the path"

"$partune" calibrate --quick --out "$out" --json >"$dir/cal.json" 2>"$dir/cal.err" || fail "calibrate exited $?"
[ -f "$out" ] || fail "no $out"
# Silent without a terminal: no progress bar in the captured stderr.
[ ! -s "$dir/cal.err" ] || fail "stderr should be empty when it is not a terminal"
ls "$(dirname "$out")"/.local-measured.yaml.tmp-* >/dev/null 2>&1 && fail "a temporary file was left behind"
for key in '^kind: instance_type' '^name: local-measured' '^gpus_per_node: [0-9]' '^    max_efficiency: 0\.[0-9]' \
           '^    k_half: [0-9]' '^  hbm_bw_GBps: [0-9]' '^  kernel_overhead_us: [0-9]' '^    score_bmm_efficiency: [01]\.[0-9]' \
           '^  bw_GBps: [0-9]' '^  nic_bw_Gbps: [0-9]' '^calibration:' '^  libtorch: "' '^    gloo:' '^    libfabric:'; do
  grep -qE "$key" "$out" || fail "$out has no line matching '$key'"
done
grep -q '"intra_node"' "$dir/cal.json" || fail "--json has no intra_node"

"$partune" estimate "$job" --set "instance_type=$out" --json >"$dir/est.json" 2>"$dir/est.err" || fail "estimate exited $?"
grep -qE '"step_time_s": [0-9]' "$dir/est.json" || fail "estimate printed no step time"
exit 0
