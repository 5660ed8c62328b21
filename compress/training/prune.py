"""Structured pruning: attention heads (Michel et al. 2019) and, optionally, FFN neurons.

Head importance is the magnitude of the gradient of the loss with respect to a head mask
(all ones), summed over a data sample, then L2-normalised per layer. Heads are removed
physically with transformers' `prune_heads` (recorded as `pruned_heads` in the config, so
the model saves and reloads with uneven heads per layer), never only masked.

FFN neurons are scored the same way (|activation x gradient|, a first-order Taylor
estimate of the loss change when the neuron is removed) and the same number is kept in
every layer, so `intermediate_size` stays one number in the config.
"""
from __future__ import annotations

import random
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from compress.core.config import check
from compress.data.prepare import Prepared
from compress.training.distill import DistillLossConfig, check_positions, distill_loss_fn, kd_loss, load_transfer, slice_ffn
from compress.core import distributed
from compress.measure.metrics import task_metrics
from compress.training.models import count_parameters, load_saved, save_trained
from compress.core.errors import UserError
from compress.data.tokens import Encoded, collate, encode, length_grouped_batches
from compress.training.train import RecoveryConfig, finetune, predict_logits, seed_everything, to_torch, write_one_evaluation


class PruneSpecError(UserError):
    """A pruning spec that cannot be applied (names the layer and heads)."""


@dataclass(frozen=True)
class PruneConfig:
    head_fraction: float = 0.34  # global fraction of heads to remove (ignored if `heads` given)
    heads: dict[int, list[int]] | None = None  # explicit {layer: [head, ...]} to remove
    allow_empty_layers: bool = False  # a layer may lose all its heads only when this is true
    ffn_keep_fraction: float = 1.0  # 1.0: FFN untouched; 0.5: keep half the neurons per layer
    importance_rows: int = 8192  # training rows used to score heads and neurons
    importance_batch_size: int = 32
    seed: int = 0
    recover: bool = True  # short distillation from the cached teacher logits after pruning (chosen on validation)
    freeze_word_embeddings: bool = True  # as in distill: keep the word-embedding table fixed in recovery
    recovery: RecoveryConfig = field(default_factory=RecoveryConfig)
    loss: DistillLossConfig = field(default_factory=DistillLossConfig)

    def __post_init__(self):
        check(0 <= self.head_fraction < 1, f"head_fraction must be in [0, 1), got {self.head_fraction}")
        check(0 < self.ffn_keep_fraction <= 1, f"ffn_keep_fraction must be in (0, 1], got {self.ffn_keep_fraction}")
        check(self.importance_rows >= 1, f"importance_rows must be >= 1, got {self.importance_rows}")
        check(self.importance_batch_size >= 1, "importance_batch_size must be >= 1")
        check(self.loss.hidden_mse_weight == 0 and self.loss.attention_weight == 0,
              "recovery distils from the cached teacher logits only: loss.hidden_mse_weight and "
              "loss.attention_weight must be 0")


def _sample(enc: Encoded, rows: int, batch_size: int, seed: int) -> list[list[int]]:
    """Batches over a seeded random sample of `rows` rows of enc."""
    idx = list(range(len(enc)))
    random.Random(seed).shuffle(idx)
    keep = idx[:rows]
    lengths = enc.lengths()
    batches = length_grouped_batches([lengths[i] for i in keep], batch_size, random.Random(seed))
    return [[keep[j] for j in b] for b in batches]


def importance_scores(model, enc: Encoded, loss_fn, cfg: PruneConfig, progress=None):
    """Return (head_importance (layers, heads), ffn_importance (layers, intermediate)),
    both raw sums over the sample. `loss_fn(logits, idx)` gives the loss of a batch."""
    model.eval()  # no dropout: the scores should reflect the model, not the noise
    cfg_m = model.config
    head_mask = torch.ones(cfg_m.num_hidden_layers, cfg_m.num_attention_heads, requires_grad=True)
    acts: dict[int, torch.Tensor] = {}
    ffn_imp = torch.zeros(cfg_m.num_hidden_layers, cfg_m.intermediate_size)
    hooks = []
    for i, layer in enumerate(model.bert.encoder.layer):
        def keep(_m, _inp, out, i=i):
            out.retain_grad()
            acts[i] = out  # (batch, seq, intermediate) after the activation
        hooks.append(layer.intermediate.register_forward_hook(keep))
    try:
        for idx in _sample(enc, cfg.importance_rows, cfg.importance_batch_size, cfg.seed):
            batch = to_torch(collate(enc, idx))
            logits = model(**batch, head_mask=head_mask).logits
            loss_fn(logits, idx).backward()
            mask = batch["attention_mask"].unsqueeze(-1).float()
            for i, a in acts.items():
                ffn_imp[i] += (a * a.grad * mask).sum(dim=(0, 1)).abs().detach()
            model.zero_grad(set_to_none=True)
            if progress is not None:
                progress.update(1)
    finally:
        for h in hooks:
            h.remove()
    return head_mask.grad.abs().detach().numpy(), ffn_imp.numpy()


def normalize_per_layer(imp: np.ndarray) -> np.ndarray:
    """Michel et al.: divide each layer's scores by their L2 norm so layers compare."""
    norm = np.linalg.norm(imp, axis=1, keepdims=True)
    return imp / np.where(norm == 0, 1, norm)


def global_head_spec(importance: np.ndarray, fraction: float, allow_empty_layers: bool = False) -> dict[int, list[int]]:
    """The `fraction` least important heads overall, never a layer's last head unless allowed."""
    layers, heads = importance.shape
    n_prune = int(round(fraction * layers * heads))
    left = {l: heads for l in range(layers)}
    spec: dict[int, list[int]] = {}
    for flat in np.argsort(importance, axis=None, kind="stable"):
        if sum(len(v) for v in spec.values()) == n_prune:
            break
        l, h = divmod(int(flat), heads)
        if left[l] == 1 and not allow_empty_layers:
            continue
        spec.setdefault(l, []).append(h)
        left[l] -= 1
    got = sum(len(v) for v in spec.values())
    if got < n_prune:
        raise PruneSpecError(
            f"prune.head_fraction {fraction} asks for {n_prune} of {layers * heads} heads, but only {got} "
            "can go while every layer keeps one; lower it or set prune.allow_empty_layers: true")
    return {l: sorted(v) for l, v in sorted(spec.items())}


def validate_spec(spec: dict[int, list[int]], layers: int, heads: int, allow_empty_layers: bool) -> dict[int, list[int]]:
    clean = {}
    for l, hs in spec.items():
        l = int(l)
        if not 0 <= l < layers:
            raise PruneSpecError(f"prune.heads: layer {l} does not exist (the model has layers 0..{layers - 1})")
        bad = [h for h in hs if not 0 <= int(h) < heads]
        if bad:
            raise PruneSpecError(f"prune.heads: layer {l} has no heads {bad} (heads are 0..{heads - 1})")
        if len(set(hs)) != len(hs):
            raise PruneSpecError(f"prune.heads: layer {l} lists a head twice: {hs}")
        if len(hs) == heads and not allow_empty_layers:
            raise PruneSpecError(
                f"prune.heads: layer {l} would lose all {heads} heads; keep at least one or set "
                "prune.allow_empty_layers: true to remove the layer's attention entirely")
        if hs:
            clean[l] = sorted(int(h) for h in hs)
    return clean


def prune_heads(model, spec: dict[int, list[int]]) -> None:
    """Physically remove heads {layer: [heads]} (transformers records them in
    config.pruned_heads, which from_pretrained replays on load)."""
    model.prune_heads(spec)


def prune_ffn(model, ffn_importance: np.ndarray, keep_fraction: float) -> int:
    """Keep the same number of most important FFN neurons in every layer; returns it."""
    inter = model.config.intermediate_size
    k = max(1, int(round(keep_fraction * inter)))
    if k >= inter:
        return inter
    for i, layer in enumerate(model.bert.encoder.layer):
        slice_ffn(layer, torch.from_numpy(ffn_importance[i]).topk(k).indices)
    model.config.intermediate_size = k
    return k


def heads_per_layer(model) -> list[int]:
    return [layer.attention.self.num_attention_heads for layer in model.bert.encoder.layer]


# --- the prune verb ----------------------------------------------------------------------

def head_heatmap(importance: np.ndarray, spec: dict[int, list[int]], path) -> None:
    """Layer x head importance as an image, pruned heads crossed out."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    layers, heads = importance.shape
    fig, ax = plt.subplots(figsize=(0.55 * heads + 2, 0.5 * layers + 1.5))
    im = ax.imshow(importance, cmap="viridis", aspect="auto")
    for l, hs in spec.items():
        for h in hs:
            ax.text(h, l, "×", ha="center", va="center", color="white", fontsize=14, fontweight="bold")
    ax.set_xticks(range(heads))
    ax.set_yticks(range(layers))
    ax.set_xlabel("head")
    ax.set_ylabel("layer")
    n = sum(len(v) for v in spec.values())
    ax.set_title(f"Head importance (normalised per layer); × = pruned ({n}/{layers * heads})")
    fig.colorbar(im, ax=ax, shrink=0.8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_importance_csv(importance: np.ndarray, spec: dict[int, list[int]], path) -> None:
    """One row per head, for `dvc plots` (x: head, y: importance, one series per layer)."""
    lines = ["layer,head,importance,pruned"]
    for l in range(importance.shape[0]):
        for h in range(importance.shape[1]):
            lines.append(f"{l},{h},{importance[l, h]:.6f},{int(h in spec.get(l, []))}")
    Path(path).write_text("\n".join(lines) + "\n", encoding="utf-8")


def prune_student(cfg: PruneConfig, student_dir: Path, cache_dir: Path, prepared: Prepared, out_dir: Path,
                  plots_dir: Path, eval_max_length: int = 128) -> dict:
    """Score, prune heads (and optionally FFN neurons), recover by distillation, save."""
    model, tokenizer = load_saved(student_dir)
    rows, cached, meta = load_transfer(cache_dir, prepared)  # the train split + any augmented rows
    train = encode(tokenizer, rows, meta["max_length"])
    check_positions(train, cached, cache_dir)
    # before/after figures and the recovery's curves: the validation split (dev only reports)
    val = encode(tokenizer, prepared.validation(), eval_max_length)
    task = prepared.task
    labels, t_logits = torch.from_numpy(train.labels), torch.from_numpy(cached)
    layers, heads = model.config.num_hidden_layers, model.config.num_attention_heads

    def score_loss(logits, idx):  # over the batch's scored positions (a row, or each word's first piece)
        pos = train.positions(idx)
        return kd_loss(train.scored(logits, idx), t_logits[pos].float(), labels[pos], cfg.loss.temperature,
                       cfg.loss.alpha_kd)

    def val_metrics():
        return task_metrics(task, val, predict_logits(model, val))

    summary = {"config": asdict(cfg), "eval_split": "validation",
               "before": {"validation": val_metrics(), "params": count_parameters(model),
                          "heads_per_layer": heads_per_layer(model),
                          "intermediate_size": model.config.intermediate_size}}
    seed_everything(cfg.seed)
    n_batches = -(-min(cfg.importance_rows, len(train)) // cfg.importance_batch_size)
    with tqdm(total=n_batches, desc="importance", unit="batch") as bar:
        head_imp, ffn_imp = importance_scores(model, train, score_loss, cfg, bar)
    norm = normalize_per_layer(head_imp)
    if cfg.heads is not None:
        spec = validate_spec(cfg.heads, layers, heads, cfg.allow_empty_layers)
    else:
        spec = global_head_spec(norm, cfg.head_fraction, cfg.allow_empty_layers)
    prune_heads(model, spec)
    inter = prune_ffn(model, ffn_imp, cfg.ffn_keep_fraction)
    summary["pruned"] = {"heads": {str(l): v for l, v in spec.items()},
                         "heads_removed": sum(len(v) for v in spec.values()), "heads_total": layers * heads,
                         "heads_per_layer": heads_per_layer(model), "intermediate_size": inter,
                         "params": count_parameters(model), "validation_before_recovery": val_metrics()}
    with distributed.output_dir(plots_dir) as tmp:  # rank 0 writes; under torchrun the others only recover
        if cfg.recover:
            if cfg.freeze_word_embeddings:
                model.bert.embeddings.word_embeddings.weight.requires_grad_(False)
            loss = distill_loss_fn(train, cached, cfg.loss)
            summary["recovery"] = finetune(model, train, val, cfg.recovery, task, tmp,
                                           desc="recovery", loss_fn=loss)
        else:
            final = val_metrics()
            summary["recovery"] = {"skipped": "prune.recover is false", "final_validation": final}
            write_one_evaluation(tmp, final)
        head_heatmap(norm, spec, tmp / "head_importance.png")
        write_importance_csv(norm, spec, tmp / "head_importance.csv")
        save_trained(model, tokenizer, out_dir, task)
    summary["after"] = {"validation": val_metrics()}
    return summary
