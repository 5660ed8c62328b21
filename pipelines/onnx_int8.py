"""Stage `onnx_int8`: ONNX Runtime dynamic INT8 of the fused ONNX graphs, checked against
their parents on the validation split (compress.backends.onnx_runtime_check) and measured
beside their ONNX FP32 parents in the same run."""
import time

from compress.core.config import section
from compress.measure.harness import MeasureConfig
from compress.backends.onnx_runtime import OrtQuantConfig, quantize_onnx
from compress.backends.base import Artifact

from .common import MODELS, PREPARED, run
from .derived import measure_and_report

PARENTS = ("student_onnx", "student_pruned_onnx")


def main(params: dict) -> None:
    t0 = time.perf_counter()
    cfg = section(params, "onnx_int8", OrtQuantConfig)
    mcfg = section(params, "measure", MeasureConfig)
    summary = {"built": {p: quantize_onnx(MODELS / p, MODELS / f"{p}_int8", cfg, PREPARED) for p in PARENTS}}
    measure_and_report(
        "onnx_int8", [Artifact(f"{p}_int8", MODELS / f"{p}_int8", "onnx", "int8", parent=p) for p in PARENTS],
        [Artifact(p, MODELS / p, "onnx", "fp32") for p in PARENTS], mcfg, summary, t0)


if __name__ == "__main__":
    run(main)
