#!/usr/bin/env python3
"""device-check.sh's step 3: the two-rank runs on one GPU (tensor parallel 2, pipeline 2)
against the one-process run of the same model, batch and seed. Reads OUT/ranks-*.json.tmp
(partune-run --json reports), prints one JSON object, exits 1 when a run is missing or a
step's loss is off by more than the tolerance:
  - CPU (fp32; the dry run): 1e-4 relative, the backend's equivalence tests' bound;
  - CUDA (bf16): 2^-6 relative = four bf16 units in the last place of the loss (bf16 keeps
    8 significant bits: 2^-8). The ranks' partial sums are rounded to bf16 where one
    process adds them in fp32 inside its GEMM, so per-element differences of an ulp are
    expected; a wrong split (a missing all-reduce, a wrong stage hand-off) moves the loss
    by far more than this from the first step.
The fp8 run (the same one process, its projections' GEMMs in fp8 with per-tensor current
scaling) is held to 2^-5 relative: e4m3 keeps 4 significant bits, and each GEMM's inputs
are rounded to them (a relative error of up to 2^-4 an element, averaging out over the
sums of 2048-8192 products); a wrong scale or operand layout moves the loss by far more.
On the CPU (the dry run) fp8 jobs compute in fp32: equal to the one-process run.
NCCL's answer to two ranks on one device is recorded (it is expected to refuse them)."""
import json
import os
import sys

out, device = sys.argv[1], sys.argv[2]
tolerance = 1e-4 if device == "cpu" else 2.0 ** -6


def report(name):
    path = os.path.join(out, f"ranks-{name}.json.tmp")
    try:
        with open(path) as f:
            text = f.read()
        start = text.find("{")
        return json.loads(text[start:]) if start >= 0 else None
    except (OSError, ValueError):
        return None


result = {"device": device, "relative_tolerance": tolerance, "runs": {}}
ok = True
one = report("one")
if one is None:
    ok = False
    result["error"] = "the one-process run left no report"
fp8_tolerance = 1e-4 if device == "cpu" else 2.0 ** -5
result["fp8_relative_tolerance"] = fp8_tolerance
for name in ("tp2", "pp2", "fp8"):
    bound = fp8_tolerance if name == "fp8" else tolerance
    r = report(name)
    if r is None or one is None:
        result["runs"][name] = {"error": "no report"}
        ok = False
        continue
    steps = []
    for a, b in zip(one["steps"], r["steps"]):
        rel = abs(a["loss"] - b["loss"]) / max(abs(a["loss"]), 1e-12)
        steps.append({"step": a["step"], "one_process": a["loss"], "ranks": b["loss"], "relative_difference": rel,
                      "seconds_one": a["seconds"], "seconds_ranks": b["seconds"]})
        ok = ok and rel <= bound
    result["runs"][name] = {"device": r.get("device"), "steps": steps,
                            "max_relative_difference": max((s["relative_difference"] for s in steps), default=None)}
if device != "cpu":
    nccl = report("nccl")
    result["nccl_two_ranks_one_device"] = "ran" if nccl else "refused (see device-check.log)"
result["passed"] = ok
print(json.dumps(result, indent=2))
sys.exit(0 if ok else 1)
