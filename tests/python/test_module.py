"""The partune Python module (python/partune_module.cpp), run by ctest with
PYTHONPATH=build/python: a job from a dict is estimated exactly as `partune estimate
--json` estimates its file; bad input raises ValueError naming the key; a sweep's points
are the estimates of their jobs."""
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
    assert [p["values"]["nodes"] for p in sweep["points"]] == ["8", "16"]
    for p in sweep["points"]:
        want = partune.estimate(JOB, ["nodes=" + p["values"]["nodes"]])
        assert p["estimate"]["samples_per_s"] == want["samples_per_s"]


if __name__ == "__main__":
    for name, test in sorted(globals().items()):
        if name.startswith("test_") and callable(test):
            test()
            print("ok", name)
    sys.exit(0)
