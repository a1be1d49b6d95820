#!/usr/bin/env bash
# partune sweep over two keys writes a CSV that Python's csv module reads: a header of the
# varied keys and the metrics, one row per point in the product's order, and the same
# figures as `partune estimate --json` of each point's job, to the last digit.
# Usage: sweep_csv_check.sh PARTUNE JOB OUT
set -euo pipefail
partune=$1 job=$2 out=$3
rm -f "$out"
"$partune" sweep "$job" --vary nodes=8,16 --vary precision=fp16,bf16 --tokens 1e9 --csv "$out" > /dev/null
for point in "8 fp16" "8 bf16" "16 fp16" "16 bf16"; do
  set -- $point
  "$partune" estimate "$job" --set nodes="$1" --set precision="$2" --json
done > "$out.estimates"
/usr/bin/python3 - "$out" "$out.estimates" <<'PY'
import csv, json, sys
rows = list(csv.DictReader(open(sys.argv[1])))
text = open(sys.argv[2]).read()
decoder, estimates, i = json.JSONDecoder(), [], 0
while i < len(text):
    while i < len(text) and text[i].isspace(): i += 1
    if i == len(text): break
    obj, i = decoder.raw_decode(text, i)
    estimates.append(obj)
assert len(rows) == 4, f"{len(rows)} rows, expected 4"
assert [(r["nodes"], r["precision"]) for r in rows] == [("8", "fp16"), ("8", "bf16"), ("16", "fp16"), ("16", "bf16")]
for r, e in zip(rows, estimates):
    for key in ("samples_per_s", "tokens_per_s", "tflops_per_gpu", "mfu", "peak_memory_bytes"):
        assert float(r[key]) == e[key], (key, r[key], e[key])
    assert r["status"] == "fits" and r["fits"] == "true" and r["reason"] == ""
    # 1e9 tokens at 1536 sequences of 2048 tokens a step.
    want = 1e9 / (1536 * 2048) * e["step_time_s"]
    assert abs(float(r["time_to_train_s"]) - want) <= 1e-12 * want, (r["time_to_train_s"], want)
print("4 points, as estimate gives them, every digit")
PY
