"""What the stages that derive artifacts from a float parent (INT8, ONNX, TensorRT) share."""
from __future__ import annotations


def accuracy_vs_parent(records: list[dict], references: list[dict]) -> dict:
    """{artifact: accuracy / parent accuracy} on the CPU, parents measured in the same run."""
    acc = {r["artifact"]: r["accuracy"] for r in [*references, *records]
           if r["target"] == "cpu" and r["status"] == "ok"}
    return {r["artifact"]: round(r["accuracy"] / acc[r["parent"]], 4) for r in records
            if r["target"] == "cpu" and r["status"] == "ok" and acc.get(r.get("parent"))}


def print_records(records: list[dict], summary: dict) -> None:
    for r in records:
        print(f"{r['artifact']}/{r['target']}: {r['status']} accuracy={r['accuracy']} "
              f"agreement={r['agreement_with_parent']} p50={r['latency_ms_p50']} ms {r['reason'] or ''}")
    print("speedup vs parent:", summary.get("speedup_vs_parent"))
