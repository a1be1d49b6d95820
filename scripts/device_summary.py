#!/usr/bin/env python3
"""device-check.sh's summary: OUT/summary.json from the steps' verdicts (OUT/verdicts.tmp,
NAME=VERDICT lines) and, for each single-GPU job of validate.json, the measured model
TFLOP/s and MFU: the job's model FLOPs per step (`partune estimate --json`
model_flops_per_step: 3 x the layer plan's forward FLOPs, no recompute) over the measured
step time, against the instance type's dense peak for the job's precision (the estimate's
tflops_per_gpu / mfu). In a dry run the backend ran a scaled-down model: no MFU.
Usage: device_summary.py OUT BIN INSTANCE DEVICE SECONDS"""
import json
import os
import subprocess
import sys

out, bin_dir, instance, device, seconds = sys.argv[1:6]
summary = {"device": device, "instance_type": instance, "seconds": int(seconds), "steps": {}, "jobs": []}
try:
    with open(os.path.join(out, "verdicts.tmp")) as f:
        for line in f:
            name, _, verdict = line.strip().partition("=")
            if name:
                summary["steps"][name] = verdict
except OSError:
    pass

try:
    with open(os.path.join(out, "validate.json")) as f:
        validate = json.load(f)
except (OSError, ValueError):
    validate = {"jobs": []}
for job in validate.get("jobs", []):
    row = {"job": job.get("job"), "step_time": job.get("step_time"), "memory": job.get("memory"),
           "error": job.get("error")}
    measured = (job.get("step_time") or {}).get("measured_s")
    # The same job predicted on the datasheet file (validate predicted it on the calibrated one).
    sim = subprocess.run([os.path.join(bin_dir, "partune"), "simulate", job["file"], "--set",
                          f"instance_type={instance}", "--json"], capture_output=True, text=True)
    if sim.returncode == 0 and measured and device == "cuda":
        predicted = json.loads(sim.stdout)["step_time_s"]
        row["datasheet_prediction"] = {"instance_type": instance, "predicted_s": predicted,
                                       "error_pct": 100.0 * (predicted - measured) / measured}
    if device == "cuda" and measured:
        est = subprocess.run([os.path.join(bin_dir, "partune"), "estimate", job["file"], "--set",
                              f"instance_type={instance}", "--json"], capture_output=True, text=True)
        if est.returncode == 0:
            e = json.loads(est.stdout)
            peak = e["tflops_per_gpu"] / e["mfu"] if e.get("mfu") else None
            tflops = e["model_flops_per_step"] / measured / 1e12
            row.update({"model_flops_per_step": e["model_flops_per_step"], "measured_model_tflops": tflops,
                        "peak_tflops": peak, "measured_mfu": tflops / peak if peak else None,
                        "estimated_mfu": e.get("mfu")})
    summary["jobs"].append(row)
json.dump(summary, sys.stdout, indent=2)
print()
