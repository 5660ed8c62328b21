"""What the stages that derive artifacts from a float parent (INT8, ONNX, TensorRT) share:
measure the new artifacts beside their parents in one run, and write the stage report."""
from __future__ import annotations

import time

from compress.env import environment
from compress.measure import MeasureConfig, measure_with_reference
from compress.report import make_report, write_report
from compress.runners import Artifact

from .common import PREPARED, REPORTS


def accuracy_vs_parent(records: list[dict], references: list[dict]) -> dict:
    """{artifact: accuracy / parent accuracy} on the CPU, parents measured in the same run."""
    acc = {r["artifact"]: r["accuracy"] for r in [*references, *records]
           if r["target"] == "cpu" and r["status"] == "ok"}
    return {r["artifact"]: round(r["accuracy"] / acc[r["parent"]], 4) for r in records
            if r["target"] == "cpu" and r["status"] == "ok" and acc.get(r.get("parent"))}


def measure_and_report(stage: str, artifacts: list[Artifact], parents: list[Artifact], mcfg: MeasureConfig,
                       summary: dict, t0: float, extra_records: list[dict] = ()) -> list[dict]:
    """Measure `artifacts` with their `parents` as same-run references, then write
    reports/<stage>.json/.md with `summary` plus speed-ups, agreement and accuracy ratios."""
    records = []
    if artifacts:
        records, same_run = measure_with_reference(artifacts, parents, PREPARED, mcfg)
        summary.update(same_run)
        summary["accuracy_retained_vs_parent"] = accuracy_vs_parent(records, same_run["same_run_reference"])
    records += list(extra_records)
    summary["stage_wall_s"] = round(time.perf_counter() - t0, 1)
    write_report(make_report(stage, records, environment(mcfg.threads), summary), REPORTS)
    for r in records:
        print(f"{r['artifact']}/{r['target']}: {r['status']} accuracy={r['accuracy']} "
              f"agreement={r['agreement_with_parent']} p50={r['latency_ms_p50']} ms {r['reason'] or ''}")
    print("speedup vs parent:", summary.get("speedup_vs_parent"))
    return records
