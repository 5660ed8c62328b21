"""Stage `quantize`: PyTorch dynamic INT8 of the student and the pruned student, measured
beside their float parents in the same run."""
import time

from compress.config import section
from compress.measure import MeasureConfig
from compress.quantize import QuantizeConfig, quantize_checkpoint
from compress.runners import Artifact

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
        [Artifact(f"{p}_int8_torch", MODELS / f"{p}_int8_torch", "pytorch_int8", "int8", parent=p) for p in PARENTS],
        [Artifact(p, MODELS / p) for p in PARENTS], mcfg, summary, t0)


if __name__ == "__main__":
    run(main)
