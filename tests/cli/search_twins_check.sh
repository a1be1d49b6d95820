#!/usr/bin/env bash
# GPT-3 175B on 120 p4d with tp8 and pp12 fixed: PDT and DPT place every group the same
# way (tensor groups fill a node, data and pipeline peers on other nodes), so the model
# predicts each such pair alike. The table shows each configuration once (its twin named
# after "also:"), "why it wins" compares with a configuration other than a placement
# twin, and a notation line follows the table. --json still lists every candidate.
# Usage: search_twins_check.sh PARTUNE JOB OUT
set -euo pipefail
partune=$1 job=$2 out=$3
args=(search "$job" --estimator-only --fix tensor_parallel_degree=8 --fix pipeline_parallel_degree=12
      --fix placement_strategy=PDT,DPT --show 10)
"$partune" "${args[@]}" > "$out.txt"
"$partune" "${args[@]}" --json > "$out.json"
/usr/bin/python3 - "$out.txt" "$out.json" <<'PY'
import json, re, sys
text, report = open(sys.argv[1]).read(), json.load(open(sys.argv[2]))
order = re.compile(r" (?:DPT|DTP|PDT|PTD|TDP|TPD)(?= |$)")
def bare(configuration):  # the configuration without its placement order
    return order.sub("", configuration.strip())
rows = [m.group(1) for m in re.finditer(r"^ *\d+  (.+?) {2,}[\d.]+ ", text, re.M)]
assert len(rows) == 10, f"{len(rows)} table rows:\n{text}"
assert len({bare(r) for r in rows}) == len(rows), f"a configuration shown twice:\n{text}"
assert "also: " in text, f"no twin named in:\n{text}"
assert re.search(r"^  notation: .*mbMxS", text, re.M), f"no notation line:\n{text}"
best = re.search(r"^best: (.+?)(  also: .*)?$", text, re.M).group(1)
runner_up = re.search(r"faster than the runner-up \((.+?)\);", text).group(1)
assert bare(runner_up) != bare(best), f"the runner-up is the winner's twin:\n{text}"
assert runner_up.strip() == rows[1].strip(), f"the runner-up is not the table's second row:\n{text}"
# The JSON keeps both members of each pair: every bare configuration of the table twice.
counts = {}
for c in report["ranked"]:
    counts[bare(c["configuration"])] = counts.get(bare(c["configuration"]), 0) + 1
assert all(counts.get(bare(r)) == 2 for r in rows), counts
print("twins shown once:", len(rows), "rows")
PY
