"""Stage `inc`: accuracy-aware INT8 of the student with Intel Neural Compressor's
`autotune` (the task's primary metric on the validation split as the objective: accuracy
for a classifier, entity F1 for a tagger; dev only reports), measured beside the float
student."""
import time

from compress.core.config import section
from compress.data.prepare import Prepared
from compress.core.env import environment
from compress.backends.inc import IncConfig, IncGoalNotMet, inc_autotune
from compress.backends.inc_artifact import save_inc_int8
from compress.measure.harness import MeasureConfig
from compress.measure.metrics import task_metrics
from compress.training.models import load_saved
from compress.report.schema import make_report, write_report
from compress.backends.base import Artifact
from compress.data.tokens import collate, encode, eval_batches
from compress.training.train import predict_logits

from .common import MODELS, PREPARED, REPORTS, run
from .derived import measure_and_report

PARENT = "student"
NAME = "student_int8_inc"


def main(params: dict) -> None:
    t0 = time.perf_counter()
    cfg = section(params, "inc", IncConfig)
    mcfg = section(params, "measure", MeasureConfig)
    prepared = Prepared.open(PREPARED)
    model, tokenizer = load_saved(MODELS / PARENT)
    val = encode(tokenizer, prepared.validation(), mcfg.eval_max_length)
    task, objective = prepared.task, prepared.task.primary_metric

    def val_objective(m) -> float:  # the tuning objective: the reports' metric, on validation (never dev)
        return task_metrics(task, val, predict_logits(m, val))[objective]

    # Calibration: a seeded sample of training rows (never validation or dev), length-sorted batches.
    calib = encode(tokenizer, prepared.calibration_rows(cfg.calibration_rows, seed=0), mcfg.eval_max_length)
    batches = [collate(calib, b) for b in eval_batches(calib.lengths(), 32)]
    try:
        qmodel, tuning = inc_autotune(model, val_objective, batches, cfg, objective)
    except IncGoalNotMet as e:  # keep what was tried, then fail the stage
        write_report(make_report("inc", [], environment(mcfg.threads), {"tuning": e.report}), REPORTS)
        raise
    tuning = {**tuning, "objective_split": "validation"}  # the reports' dev figures never steered it
    save_inc_int8(qmodel, tokenizer, MODELS / NAME, extra={"tuning": tuning}, parent=MODELS / PARENT)
    measure_and_report("inc", [Artifact(NAME, MODELS / NAME, "pytorch_inc", "int8", parent=PARENT)],
                       [Artifact(PARENT, MODELS / PARENT)], mcfg, {"tuning": tuning}, t0)


if __name__ == "__main__":
    run(main)
