"""Fine-tune a BERT classifier on a prepared task (used by the teacher stage).

AdamW with linear warm-up and decay, gradient clipping, length-grouped batches, optional
bf16 autocast (AMX/AVX512-BF16 CPUs train ~1.4x faster; master weights stay fp32), a seed
that makes runs repeatable on one machine, a progress bar, and training curves written as
CSV for `dvc plots`.

Under torchrun (compress.core.distributed) every rank draws the same global batches and trains
on its share of each (rows rank, rank + world, ...), DistributedDataParallel all-reduces
the gradients, and each share's loss is weighted by its rows, so a step sees the same
global batch, gradient and learning rate as one process. Sharding the one process's own
length-grouped batches (rather than a DistributedSampler's per-rank batches) is what keeps
the global batches, and so the curves, those of a single process.
"""
from __future__ import annotations

import csv
import math
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import torch
from tqdm.auto import tqdm
from transformers import get_linear_schedule_with_warmup

from compress.core import distributed
from compress.core.config import check
from compress.core.env import bf16_unavailable
from compress.measure.metrics import task_metrics
from compress.data.tokens import Encoded, collate, eval_batches, length_grouped_batches, position_logits


@dataclass(frozen=True)
class FinetuneConfig:
    # Training length: `epochs` over the training rows, or exactly `max_steps` optimizer
    # steps (set the other to null). Steps suit small tasks: 3.7k MRPC pairs are 115 steps
    # an epoch at batch 32, so an epoch count tuned on SST-2's 67k rows undertrains them.
    epochs: float | None = 2.0
    max_steps: int | None = None
    # With epochs: at least this many steps, so a small dataset gets more epochs from the
    # same defaults (10k rows are 281 steps an epoch at batch 32, 67k rows 2,100)
    min_steps: int = 0
    batch_size: int = 32
    lr: float = 1e-4
    weight_decay: float = 0.01
    warmup_ratio: float = 0.06
    max_grad_norm: float = 1.0
    # bf16 autocast where the CPU computes bf16 natively (AMX-BF16 / AVX512-BF16); on other
    # CPUs bf16 is emulated (~25x slower than fp32 on an AVX2 EPYC): training runs in fp32
    # there and the summary says why
    bf16_autocast: bool = True
    eval_every_steps: int = 500  # 0: evaluate only at the end
    log_every_steps: int = 50  # a train.csv row (mean loss since the last row) every N steps
    seed: int = 42
    threads: int = 2

    def __post_init__(self):
        check((self.epochs is None) != (self.max_steps is None),
              "set exactly one of epochs and max_steps (the other to null), got "
              f"epochs={self.epochs}, max_steps={self.max_steps}")
        check(self.epochs is None or self.epochs > 0, f"epochs must be > 0, got {self.epochs}")
        check(self.max_steps is None or self.max_steps >= 1, f"max_steps must be >= 1, got {self.max_steps}")
        check(self.min_steps >= 0, f"min_steps must be >= 0, got {self.min_steps}")
        check(self.batch_size >= 1, f"batch_size must be >= 1, got {self.batch_size}")
        check(0 < self.lr < 1, f"lr must be in (0, 1), got {self.lr}")
        check(self.weight_decay >= 0, f"weight_decay must be >= 0, got {self.weight_decay}")
        check(0 <= self.warmup_ratio < 1, f"warmup_ratio must be in [0, 1), got {self.warmup_ratio}")
        check(self.max_grad_norm > 0, f"max_grad_norm must be > 0, got {self.max_grad_norm}")
        check(self.eval_every_steps >= 0, f"eval_every_steps must be >= 0, got {self.eval_every_steps}")
        check(self.log_every_steps >= 1, f"log_every_steps must be >= 1, got {self.log_every_steps}")
        check(self.threads >= 1, f"threads must be >= 1, got {self.threads}")


@dataclass(frozen=True)
class TeacherTrainConfig(FinetuneConfig):
    """`teacher.train`: fine-tuning of the teacher."""
    min_steps: int = 1500


@dataclass(frozen=True)
class DistillTrainConfig(FinetuneConfig):
    """`distill.train`: the student's (and its label-only control's) training budget."""
    epochs: float | None = 3.0
    min_steps: int = 3000
    lr: float = 2e-4
    eval_every_steps: int = 1000


@dataclass(frozen=True)
class RecoveryConfig(FinetuneConfig):
    """`prune.recovery`: a short, gentle distillation after pruning."""
    epochs: float | None = 0.5
    lr: float = 3e-5
    eval_every_steps: int = 1000


LossFn = Callable[[torch.nn.Module, dict, list], torch.Tensor]


def label_loss(train: Encoded) -> LossFn:
    """Cross-entropy against the gold labels of the batch's scored positions (plain
    fine-tuning: a row's label, or each kept word's tag on its first piece)."""
    labels = torch.from_numpy(train.labels)

    def loss(model, batch, idx):
        logits = train.scored(model(**batch).logits.float(), idx)
        return torch.nn.functional.cross_entropy(logits, labels[train.positions(idx)].to(logits.device))
    return loss


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def to_torch(batch: dict[str, np.ndarray], device: str | torch.device = "cpu") -> dict[str, torch.Tensor]:
    return {k: torch.from_numpy(v).to(device) for k, v in batch.items()}


@torch.no_grad()
def predict_logits(model, enc: Encoded, batch_size: int = 64, sharded: bool = False) -> np.ndarray:
    """Logits (positions, labels) of every scored position (compress.data.tokens) in row
    order, fp32, batches sorted by length: (rows, labels) for a classifier.

    `sharded`: every rank of a torchrun job calls this together; each runs every
    world-th batch (the same batches one process runs) and all get the whole result."""
    was_training = model.training
    model.eval()
    dev = next(model.parameters()).device
    batches = eval_batches(enc.lengths(), batch_size)
    out = position_logits(enc, distributed.shard(batches) if sharded else batches,
                          lambda b: model(**to_torch(b, dev)).logits.float().cpu().numpy(), model.config.num_labels)
    model.train(was_training)
    return distributed.gather_rows(out) if sharded else out


TRAIN_CURVE_FIELDS = ["step", "epoch", "loss", "lr"]


class CurveLog:
    """Append rows to a CSV file that `dvc plots` reads (written by rank 0 only)."""

    def __init__(self, path: Path, fields: list[str]):
        if not distributed.is_main():
            self.log = self.close = lambda **_: None  # the other ranks log nothing
            return
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._f = open(self.path, "w", newline="", encoding="utf-8")
        self._w = csv.DictWriter(self._f, fieldnames=fields)
        self._w.writeheader()

    def log(self, **row) -> None:
        self._w.writerow(row)
        self._f.flush()

    def close(self) -> None:
        self._f.close()


def write_one_evaluation(curves_dir: Path, metrics: dict) -> None:
    """Curves for a model that was not trained: an empty train.csv and eval.csv with the
    one evaluation there is (the plot files dvc.yaml names must exist)."""
    CurveLog(Path(curves_dir) / "train.csv", TRAIN_CURVE_FIELDS).close()
    log = CurveLog(Path(curves_dir) / "eval.csv", ["step", "epoch", *metrics])
    log.log(step=0, epoch=0.0, **metrics)
    log.close()


def planned_steps(cfg: FinetuneConfig, rows: int) -> int:
    """Optimizer steps `finetune` takes over `rows` training rows: `max_steps`, or
    `epochs` of batches but at least `min_steps`."""
    steps_per_epoch = math.ceil(rows / cfg.batch_size)
    return cfg.max_steps or max(1, cfg.min_steps, int(round(steps_per_epoch * cfg.epochs)))


def finetune(model, train: Encoded, val: Encoded, cfg: FinetuneConfig, task, curves_dir: Path,
             desc: str = "fine-tune", loss_fn: LossFn | None = None, bar_position: int = 0) -> dict:
    """Train `model` in place; return a summary (steps, wall time, `final_validation`:
    the metrics on `val`, `task.metrics`, compress.measure.metrics.task_metrics; task is a
    compress.data.prepare.Task).

    `val` is the validation split (Prepared.validation): the curves' evaluations and the
    final figures are on it, never on dev, which only the reports score.

    `loss_fn(model, batch, idx)` computes the loss of a batch (rows `idx` of `train`);
    the default is cross-entropy on the labels. Distillation passes its own.
    """
    if loss_fn is None:
        loss_fn = label_loss(train)
    torch.set_num_threads(distributed.threads(cfg.threads))
    seed_everything(cfg.seed)
    rng = random.Random(cfg.seed)  # the same global batches on every rank
    rank, world, device = distributed.rank(), distributed.world(), distributed.device()
    forward = model
    if world > 1:
        model.to(device)
        # DDP broadcasts rank 0's weights (identical anyway: same seed) and all-reduces
        # (averages) gradients during backward
        forward = torch.nn.parallel.DistributedDataParallel(
            model, device_ids=[device.index] if device.type == "cuda" else None)
        torch.manual_seed(cfg.seed + rank)  # each rank its own dropout masks
    steps_per_epoch = math.ceil(len(train) / cfg.batch_size)
    total = planned_steps(cfg, len(train))
    no_decay = ("bias", "LayerNorm.weight")
    trainable = [(n, p) for n, p in model.named_parameters() if p.requires_grad]  # frozen ones stay as they are
    groups = [
        {"params": [p for n, p in trainable if not n.endswith(no_decay)], "weight_decay": cfg.weight_decay},
        {"params": [p for n, p in trainable if n.endswith(no_decay)], "weight_decay": 0.0},
    ]
    opt = torch.optim.AdamW(groups, lr=cfg.lr, fused=True)
    sched = get_linear_schedule_with_warmup(opt, int(cfg.warmup_ratio * total), total)
    train_log = CurveLog(curves_dir / "train.csv", TRAIN_CURVE_FIELDS)
    eval_log = CurveLog(curves_dir / "eval.csv", ["step", "epoch", *task.metrics])
    bf16 = cfg.bf16_autocast
    no_bf16 = bf16_unavailable() if bf16 and device.type == "cpu" else None
    if no_bf16:
        bf16 = False
        print(f"{desc}: training in fp32, not bf16 autocast: {no_bf16}", flush=True)
    lengths = train.lengths()
    model.train()
    step, t0, seen, running = 0, time.perf_counter(), 0, []
    last_eval = {}
    bar = tqdm(total=total, desc=desc, unit="step", dynamic_ncols=True, mininterval=2.0,
               disable=not distributed.is_main(), position=bar_position)

    def evaluate():
        logits = predict_logits(model, val, sharded=world > 1)
        m = task_metrics(task, val, logits)
        eval_log.log(step=step, epoch=round(step / steps_per_epoch, 4), **m)
        return m

    while step < total:
        for idx in length_grouped_batches(lengths, cfg.batch_size, rng):
            if step >= total:
                break
            if world == 1:
                local, weight = idx, 1.0
            else:
                # this rank's rows of the global batch; DDP averages over ranks, so a
                # share weighs (its rows / batch rows) x world: the global batch mean
                local = idx[rank::world]
                weight = len(local) * world / len(idx)
                if not len(local):  # a last batch smaller than the world: take part, add nothing
                    local, weight = idx[:1], 0.0
            batch = to_torch(collate(train, local), device)
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
                loss = loss_fn(forward, batch, local)
            (loss * weight if world > 1 else loss).backward()
            torch.nn.utils.clip_grad_norm_([p for _, p in trainable], cfg.max_grad_norm)
            opt.step()
            sched.step()
            opt.zero_grad(set_to_none=True)
            step += 1
            seen += len(idx)
            running.append(loss.item() if world == 1 else loss.item() * weight / world)
            if step % cfg.log_every_steps == 0 or step == total:
                mean = float(np.mean(running)) if world == 1 else distributed.all_sum(sum(running)) / len(running)
                train_log.log(step=step, epoch=round(step / steps_per_epoch, 4),
                              loss=round(mean, 6), lr=sched.get_last_lr()[0])
                running = []
            if cfg.eval_every_steps and step % cfg.eval_every_steps == 0 and step < total:
                last_eval = evaluate()
            bar.set_postfix(loss=f"{loss.item():.4f}", **{k: f"{v:.4f}" for k, v in last_eval.items()},
                            refresh=False)  # the bar redraws every mininterval, not every step
            bar.update(1)
    bar.close()
    last_eval = evaluate()
    train_log.close()
    eval_log.close()
    distributed.barrier()  # every rank is done before rank 0 writes anything
    wall = time.perf_counter() - t0
    model.eval()
    if world > 1:
        model.to("cpu")  # saved and measured like a single-process model
    return {"steps": step, "epochs": round(step / steps_per_epoch, 4), "train_rows": len(train),
            "sequences_seen": seen, "train_wall_s": round(wall, 1),
            "train_seq_per_s": round(seen / wall, 1), "threads": torch.get_num_threads(),
            "final_validation": last_eval,
            **({"ranks": world} if world > 1 else {}),
            **({"bf16_autocast": f"off: {no_bf16}"} if no_bf16 else {})}
