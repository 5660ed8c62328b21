"""Augment the transfer set: more inputs for the teacher to label (the TinyBERT lesson).

On a small task (a few thousand training rows) a distilled student needs more *inputs*
labelled by the teacher, not more gold labels. `augment(train, cfg)` returns new
rows built only from the training split (never dev rows), deterministic for a seed:

- `swap` (pairs): sentence B, sentence A, for a symmetric pair label (paraphrase), so the
  gold label is kept; the student sees both orders the teacher was never trained to tie together.
- `cross_pair` (pairs): sentence A of one pair with sentence B of another. Almost always
  "not equivalent"; the teacher's soft label says how much.
- `word_drop`, `word_swap`, `word_replace` (pairs and single sentences): one sentence
  perturbed at the word level, dropping words, swapping neighbouring words, or replacing
  words by words of the task's own training vocabulary (sampled by frequency, so
  replacements are common, fluent-enough words of the domain). Each word is touched with
  probability `word_prob`; on pairs one side is perturbed and the other left intact, so
  the pair stays close to the paraphrase decision boundary.

Only `swap` rows keep a gold label; every other new row has label -1 (unknown): the
distillation loss uses its teacher logits and skips the label term. The label-only
control never sees augmented rows.
"""
from __future__ import annotations

import itertools
import random
from collections import Counter
from dataclasses import asdict, dataclass, field

from compress.core.config import check
from compress.data.prepare import Example

PAIR_KINDS = ("swap", "cross_pair")
WORD_KINDS = ("word_drop", "word_swap", "word_replace")
KINDS = PAIR_KINDS + WORD_KINDS
UNLABELLED = -1  # label of a row only the teacher labels


@dataclass(frozen=True)
class AugmentConfig:
    kinds: list[str] = field(default_factory=list)  # empty: the transfer set is the train split
    size: float = 0.0  # new rows per training row, spread evenly over `kinds`
    word_prob: float = 0.15  # per-word probability of a word-level edit
    seed: int = 0

    def __post_init__(self):
        for k in self.kinds:
            check(k in KINDS, f"unknown augmentation kind '{k}': choose from {', '.join(KINDS)}")
        check(len(set(self.kinds)) == len(self.kinds), f"kinds repeat: {self.kinds}")
        check(self.size >= 0, f"size must be >= 0, got {self.size}")
        check(self.size == 0 or self.kinds, "size > 0 needs at least one kind in `kinds`")
        check(0 < self.word_prob < 1, f"word_prob must be in (0, 1), got {self.word_prob}")

    def check_task(self, task) -> None:
        """Refuse kinds the task's kind cannot take (compress.tasks: `augmentations`)."""
        if self.size == 0:
            return
        ok = task.kind_impl.augmentations
        bad = [k for k in self.kinds if k not in ok]
        check(not bad, f"augment.kinds {bad} do not apply to task '{task.name}' ({task.kind}): "
                       + (f"use {', '.join(ok)}" if ok else "it takes no augmentation; set augment.size to 0"))


def _vocabulary(train: list[Example]) -> tuple[list[str], list[int]]:
    """Words of the training split and their cumulative counts, in first-seen order
    (deterministic; cumulative so each draw is a binary search)."""
    counts: Counter = Counter()
    for ex in train:
        counts.update(ex.text_a.split())
        if ex.text_b is not None:
            counts.update(ex.text_b.split())
    words = list(counts)
    return words, list(itertools.accumulate(counts[w] for w in words))


def _perturb(text: str, kind: str, rng: random.Random, p: float, vocab: tuple[list[str], list[int]]) -> str:
    words = text.split()
    if kind == "word_drop":
        kept = [w for w in words if rng.random() >= p]
        out = kept if kept else words[:1]
    elif kind == "word_swap":
        out = list(words)
        i = 0
        while i < len(out) - 1:
            if rng.random() < p:
                out[i], out[i + 1] = out[i + 1], out[i]
                i += 2  # a word moves at most one place
            else:
                i += 1
    elif kind == "word_replace":
        out = [rng.choices(vocab[0], cum_weights=vocab[1])[0] if rng.random() < p else w for w in words]
    else:
        raise ValueError(kind)
    return " ".join(out)


def augment(train: list[Example], cfg: AugmentConfig) -> tuple[list[Example], dict[str, int]]:
    """New transfer rows built from `train` (see the module docstring) and their count per
    kind. round(size * len(train)) rows in all, the same number per kind (the remainder
    goes to the first kinds), in kind order. A perturbation that leaves the text unchanged
    is retried with other rows; none is kept twice by construction of the sampling."""
    total = int(round(cfg.size * len(train)))
    if total == 0 or not cfg.kinds or not train:
        return [], {k: 0 for k in cfg.kinds}
    rng = random.Random(cfg.seed)
    vocab = _vocabulary(train)
    per_kind = [total // len(cfg.kinds) + (1 if i < total % len(cfg.kinds) else 0) for i in range(len(cfg.kinds))]
    out: list[Example] = []
    counts = {}
    for kind, n in zip(cfg.kinds, per_kind):
        made = 0
        attempts = 0
        while made < n and attempts < 20 * n + 100:
            attempts += 1
            ex = train[rng.randrange(len(train))]
            if kind == "swap":
                new = Example(ex.text_b, ex.text_a, ex.label)
            elif kind == "cross_pair":
                other = train[rng.randrange(len(train))]
                if other is ex:
                    continue
                new = Example(ex.text_a, other.text_b, UNLABELLED)
            elif ex.text_b is not None and rng.random() < 0.5:  # a pair: perturb one side
                new = Example(ex.text_a, _perturb(ex.text_b, kind, rng, cfg.word_prob, vocab), UNLABELLED)
            else:
                new = Example(_perturb(ex.text_a, kind, rng, cfg.word_prob, vocab), ex.text_b, UNLABELLED)
            if (new.text_a, new.text_b) == (ex.text_a, ex.text_b):
                continue  # e.g. nothing dropped in a short sentence
            out.append(new)
            made += 1
        counts[kind] = made
    return out, counts


def describe(cfg: AugmentConfig, counts: dict[str, int], train_rows: int) -> dict:
    return {"config": asdict(cfg), "train_rows": train_rows, "augmented_rows": sum(counts.values()),
            "rows_per_kind": counts, "transfer_rows": train_rows + sum(counts.values())}
