"""Stage `teacher`: fine-tune the teacher, save it, measure it on every target."""
import time

from compress.core import distributed
from compress.core.config import section
from compress.data.prepare import Prepared
from compress.core.env import environment
from compress.measure.harness import MeasureConfig, measure_with_reference
from compress.report.schema import make_report, write_report
from compress.backends.base import Artifact
from compress.training.teacher import TeacherConfig, build_teacher

from .common import MODELS, PLOTS, PREPARED, REPORTS, launch_checked, run
from .derived import headline


def main(params: dict) -> None:
    t0 = time.perf_counter()
    cfg = section(params, "teacher", TeacherConfig)
    mcfg = section(params, "measure", MeasureConfig)
    prepared = Prepared.open(PREPARED)
    summary = build_teacher(cfg, prepared, MODELS / "teacher", PLOTS / "teacher", mcfg.eval_max_length)
    if not distributed.is_main():
        return  # rank 0 measures and reports
    records, _ = measure_with_reference([Artifact("teacher", MODELS / "teacher")], [], PREPARED, mcfg)
    summary["stage_wall_s"] = round(time.perf_counter() - t0, 1)
    report = make_report("teacher", records, environment(mcfg.threads), summary)
    write_report(report, REPORTS)
    for r in records:
        print(f"teacher/{r['target']}: {r['status']} {headline(r)} "
              f"p50={r['latency_ms_p50']} ms {r['reason'] or ''}")


def trains(params: dict) -> bool:
    cfg = section(params, "teacher", TeacherConfig)
    return cfg.finetune and launch_checked(params, cfg.train.batch_size, "teacher.train.batch_size")


if __name__ == "__main__":
    run(main, launch=trains)
