"""Stage `distill`: distil the teacher into a shallower student, train the label-only
control with the same budget, measure both, and the teacher again in the same run."""
import time

from compress.core import distributed
from compress.core.config import section
from compress.data.prepare import Prepared
from compress.training.distill import DistillConfig, distill
from compress.core.env import environment
from compress.measure.harness import MeasureConfig, measure_with_reference
from compress.report.schema import make_report, write_report
from compress.backends.base import Artifact

from .common import CACHE, MODELS, PLOTS, PREPARED, REPORTS, launch_checked, run
from .derived import headline, retained_key, retained_vs


def main(params: dict) -> None:
    t0 = time.perf_counter()
    cfg = section(params, "distill", DistillConfig)
    mcfg = section(params, "measure", MeasureConfig)
    prepared = Prepared.open(PREPARED)
    summary = distill(cfg, MODELS / "teacher", CACHE, prepared, MODELS / "student", PLOTS / "distill",
                      MODELS / "student_control", PLOTS / "distill_control", mcfg.eval_max_length)
    if not distributed.is_main():
        return  # rank 0 measures and reports
    # The teacher again, in this run: ratios only compare numbers from one run.
    records, same_run = measure_with_reference(
        [Artifact(name, MODELS / name, parent="teacher") for name in ("student", "student_control")],
        [Artifact("teacher", MODELS / "teacher")], PREPARED, mcfg)
    summary.update(same_run)
    summary[retained_key(records, "teacher")] = retained_vs(records, same_run["same_run_reference"],
                                                            parent_of=lambda r: "teacher")
    summary["stage_wall_s"] = round(time.perf_counter() - t0, 1)
    write_report(make_report("distill", records, environment(mcfg.threads), summary), REPORTS)
    for r in records:
        print(f"{r['artifact']}/{r['target']}: {r['status']} {headline(r)} p50={r['latency_ms_p50']} ms")
    print("speedup vs teacher:", summary["speedup_vs_teacher"])


def trains(params: dict) -> bool:
    return launch_checked(params, section(params, "distill", DistillConfig).train.batch_size,
                          "distill.train.batch_size")


if __name__ == "__main__":
    run(main, launch=trains)
