"""Stage `quantize`: the PyTorch precision variants of the student and the pruned student,
measured beside their float parents in the same run: INT8 (torchao, dynamic activations)
and BF16 (the FP32 weights cast at load, `<parent>_bf16`; no files of its own). BF16 runs
on CPUs with native bf16 (AMX-BF16 or AVX512-BF16) and is `skipped` with the reason on
others."""
import time

from compress.core.config import section
from compress.measure.harness import MeasureConfig
from compress.backends.torchao import QuantizeConfig, quantize_checkpoint
from compress.backends.base import Artifact

from .common import MODELS, run
from .derived import measure_and_report

PARENTS = ("student", "student_pruned")


def main(params: dict) -> None:
    t0 = time.perf_counter()
    cfg = section(params, "quantize", QuantizeConfig)
    mcfg = section(params, "measure", MeasureConfig)
    summary = {"built": {p: quantize_checkpoint(MODELS / p, MODELS / f"{p}_int8_torch", cfg) for p in PARENTS}}
    measure_and_report(
        "quantize",
        [Artifact(f"{p}_int8_torch", MODELS / f"{p}_int8_torch", "pytorch_int8", "int8", parent=p) for p in PARENTS]
        + [Artifact(f"{p}_bf16", MODELS / p, "pytorch", "bf16", parent=p) for p in PARENTS],
        [Artifact(p, MODELS / p) for p in PARENTS], mcfg, summary, t0)


if __name__ == "__main__":
    run(main)
