"""The partune Python module (python/partune_module.cpp), run by ctest with
PYTHONPATH=build/python: a job from a dict is estimated exactly as `partune estimate
--json` estimates its file; bad input raises ValueError naming the key; a sweep's points
are the estimates of their jobs, keep their values' types and all have the same keys (a
point that does not fit or is invalid: a reason, no time or cost); a search keeps its
memory headroom."""
import json
import os
import subprocess
import sys

import partune

SOURCE = os.environ["PARTUNE_SOURCE_DIR"]
CLI = os.environ["PARTUNE_CLI"]
JOB = os.path.join(SOURCE, "scenarios", "jobs", "gpt-neox-20b-p4d-16.yaml")

DICT_JOB = {
    "kind": "job",
    "name": "from-a-dict",
    "model": "gpt2-medium",
    "cluster": {"instance_type": "p4d.24xlarge", "nodes": 2},
    "training": {"global_batch": 64, "precision": "bf16"},
    "parallel": {"tensor_parallel_degree": 2},
}


def cli_json(*args):
    return json.loads(subprocess.run([CLI, *args], check=True, capture_output=True, text=True).stdout)


def test_estimate_from_a_dict():
    got = partune.estimate(DICT_JOB)
    path = os.path.join(os.environ.get("TMPDIR", "/tmp"), "partune-python-dict-job.yaml")
    with open(path, "w") as f:
        json.dump(DICT_JOB, f)  # JSON is YAML: the same job as a file
    want = cli_json("estimate", path, "--json")
    assert got["samples_per_s"] == want["samples_per_s"], (got["samples_per_s"], want["samples_per_s"])
    assert got.keys() == want.keys()
    # Overrides as --set takes them.
    faster = partune.estimate(DICT_JOB, ["nodes=4"])
    assert faster["samples_per_s"] > got["samples_per_s"]


def test_bad_key_raises_value_error_naming_it():
    bad = dict(DICT_JOB, parallel={"tensor_parallel_degre": 2})
    try:
        partune.estimate(bad)
    except ValueError as e:
        assert "parallel.tensor_parallel_degre" in str(e), str(e)
        assert "<dict>" in str(e), str(e)
    else:
        raise AssertionError("a misspelt key was accepted")
    try:
        partune.estimate(JOB, ["tensor_parallel_degree=3"])
    except ValueError as e:
        assert "parallel" in str(e) and JOB in str(e), str(e)
    else:
        raise AssertionError("an inconsistent job was accepted")


def test_load_job_and_sweep():
    job = partune.load_job(JOB)
    assert job["cluster"]["nodes"] == 16 and job["model"]["layers"] == 44
    sweep = partune.sweep(JOB, {"nodes": [8, 16]})
    # Values keep their types: numbers come back as numbers.
    assert [p["values"]["nodes"] for p in sweep["points"]] == [8, 16]
    for p in sweep["points"]:
        want = partune.estimate(JOB, ["nodes=%d" % p["values"]["nodes"]])
        assert p["estimate"]["samples_per_s"] == want["samples_per_s"]


def test_sweep_points_that_do_not_exist_say_why_and_cost_nothing():
    # 8 nodes: fits with checkpointing, not without (a 40 GiB A100). 12 nodes: data-parallel
    # degree 6, and 6 x the job's 48 micro-batches = 288 does not divide 1536 sequences.
    sweep = partune.sweep(JOB, {"nodes": [8, 12], "activation_checkpointing": ["full", "none"],
                                "flash_attention": [False]}, tokens=300e9)
    points = sweep["points"]
    assert len(points) == 4
    assert len({tuple(sorted(p)) for p in points}) == 1, "every point has the same keys"
    assert all(p["values"]["flash_attention"] is False for p in points)
    fits, no_room, invalid = points[0], points[1], points[2]
    assert (fits["status"], fits["ok"], fits["reason"]) == ("fits", True, None)
    # 300e9 tokens / (1536 x 2048 tokens a step) steps, each step_time_s long, on 8 nodes
    # at p4d's on-demand price (scenarios/clusters/p4d.24xlarge.yaml: 21.957642 USD/h).
    steps = 300e9 / (1536 * 2048)
    seconds = steps * fits["estimate"]["step_time_s"]
    assert abs(fits["time_to_train_s"] - seconds) <= 1e-9 * seconds
    assert abs(fits["cost_on_demand"] - seconds / 3600 * 8 * 21.957642) <= 1e-6 * fits["cost_on_demand"]
    assert (no_room["status"], no_room["ok"]) == ("does not fit", False)
    assert "needs" in no_room["reason"] and no_room["estimate"]["fits"] is False
    assert no_room["time_to_train_s"] is None and no_room["cost_on_demand"] is None
    assert (invalid["status"], invalid["ok"], invalid["estimate"]) == ("invalid", False, None)
    assert "288" in invalid["reason"] and "fixed by the job file's parallel.microbatches" in invalid["reason"]
    assert invalid["time_to_train_s"] is None and invalid["cost_on_demand"] is None
    assert sweep["microbatch_policy"]["adapted"] is False


def test_sweep_chooses_open_microbatches():
    # No microbatches in the job: at 2 nodes (dp 8) one micro-batch of 64 / 8 = 8
    # sequences; at 1 node (dp 4) the sweep keeps 8 a micro-batch: 64 / (4 x 8) = 2 of them.
    sweep = partune.sweep(DICT_JOB, {"nodes": [1, 2]})
    assert sweep["microbatch_policy"]["adapted"] is True
    assert [(p["microbatches"], p["microbatch_size"]) for p in sweep["points"]] == [(2, 8), (1, 8)]


def test_search_keeps_the_memory_headroom():
    # GPT-NeoX 20B on 16 p4d (A100-40GB), estimator only: every ranked candidate peaks
    # below 90% of the HBM with the default headroom; 0 admits fuller ones; a headroom
    # outside [0, 0.9] is refused by name.
    def peaks(result):
        return [c["peak_memory_bytes"] for c in result["ranked"]]
    kept = partune.search(JOB, estimator_only=True, top_k=4)
    assert kept["memory_headroom"] == 0.1
    assert max(peaks(kept)) <= 0.9 * 40 * 2**30, peaks(kept)
    tight = partune.search(JOB, estimator_only=True, top_k=4, memory_headroom=0.0)
    assert tight["pruned_memory"] < kept["pruned_memory"]
    try:
        partune.search(JOB, estimator_only=True, memory_headroom=0.95)
    except ValueError as e:
        assert "memory_headroom" in str(e), str(e)
    else:
        raise AssertionError("a headroom of 0.95 was accepted")


if __name__ == "__main__":
    for name, test in sorted(globals().items()):
        if name.startswith("test_") and callable(test):
            test()
            print("ok", name)
    sys.exit(0)
