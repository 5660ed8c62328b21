"""Stage `onnx_int8`: ONNX Runtime dynamic INT8 of the fused ONNX graphs, measured beside
their ONNX FP32 parents in the same run."""
import time

from compress.config import section
from compress.env import environment
from compress.measure import MeasureConfig, measure_with_reference
from compress.onnx_runtime import OrtQuantConfig, quantize_onnx
from compress.report import make_report, write_report
from compress.runners import Artifact

from .common import MODELS, PREPARED, REPORTS, run
from .derived import accuracy_vs_parent, print_records

PARENTS = ("student_onnx", "student_pruned_onnx")


def main(params: dict) -> None:
    t0 = time.perf_counter()
    cfg = section(params, "onnx_int8", OrtQuantConfig)
    mcfg = section(params, "measure", MeasureConfig)
    summary = {"built": {p: quantize_onnx(MODELS / p, MODELS / f"{p}_int8", cfg) for p in PARENTS}}
    records, same_run = measure_with_reference(
        [Artifact(f"{p}_int8", MODELS / f"{p}_int8", "onnx", "int8", parent=p) for p in PARENTS],
        [Artifact(p, MODELS / p, "onnx", "fp32") for p in PARENTS], PREPARED, mcfg)
    summary.update(same_run)
    summary["accuracy_retained_vs_parent"] = accuracy_vs_parent(records, same_run["same_run_reference"])
    summary["stage_wall_s"] = round(time.perf_counter() - t0, 1)
    write_report(make_report("onnx_int8", records, environment(mcfg.threads), summary), REPORTS)
    print_records(records, summary)


if __name__ == "__main__":
    run(main)
