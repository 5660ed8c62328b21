"""Knowledge distillation: a shallower student initialised from chosen teacher layers
(as DistilBERT does), trained on soft teacher targets plus the gold labels.

Loss = alpha_kd * T^2 * KL(softmax(t/T) || softmax(s/T)) + (1 - alpha_kd) * CE(s, y)
       + hidden_mse_weight * MSE(student hidden, teacher hidden)        (mapped layers)
       + attention_weight * MSE(student attention, teacher attention)   (mapped layers)

Teacher logits on the transfer set come from a cache (`cache_teacher_outputs`), computed
once, so extra student epochs never rerun the teacher. Hidden-state and attention losses
(TinyBERT style) need the teacher's intermediate outputs per token, too large to cache for
67k sentences by default; when their weights are non-zero the teacher runs alongside the
student in inference mode for those terms only.
"""
from __future__ import annotations

import copy
import json
import sys
import time
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from tqdm.auto import tqdm
from transformers import BertForSequenceClassification

from compress.core import distributed
from compress.core.alongside import Alongside
from compress.core.config import check
from compress.core.errors import UserError
from compress.training.augment import UNLABELLED, AugmentConfig, augment, describe
from compress.data.prepare import Prepared, json_line, read_jsonl
from compress.training.models import load_saved, save_trained
from compress.data.tokens import Encoded, encode, eval_batches, position_logits
from compress.training.train import DistillTrainConfig, finetune, planned_steps, seed_everything, to_torch


# --- student construction ----------------------------------------------------------------

def ffn_neuron_scores(layer) -> torch.Tensor:
    """Importance of each FFN neuron of a BertLayer, by weight magnitude:
    ||row of the up-projection|| * ||column of the down-projection||. Shape (intermediate,)."""
    w_in = layer.intermediate.dense.weight  # (intermediate, hidden)
    w_out = layer.output.dense.weight  # (hidden, intermediate)
    return w_in.norm(dim=1) * w_out.norm(dim=0)


def slice_ffn(layer, keep: torch.Tensor) -> None:
    """Keep only FFN neurons `keep` (sorted indices) of a BertLayer, in place."""
    keep = keep.sort().values
    up, down = layer.intermediate.dense, layer.output.dense
    new_up = torch.nn.Linear(up.in_features, len(keep))
    new_up.weight.data = up.weight.data[keep].clone()  # (k, hidden)
    new_up.bias.data = up.bias.data[keep].clone()
    new_down = torch.nn.Linear(len(keep), down.out_features)
    new_down.weight.data = down.weight.data[:, keep].clone()  # (hidden, k)
    new_down.bias.data = down.bias.data.clone()
    layer.intermediate.dense, layer.output.dense = new_up, new_down


def make_student(teacher: BertForSequenceClassification, layers: list[int],
                 intermediate_size: int | None = None) -> BertForSequenceClassification:
    """A copy of the teacher keeping only encoder layers `layers` (in order); optionally
    each FFN reduced to its `intermediate_size` most important neurons."""
    n = teacher.config.num_hidden_layers
    bad = [i for i in layers if not 0 <= i < n]
    if bad:
        raise ValueError(f"student layers {bad} do not exist in a {n}-layer teacher (valid: 0..{n - 1})")
    student = copy.deepcopy(teacher)
    student.bert.encoder.layer = torch.nn.ModuleList([student.bert.encoder.layer[i] for i in layers])
    student.config.num_hidden_layers = len(layers)
    if intermediate_size is not None and intermediate_size < teacher.config.intermediate_size:
        for layer in student.bert.encoder.layer:
            slice_ffn(layer, ffn_neuron_scores(layer).topk(intermediate_size).indices)
        student.config.intermediate_size = intermediate_size
    return student


# --- teacher outputs cache ---------------------------------------------------------------

@torch.no_grad()
def teacher_logits(teacher, enc: Encoded, batch_size: int = 128, desc: str = "teacher logits") -> np.ndarray:
    """fp32 logits (positions, labels) of the teacher on every scored position (a row, or
    each kept word's first piece; compress.data.tokens), with a progress bar.
    Under torchrun each rank runs every world-th batch of the one-process batches (so each
    row is computed in the same batch as by one process) and all get every row."""
    teacher.eval()
    batches = distributed.shard(eval_batches(enc.lengths(), batch_size))
    batches = tqdm(batches, desc=desc, unit="batch", mininterval=2.0, disable=not distributed.is_main())
    out = position_logits(enc, batches, lambda b: teacher(**to_torch(b)).logits.float().numpy(),
                          teacher.config.num_labels)
    return distributed.gather_rows(out)


@dataclass(frozen=True)
class CacheConfig:
    max_length: int = 64  # truncation of the transfer set; the student trains on the same
    batch_size: int = 128
    threads: int = 2
    augment: AugmentConfig = field(default_factory=AugmentConfig)  # extra transfer rows (off: size 0)

    def __post_init__(self):
        check(8 <= self.max_length <= 512, f"max_length must be in [8, 512], got {self.max_length}")
        check(self.batch_size >= 1, f"batch_size must be >= 1, got {self.batch_size}")
        check(self.threads >= 1, f"threads must be >= 1, got {self.threads}")


AUGMENTED = "augmented.jsonl"  # the cache's augmented rows; the transfer set is train + these


def cache_teacher_outputs(teacher_dir: Path, prepared: Prepared, out_dir: Path, cfg: CacheConfig) -> dict:
    """Build the transfer set (the train split, then `cfg.augment`'s new rows) and write
    logits.npy (scored positions x labels), augmented.jsonl and meta.json into out_dir,
    atomically: the rows and the logits that label them live and die together.

    A classifier's cache is fp32, one row per sentence. A tagger's holds one row per word
    (its first piece) in float16, half the size: the rounding error
    (|logit| < 2048: at most 2^-11 relative) is recorded in meta.json as the largest
    absolute logit error and the largest change it makes to a position's distillation
    loss (KL at temperature 2), so the loss it feeds is known to stay exact enough."""
    cfg.augment.check_task(prepared.task)
    torch.set_num_threads(distributed.threads(cfg.threads))
    t0 = time.perf_counter()
    teacher, tokenizer = load_saved(teacher_dir)
    train = prepared.split("train")
    extra, per_kind = augment(train, cfg.augment)
    enc = encode(tokenizer, train + extra, cfg.max_length)
    logits = teacher_logits(teacher, enc, cfg.batch_size)
    n_gold = int(enc.offsets[len(train)])  # scored positions of the train rows (all of them)
    agree = float((logits[:n_gold].argmax(-1) == enc.labels[:n_gold]).mean())
    meta = {"rows": len(enc), "max_length": cfg.max_length, "data_sha256": prepared.sha256("train"),
            "teacher_train_accuracy": round(agree, 6)}
    if prepared.task.kind_impl.half_cache:
        meta["positions"] = len(logits)
        logits, meta["storage"] = _half(logits)
    if cfg.augment.size > 0:  # an unaugmented cache keeps today's meta.json byte for byte
        meta["augmentation"] = describe(cfg.augment, per_kind, len(train))
        # how the teacher labels each kind: share predicted positive (cross pairs ~ all negative)
        meta["augmentation"]["teacher_positive_share"] = _positive_share(logits[len(train):], per_kind)
    distributed.barrier()
    with distributed.output_dir(out_dir) as tmp:  # rank 0 writes
        np.save(tmp / "logits.npy", logits)
        with open(tmp / AUGMENTED, "w", encoding="utf-8") as f:
            f.writelines(json_line(ex, prepared.task) for ex in extra)
        # no timing in the cached output: the same inputs must give the same bytes
        (tmp / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    return {**meta, "wall_s": round(time.perf_counter() - t0, 1)}


def _half(logits: np.ndarray, temperature: float = 2.0) -> tuple[np.ndarray, dict]:
    """float16 logits and what the rounding costs: the largest absolute logit error and
    the largest per-position KL(teacher_fp32_T || teacher_fp16_T) at `temperature`."""
    half = logits.astype(np.float16)
    t32 = torch.from_numpy(logits) / temperature
    t16 = torch.from_numpy(half.astype(np.float32)) / temperature
    kl = F.kl_div(F.log_softmax(t16, -1), F.log_softmax(t32, -1), reduction="none", log_target=True).sum(-1)
    return half, {"dtype": "float16", "max_abs_logit_error": float(np.abs(half - logits).max()) if len(logits) else 0.0,
                  "max_kl_t2": float(kl.max()) if len(logits) else 0.0}


def _positive_share(logits: np.ndarray, per_kind: dict[str, int]) -> dict[str, float | None]:
    """Share of each kind's rows (contiguous, in kind order as `augment` returns them) that
    the teacher calls class 1."""
    out, start = {}, 0
    for kind, n in per_kind.items():
        out[kind] = round(float((logits[start:start + n].argmax(-1) == 1).mean()), 4) if n else None
        start += n
    return out


def load_teacher_cache(cache_dir: Path, prepared: Prepared) -> tuple[np.ndarray, dict]:
    """(logits, meta) of the cache; refuses a cache built from other training data."""
    meta_path = Path(cache_dir) / "meta.json"
    if not meta_path.is_file():
        raise UserError(f"{meta_path}: no teacher cache; run the teacher_logits stage")
    meta = json.loads(meta_path.read_text())
    if meta["data_sha256"] != prepared.sha256("train"):
        raise UserError(f"{cache_dir}: the teacher cache was built from other training data; "
                        "rerun the teacher_logits stage")
    return np.load(Path(cache_dir) / "logits.npy", allow_pickle=False), meta


def load_transfer(cache_dir: Path, prepared: Prepared) -> tuple[list, np.ndarray, dict]:
    """(rows, logits, meta): the transfer set (train split, then the cache's augmented rows)
    with the teacher logits of each row."""
    logits, meta = load_teacher_cache(cache_dir, prepared)
    extra_path = Path(cache_dir) / AUGMENTED
    rows = prepared.split("train") + (read_jsonl(extra_path, prepared.task) if extra_path.is_file() else [])
    expected = meta.get("positions", len(rows))  # a tagger's cache: one row per scored word
    if len(rows) != meta["rows"] or len(logits) != expected:
        raise UserError(f"{cache_dir}: {len(logits)} cached logits for {len(rows)} transfer rows "
                        f"({expected} expected); rerun the teacher_logits stage")
    return rows, logits, meta


def check_positions(enc: Encoded, logits: np.ndarray, cache_dir: Path) -> None:
    """The cache's logits were computed on these very scored positions (same tokenizer,
    same truncation)."""
    if len(enc.labels) != len(logits):
        raise UserError(f"{cache_dir}: {len(logits)} cached logits for {len(enc.labels)} scored positions of the "
                        "transfer set; the tokenizer or max_length changed: rerun the teacher_logits stage")


# --- losses --------------------------------------------------------------------------------

def kd_loss(student_logits: torch.Tensor, teacher_logits: torch.Tensor, labels: torch.Tensor,
            temperature: float, alpha_kd: float) -> torch.Tensor:
    """alpha * T^2 * KL(teacher_T || student_T) + (1 - alpha) * CE(student, labels).
    The T^2 factor keeps soft-target gradients on the scale of the hard loss (Hinton et al.)."""
    s, t = student_logits.float(), teacher_logits.float()
    soft = F.kl_div(F.log_softmax(s / temperature, -1), F.log_softmax(t / temperature, -1),
                    reduction="batchmean", log_target=True) * temperature ** 2
    if bool((labels < 0).any()):  # only then: a fully labelled batch keeps today's exact arithmetic
        # augmented rows (label -1) have teacher logits only: the label term averages over
        # the batch with those rows contributing zero, so a row's weight does not depend on
        # how many labelled rows share its batch
        hard = F.cross_entropy(s, labels, ignore_index=UNLABELLED, reduction="sum") / len(labels)
    else:
        hard = F.cross_entropy(s, labels)
    return alpha_kd * soft + (1 - alpha_kd) * hard


def hidden_mse(student_hidden, teacher_hidden, layer_map: list[int], mask: torch.Tensor) -> torch.Tensor:
    """Mean squared error between student layer i's output and teacher layer layer_map[i]'s,
    over real (unpadded) tokens. hidden_states[0] is the embeddings, so layer k is [k+1]."""
    m = mask.unsqueeze(-1).float()  # (batch, seq, 1)
    total = 0.0
    for i, t in enumerate(layer_map):
        diff = (student_hidden[i + 1].float() - teacher_hidden[t + 1].float()) ** 2 * m
        total = total + diff.sum() / (m.sum() * diff.shape[-1])
    return total / len(layer_map)


def attention_mse(student_att, teacher_att, layer_map: list[int], mask: torch.Tensor) -> torch.Tensor:
    """MSE between attention distributions (batch, heads, seq, seq) of mapped layers, over
    real query/key pairs. Heads must match, so this needs an unpruned student."""
    pair = (mask[:, None, :, None] * mask[:, None, None, :]).float()  # (batch, 1, seq, seq)
    total = 0.0
    for i, t in enumerate(layer_map):
        diff = (student_att[i].float() - teacher_att[t].float()) ** 2 * pair
        total = total + diff.sum() / (pair.sum() * student_att[i].shape[1])
    return total / len(layer_map)


@dataclass(frozen=True)
class DistillLossConfig:
    temperature: float = 2.0
    alpha_kd: float = 0.9  # weight of the soft-target loss; 1 - alpha_kd goes to the labels
    hidden_mse_weight: float = 0.0
    attention_weight: float = 0.0

    def __post_init__(self):
        check(self.temperature > 0, f"temperature must be > 0, got {self.temperature}")
        check(0 <= self.alpha_kd <= 1, f"alpha_kd must be in [0, 1], got {self.alpha_kd}")
        check(self.hidden_mse_weight >= 0, f"hidden_mse_weight must be >= 0, got {self.hidden_mse_weight}")
        check(self.attention_weight >= 0, f"attention_weight must be >= 0, got {self.attention_weight}")


def distill_loss_fn(train: Encoded, cached_logits: np.ndarray, cfg: DistillLossConfig,
                    teacher=None, layer_map: list[int] | None = None):
    """The loss closure `finetune` calls for each batch."""
    need_teacher = cfg.hidden_mse_weight > 0 or cfg.attention_weight > 0
    if need_teacher and (teacher is None or layer_map is None):
        raise ValueError("hidden/attention losses need the teacher model and a layer map")
    labels = torch.from_numpy(train.labels)
    t_logits = torch.from_numpy(cached_logits)

    def loss(model, batch, idx):
        out = model(**batch, output_hidden_states=cfg.hidden_mse_weight > 0,
                    output_attentions=cfg.attention_weight > 0)
        dev = out.logits.device  # the CPU, or this rank's GPU under torchrun + nccl
        pos = train.positions(idx)  # the batch's scored positions: its rows, or its words' first pieces
        total = kd_loss(train.scored(out.logits, idx), t_logits[pos].to(dev), labels[pos].to(dev),
                        cfg.temperature, cfg.alpha_kd)
        if need_teacher:
            with torch.no_grad():
                t_out = teacher(**batch, output_hidden_states=cfg.hidden_mse_weight > 0,
                                output_attentions=cfg.attention_weight > 0)
            mask = batch["attention_mask"]
            if cfg.hidden_mse_weight > 0:
                total = total + cfg.hidden_mse_weight * hidden_mse(out.hidden_states, t_out.hidden_states,
                                                                   layer_map, mask)
            if cfg.attention_weight > 0:
                total = total + cfg.attention_weight * attention_mse(out.attentions, t_out.attentions,
                                                                     layer_map, mask)
        return total
    return loss


# --- the distill verb ----------------------------------------------------------------------

@dataclass(frozen=True)
class DistillConfig:
    # Teacher layers copied into the student, in order (DistilBERT-style init). Half of a
    # 6-layer teacher: [0, 2, 5]; of bert-base: [0, 2, 4, 7, 9, 11].
    student_layers: list[int] = field(default_factory=lambda: [0, 2, 5])
    intermediate_size: int | None = None  # None keeps the teacher's FFN width
    # Keep the word-embedding table (30522 x hidden, ~2/3 of a 3x384 student's weights)
    # as copied from the teacher: the optimizer then skips most of the parameters, which
    # makes a step faster; student and control get the same treatment.
    freeze_word_embeddings: bool = True
    # Train the label-only control in a second process while the student trains, the
    # threads split between them (needs train.threads >= 2; off under torchrun): the same
    # models as training each alone with its share of the threads. Off by default: the
    # student then trains on 1 thread, a different float path, and SST-2's student sits at
    # select's floor (AMX Xeon: 98.04% of the teacher on validation on 1 thread, 98.69% on
    # 2), so the schedule would flip the pick for 16% of distill's wall time there.
    control_alongside: bool = False
    loss: DistillLossConfig = field(default_factory=DistillLossConfig)
    train: DistillTrainConfig = field(default_factory=DistillTrainConfig)

    def __post_init__(self):
        check(len(self.student_layers) >= 1, "student_layers must name at least one teacher layer")
        check(len(set(self.student_layers)) == len(self.student_layers),
              f"student_layers repeat a layer: {self.student_layers}")
        check(list(self.student_layers) == sorted(self.student_layers),
              f"student_layers must be increasing, got {self.student_layers}")
        check(self.intermediate_size is None or self.intermediate_size >= 1,
              f"intermediate_size must be >= 1 or null, got {self.intermediate_size}")


def distill(cfg: DistillConfig, teacher_dir: Path, cache_dir: Path, prepared: Prepared, out_dir: Path,
            curves_dir: Path, control_dir: Path, control_curves_dir: Path, eval_max_length: int = 128,
            train_control: bool = True) -> dict:
    """Build the student from the teacher, distil it, save it; also train the label-only
    control from the same initialisation with the same budget (unless `train_control` is
    false: ablations), alongside the student when `cfg.control_alongside` allows (see
    `schedule`). Returns a summary."""
    teacher, tokenizer = load_saved(teacher_dir)
    if len(cfg.student_layers) > teacher.config.num_hidden_layers or \
            max(cfg.student_layers) >= teacher.config.num_hidden_layers:
        raise UserError(f"distill.student_layers {cfg.student_layers} do not fit a "
                        f"{teacher.config.num_hidden_layers}-layer teacher")
    rows, logits, meta = load_transfer(cache_dir, prepared)
    transfer = encode(tokenizer, rows, meta["max_length"])
    check_positions(transfer, logits, cache_dir)
    gold_rows = prepared.card["splits"]["train"]["rows"]  # the transfer set starts with them
    val = encode(tokenizer, prepared.validation(), eval_max_length)  # the curves and final figures; never dev
    task = prepared.task
    student_train, control_threads = schedule(cfg, train_control)
    summary = {"config": asdict(cfg), "eval_split": "validation", "teacher_layers": teacher.config.num_hidden_layers,
               "student_layers": cfg.student_layers, "transfer_rows": len(transfer),
               "gold_rows": gold_rows, "teacher_cache": meta,
               "intermediate_terms": "teacher run alongside the student (on the fly)"
               if cfg.loss.hidden_mse_weight > 0 or cfg.loss.attention_weight > 0 else "off"}
    if train_control:
        summary["control_schedule"] = (
            f"alongside the student: two processes, {student_train.threads} + {control_threads} threads"
            if control_threads else f"after the student, {cfg.train.threads} threads")
    if cfg.loss.attention_weight > 0:
        # attention probabilities are only returned by the eager implementation
        teacher.config._attn_implementation = "eager"
    # Same budget: as many optimizer steps as the student takes (epochs over an augmented
    # transfer set are more steps than epochs over the train split).
    control_train = cfg.train if len(rows) == gold_rows else \
        replace(cfg.train, epochs=None, max_steps=planned_steps(cfg.train, len(transfer)))
    if control_threads:
        control_train = replace(control_train, threads=control_threads)
    control_args = (cfg, control_train, control_dir, control_curves_dir, eval_max_length)
    job = Alongside(_control_from_files, (teacher_dir, cache_dir, prepared.root, *control_args),
                    threads=control_threads, name="control (labels only)") if control_threads else nullcontext()
    with job:
        student = build_student(cfg, teacher)
        loss = distill_loss_fn(transfer, logits, cfg.loss, teacher=teacher, layer_map=cfg.student_layers)
        with distributed.output_dir(curves_dir) as tmp:  # rank 0 writes; the others only train
            summary["student"] = finetune(student, transfer, val, student_train, task, tmp,
                                          desc="distill", loss_fn=loss)
            save_trained(student, tokenizer, out_dir, task)
        if control_threads:
            summary["control"] = job.result()
    if train_control and not control_threads:
        # the control learns from the gold labels only: the train split, never augmented rows
        train = transfer if len(rows) == gold_rows else encode(tokenizer, rows[:gold_rows], meta["max_length"])
        summary["control"] = train_control_model(cfg, teacher, tokenizer, train, val, task, *control_args[1:])
    return summary


def schedule(cfg: DistillConfig, train_control: bool) -> tuple[DistillTrainConfig, int]:
    """(the student's training config, the control's threads when it trains alongside, else 0).

    Alongside: with `control_alongside`, a control to train, `train.threads` >= 2 and one
    process (not under torchrun, whose ranks already share the cores), the control trains
    in a second process while the student trains here, the threads split between them
    (compress.core.alongside: ~0.69x the wall time on 2 cores). Each model is then exactly
    what it is when trained alone with its share of the threads."""
    if not (train_control and cfg.control_alongside and cfg.train.threads >= 2 and distributed.world() == 1):
        return cfg.train, 0
    control_threads = cfg.train.threads // 2
    return replace(cfg.train, threads=cfg.train.threads - control_threads), control_threads


def build_student(cfg: DistillConfig, teacher) -> BertForSequenceClassification:
    """The student (or the control: the same initialisation) from the teacher's layers."""
    seed_everything(cfg.train.seed)
    model = make_student(teacher, cfg.student_layers, cfg.intermediate_size)
    if cfg.freeze_word_embeddings:
        model.bert.embeddings.word_embeddings.weight.requires_grad_(False)
    return model


def train_control_model(cfg: DistillConfig, teacher, tokenizer, train: Encoded, val: Encoded, task,
                        control_train: DistillTrainConfig, control_dir: Path, control_curves_dir: Path,
                        eval_max_length: int, bar_position: int = 0) -> dict:
    """Train and save the label-only control on `train` (the gold rows); its summary."""
    control = build_student(cfg, teacher)
    with distributed.output_dir(control_curves_dir) as tmp:
        summary = finetune(control, train, val, control_train, task, tmp,
                           desc="control (labels only)", bar_position=bar_position)
        save_trained(control, tokenizer, control_dir, task)
    return summary


def _control_from_files(teacher_dir: Path, cache_dir: Path, prepared_root: Path, cfg: DistillConfig,
                        control_train: DistillTrainConfig, control_dir: Path, control_curves_dir: Path,
                        eval_max_length: int) -> dict:
    """The control in its own process (compress.core.alongside): the same inputs as
    `distill` reads, loaded from the same files."""
    teacher, tokenizer = load_saved(teacher_dir)
    if cfg.loss.attention_weight > 0:
        teacher.config._attn_implementation = "eager"  # as the student's teacher: the copy inherits it
    prepared = Prepared.open(prepared_root)
    rows, _, meta = load_transfer(cache_dir, prepared)
    train = encode(tokenizer, rows[:prepared.card["splits"]["train"]["rows"]], meta["max_length"])
    val = encode(tokenizer, prepared.validation(), eval_max_length)
    return train_control_model(cfg, teacher, tokenizer, train, val, prepared.task, control_train, control_dir,
                               control_curves_dir, eval_max_length, bar_position=1 if sys.stderr.isatty() else 0)
