#!/usr/bin/env bash
# Under MPI (Open MPI's mpirun), partune sweep and partune search split their points and
# simulations over the ranks and rank 0 prints: the JSON of -n 2 is byte for byte that of
# -n 1 and of a plain run. Usage: mpi_identical.sh MPIRUN PARTUNE SOURCE_DIR OUT_DIR
set -euo pipefail
mpirun=$1 partune=$2 src=$3 out=$4
mkdir -p "$out"
job=$src/scenarios/jobs/gpt2-xl-p3dn-4.yaml
run() {  # name ranks command...
  local name=$1 ranks=$2
  shift 2
  if [ "$ranks" = 0 ]; then "$partune" "$@" > "$out/$name.json"
  else "$mpirun" --allow-run-as-root --oversubscribe -n "$ranks" "$partune" "$@" > "$out/$name.json"; fi
}
for ranks in 0 1 2; do
  run "sweep-$ranks" "$ranks" sweep "$job" --vary nodes=2,4,8 --vary precision=fp16,fp32 --tokens 1e9 --json
  run "sweep-search-$ranks" "$ranks" sweep "$job" --vary nodes=2,4 --search --json
  run "search-$ranks" "$ranks" search "$job" --top-k 6 --json
done
for kind in sweep sweep-search search; do
  cmp "$out/$kind-0.json" "$out/$kind-1.json"
  cmp "$out/$kind-0.json" "$out/$kind-2.json"
done
grep -q '"simulated": 6' "$out/search-2.json"  # the simulations ran (split over the ranks)
echo "sweep, sweep --search and search: -n 1 and -n 2 byte-identical to a plain run"
