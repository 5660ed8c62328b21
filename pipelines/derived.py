"""What the stages that derive artifacts from a float parent (INT8, ONNX, TensorRT) share:
measure the new artifacts beside their parents in one run, and write the stage report."""
from __future__ import annotations

import time

from compress.core.env import environment
from compress.measure.harness import MeasureConfig, measure_with_reference
from compress.report.schema import make_report, primary_metric, write_report
from compress.backends.base import Artifact

from .common import PREPARED, REPORTS


def retained_vs(records: list[dict], references: list[dict], parent_of=lambda r: r.get("parent")) -> dict:
    """{artifact: metric / parent's metric} on the CPU, parents measured in the same run;
    the metric is the task's primary one (accuracy; entity F1 for a tagger)."""
    metric = primary_metric([*references, *records])[0]
    acc = {r["artifact"]: r[metric] for r in [*references, *records]
           if r["target"] == "cpu" and r["status"] == "ok"}
    return {r["artifact"]: round(r[metric] / acc[parent_of(r)], 4) for r in records
            if r["target"] == "cpu" and r["status"] == "ok" and acc.get(parent_of(r))}


def retained_key(records: list[dict], vs: str) -> str:
    """The summary key of retained_vs: accuracy_retained_vs_<vs> (f1_... for a tagger)."""
    return f"{primary_metric(records)[0]}_retained_vs_{vs}"


def headline(r: dict) -> str:
    """`accuracy=0.89` (or `f1=0.91` for a tagger) for a stage's console lines."""
    metric = primary_metric([r])[0]
    return f"{metric}={r.get(metric)}"


def measure_and_report(stage: str, artifacts: list[Artifact], parents: list[Artifact], mcfg: MeasureConfig,
                       summary: dict, t0: float, extra_records: list[dict] = ()) -> list[dict]:
    """Measure `artifacts` with their `parents` as same-run references, then write
    reports/<stage>.json/.md with `summary` plus speed-ups, agreement and accuracy ratios."""
    records = []
    if artifacts:
        records, same_run = measure_with_reference(artifacts, parents, PREPARED, mcfg)
        summary.update(same_run)
        summary[retained_key(records, "parent")] = retained_vs(records, same_run["same_run_reference"])
    records += list(extra_records)
    summary["stage_wall_s"] = round(time.perf_counter() - t0, 1)
    write_report(make_report(stage, records, environment(mcfg.threads), summary), REPORTS)
    for r in records:
        print(f"{r['artifact']}/{r['target']}: {r['status']} {headline(r)} "
              f"agreement={r['agreement_with_parent']} p50={r['latency_ms_p50']} ms {r['reason'] or ''}")
    print("speedup vs parent:", summary.get("speedup_vs_parent"))
    return records
