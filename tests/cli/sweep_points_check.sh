#!/usr/bin/env bash
# partune sweep on points that do not exist: a point that does not fit in memory, or that
# is not a consistent job, prints why and no time or cost, in the table, the CSV and the
# JSON; the note under the table says how micro-batches were set; the JSON keeps numbers as
# numbers; sweep --search shows each point's search on a terminal and nothing otherwise.
# Usage: sweep_points_check.sh PARTUNE JOB SMALL_SEARCH_JOB OUT_DIR
set -euo pipefail
partune=$1 job=$2 small=$3 out=$4
mkdir -p "$out"
# GPT-NeoX-20B on p4d (40 GiB), tensor 8 x pipeline 2, 48 micro-batches fixed by the job:
# 8 nodes fit with full checkpointing and not without; 12 nodes (data-parallel 6) cannot
# split 1536 sequences into 6 x 48.
vary=(--vary nodes=8,12 --vary activation_checkpointing=full,none --tokens 300e9)
"$partune" sweep "$job" "${vary[@]}" > "$out/table.txt"
"$partune" sweep "$job" "${vary[@]}" --csv "$out/points.csv" > /dev/null
"$partune" sweep "$job" "${vary[@]}" --json > "$out/points.json"
"$partune" estimate "$job" --set nodes=8 --json > "$out/estimate.json"
# sweep --search on a pseudo-terminal (script(1)), then with standard error to a file.
script -qec "'$partune' sweep '$small' --vary nodes=12,16 --search" /dev/null > "$out/terminal.txt"
"$partune" sweep "$small" --vary nodes=12,16 --search > "$out/search.txt" 2> "$out/search.err"

/usr/bin/python3 - "$out" <<'PY'
import csv, json, os, sys
out = sys.argv[1]
lines = open(os.path.join(out, "table.txt")).read().splitlines()
rows = {tuple(l.split()[:2]): l for l in lines[1:] if l.split()[:1] in (["8"], ["12"])}
assert len(rows) == 4, lines
fits = rows[("8", "full")]
assert "days" in fits and "$" in fits, fits
for key, why in ((("8", "none"), "does not fit: stage 0 needs"),
                 (("12", "full"), "invalid: training.global_batch"),
                 (("12", "none"), "invalid: training.global_batch")):
    row = rows[key]
    assert why in row, row
    assert "$" not in row and "days" not in row and "hours" not in row, row
assert "fixed by the job file's parallel.microbatches" in rows[("12", "full")]
assert lines[-1].startswith("micro-batches: 48 at every point, fixed by the job file's parallel.microbatches"), lines[-1]

estimate = json.load(open(os.path.join(out, "estimate.json")))
# 300e9 tokens at 1536 x 2048 tokens a step, on 8 nodes at p4d's on-demand 21.957642 USD/h
# (scenarios/clusters/p4d.24xlarge.yaml).
seconds = 300e9 / (1536 * 2048) * estimate["step_time_s"]
usd = seconds / 3600 * 8 * 21.957642
points = list(csv.DictReader(open(os.path.join(out, "points.csv"))))
assert [(p["nodes"], p["activation_checkpointing"], p["status"]) for p in points] == [
    ("8", "full", "fits"), ("8", "none", "does not fit"), ("12", "full", "invalid"), ("12", "none", "invalid")]
ok, no_room, invalid = points[0], points[1], points[2]
# Every digit: the CSV reads back as the very numbers estimate --json gives.
assert float(ok["samples_per_s"]) == estimate["samples_per_s"], (ok["samples_per_s"], estimate["samples_per_s"])
assert float(ok["peak_memory_bytes"]) == estimate["peak_memory_bytes"]
assert abs(float(ok["time_to_train_s"]) - seconds) <= 1e-9 * seconds
assert abs(float(ok["cost_on_demand"]) - usd) <= 1e-9 * usd
assert (ok["microbatches"], ok["microbatch_size"], ok["reason"]) == ("48", "8", "")
assert no_room["fits"] == "false" and "needs" in no_room["reason"]
for p in (no_room, invalid):
    assert p["samples_per_s"] == p["time_to_train_s"] == p["cost_on_demand"] == "", p
assert "= 288" in invalid["reason"] and invalid["peak_memory_bytes"] == ""

sweep = json.load(open(os.path.join(out, "points.json")))
assert len({tuple(sorted(p)) for p in sweep["points"]}) == 1, "every point has the same keys"
assert [p["values"]["nodes"] for p in sweep["points"]] == [8, 8, 12, 12]
assert [p["ok"] for p in sweep["points"]] == [True, False, False, False]
assert sweep["points"][0]["time_to_train_s"] == float(ok["time_to_train_s"])
assert sweep["points"][1]["cost_on_demand"] is None and sweep["points"][2]["estimate"] is None
assert sweep["microbatch_policy"]["fixed_by"] == "the job file's parallel.microbatches"

terminal = open(os.path.join(out, "terminal.txt"), errors="replace").read()
for point in (1, 2):
    assert "simulated (point %d of 2)" % point in terminal, terminal[-2000:]
assert os.path.getsize(os.path.join(out, "search.err")) == 0, open(os.path.join(out, "search.err")).read()
searched = open(os.path.join(out, "search.txt")).read().splitlines()
# 12 nodes: the search splits 1536 / 6 = 256 sequences a rank its own way.
assert searched[1].split()[0] == "12" and " dp6 " in searched[1], searched
assert searched[-1] == "micro-batches: each point's search chooses them", searched
print("fits, does not fit, invalid: why and no cost; every digit; typed JSON; progress on a terminal only")
PY
