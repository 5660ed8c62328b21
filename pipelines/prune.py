"""Stage `prune`: remove attention heads (and optionally FFN neurons) from the student,
recover by distillation, measure it beside the unpruned student in the same run."""
import time

from compress.core import distributed
from compress.core.config import section
from compress.data.prepare import Prepared
from compress.core.env import environment
from compress.measure.harness import MeasureConfig, measure_with_reference
from compress.training.prune import PruneConfig, prune_student
from compress.report.schema import make_report, primary_metric, write_report
from compress.backends.base import Artifact

from .common import CACHE, MODELS, PLOTS, PREPARED, REPORTS, launch_checked, run


def main(params: dict) -> None:
    t0 = time.perf_counter()
    cfg = section(params, "prune", PruneConfig)
    mcfg = section(params, "measure", MeasureConfig)
    prepared = Prepared.open(PREPARED)
    summary = prune_student(cfg, MODELS / "student", CACHE, prepared, MODELS / "student_pruned",
                            PLOTS / "prune", mcfg.eval_max_length)
    if not distributed.is_main():
        return  # rank 0 measures and reports
    records, same_run = measure_with_reference(
        [Artifact("student_pruned", MODELS / "student_pruned", parent="student")],
        [Artifact("student", MODELS / "student")], PREPARED, mcfg)
    summary.update(same_run)
    cpu = next(r for r in records if r["target"] == "cpu")
    ref_cpu = next(r for r in same_run["same_run_reference"] if r["target"] == "cpu")
    metric = primary_metric(records)[0]  # accuracy; entity F1 for a tagger
    summary[f"{metric}_change_vs_student_points"] = round(100 * (cpu[metric] - ref_cpu[metric]), 2)
    summary["stage_wall_s"] = round(time.perf_counter() - t0, 1)
    write_report(make_report("prune", records, environment(mcfg.threads), summary), REPORTS)
    p = summary["pruned"]
    print(f"pruned {p['heads_removed']}/{p['heads_total']} heads, heads per layer {p['heads_per_layer']}, "
          f"FFN {p['intermediate_size']}; {metric} {cpu[metric]} "
          f"({summary[f'{metric}_change_vs_student_points']:+} points vs student)")
    print("speedup vs student:", summary["speedup_vs_student"])


def trains(params: dict) -> bool:
    """Several processes only for the recovery distillation (scoring heads is one pass)."""
    cfg = section(params, "prune", PruneConfig)
    return cfg.recover and launch_checked(params, cfg.recovery.batch_size, "prune.recovery.batch_size")


if __name__ == "__main__":
    run(main, launch=trains)
