"""Stage `quantize`: PyTorch dynamic INT8 of the student and the pruned student, measured
beside their float parents in the same run."""
import time

from compress.config import section
from compress.env import environment
from compress.measure import MeasureConfig, measure_with_reference
from compress.quantize import QuantizeConfig, quantize_checkpoint
from compress.report import make_report, write_report
from compress.runners import Artifact

from .common import MODELS, PREPARED, REPORTS, run
from .derived import accuracy_vs_parent, print_records

PARENTS = ("student", "student_pruned")


def main(params: dict) -> None:
    t0 = time.perf_counter()
    cfg = section(params, "quantize", QuantizeConfig)
    mcfg = section(params, "measure", MeasureConfig)
    summary = {"built": {p: quantize_checkpoint(MODELS / p, MODELS / f"{p}_int8_torch", cfg) for p in PARENTS}}
    records, same_run = measure_with_reference(
        [Artifact(f"{p}_int8_torch", MODELS / f"{p}_int8_torch", "pytorch_int8", "int8", parent=p) for p in PARENTS],
        [Artifact(p, MODELS / p) for p in PARENTS], PREPARED, mcfg)
    summary.update(same_run)
    summary["accuracy_retained_vs_parent"] = accuracy_vs_parent(records, same_run["same_run_reference"])
    summary["stage_wall_s"] = round(time.perf_counter() - t0, 1)
    write_report(make_report("quantize", records, environment(mcfg.threads), summary), REPORTS)
    print_records(records, summary)


if __name__ == "__main__":
    run(main)
