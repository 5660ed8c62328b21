"""Turn examples into model inputs. Training, evaluation and latency measurement all go
through these functions, so every number is produced with the same pre-processing.

Scored positions: what a model is scored on. A sentence classifier has one per row (its
logits row); a tagger one per kept word, its first subword piece (compress.tasks.iob.align).
Logits, gold labels, teacher caches and the distillation loss are all kept per scored
position, in row order, so training, the teacher cache, distillation and evaluation code
is the same for both kinds of task: `scored` takes a batch's positions out of a model's
output, `Encoded.positions` says where they go.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field

import numpy as np

from compress.data.prepare import Example
from compress.tasks.iob import IGNORE, Sentence, align


@dataclass
class Encoded:
    """Unpadded token ids of a row-scored split (one scored position per row, its logits
    row); row i is example i."""
    input_ids: list[list[int]]
    token_type_ids: list[list[int]]
    labels: np.ndarray  # (positions,) int64: the gold label of every scored position, row order
    pad_id: int
    offsets: np.ndarray = field(init=False, repr=False)  # (rows + 1,) row i: offsets[i]:offsets[i+1]

    def __post_init__(self):
        self.offsets = np.arange(len(self.input_ids) + 1)

    def __len__(self) -> int:
        return len(self.input_ids)

    def lengths(self) -> list[int]:
        return [len(x) for x in self.input_ids]

    def positions(self, idx) -> np.ndarray:
        """Indices of rows `idx`'s scored positions, in the order `scored` returns them."""
        return np.asarray(idx, dtype=np.int64)

    def batch_labels(self, idx, seq: int | None = None) -> np.ndarray:
        """Gold labels of rows `idx`, (batch,)."""
        return self.labels[np.asarray(idx, dtype=np.int64)]

    def scored(self, logits, idx):
        """The scored positions of rows `idx`'s model output (numpy or torch), in the order
        positions(idx) gives: (batch, labels) as it is."""
        return logits

    def rows(self, values: np.ndarray) -> list[np.ndarray]:
        """Per-position values (positions, ...) split back into rows."""
        return [values[self.offsets[i]:self.offsets[i + 1]] for i in range(len(self))]


@dataclass
class TaggedEncoded(Encoded):
    """A tagged split: one scored position per kept word (its first piece)."""
    # per piece, the word's tag on its first piece and IGNORE elsewhere, and the gold tags
    # of every word (kept or cut by truncation, which the metric counts)
    piece_labels: list[list[int]] = field(default_factory=list)
    word_tags: list[tuple[int, ...]] = field(default_factory=list)

    def __post_init__(self):
        counts = [sum(x != IGNORE for x in row) for row in self.piece_labels]
        self.offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)

    def positions(self, idx) -> np.ndarray:
        parts = [np.arange(self.offsets[i], self.offsets[i + 1]) for i in idx]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)

    def batch_labels(self, idx, seq: int | None = None) -> np.ndarray:
        """(batch, seq) per piece: the gold tag on scored pieces, IGNORE on the others and on
        padding."""
        seq = seq or max(len(self.input_ids[i]) for i in idx)
        out = np.full((len(idx), seq), IGNORE, dtype=np.int64)
        for j, i in enumerate(idx):
            n = min(len(self.piece_labels[i]), seq)
            out[j, :n] = self.piece_labels[i][:n]
        return out

    def scored(self, logits, idx):
        """(batch, seq, tags) at the pieces whose label is not IGNORE -> (positions, tags)."""
        keep = self.batch_labels(idx, logits.shape[1]) != IGNORE
        if not isinstance(logits, np.ndarray):
            import torch

            keep = torch.from_numpy(keep).to(logits.device)
        return logits[keep]


def encode_sentences(tokenizer, sentences: list[Sentence], max_length: int) -> TaggedEncoded:
    """Tag each word's first piece; truncation drops whole words (compress.tasks.iob.align)."""
    max_length = min(max_length, tokenizer.model_max_length)
    aligned = [align(tokenizer, s, max_length) for s in sentences]
    piece_labels = [a.labels for a in aligned]
    flat = [x for row in piece_labels for x in row if x != IGNORE]
    return TaggedEncoded(input_ids=[a.input_ids for a in aligned],
                         token_type_ids=[[0] * len(a.input_ids) for a in aligned],
                         labels=np.asarray(flat, dtype=np.int64),
                         pad_id=tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0,
                         piece_labels=piece_labels, word_tags=[s.tags for s in sentences])


def encode_rows(tokenizer, examples: list[Example], max_length: int) -> Encoded:
    """Tokenize single sentences or pairs; longer inputs are truncated to max_length
    (pairs: the longer side first), never rejected."""
    max_length = min(max_length, tokenizer.model_max_length)
    a = [ex.text_a for ex in examples]
    pair = examples and examples[0].text_b is not None
    b = [ex.text_b for ex in examples] if pair else None
    out = tokenizer(a, b, truncation="longest_first" if pair else True, max_length=max_length,
                    return_token_type_ids=True, return_attention_mask=False)
    return Encoded(
        input_ids=out["input_ids"],
        token_type_ids=out["token_type_ids"],
        labels=np.asarray([ex.label for ex in examples], dtype=np.int64),
        pad_id=tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0,
    )


# The encoder of each example type the task kinds produce (compress.tasks).
ENCODERS = {Example: encode_rows, Sentence: encode_sentences}


def encode(tokenizer, examples: list[Example] | list[Sentence], max_length: int) -> Encoded:
    """Model inputs of a split's examples, by their type (ENCODERS): rows of text (or text
    pairs) -> Encoded, tagged sentences -> TaggedEncoded. An empty list encodes as rows."""
    return ENCODERS[type(examples[0]) if examples else Example](tokenizer, examples, max_length)


def collate(enc: Encoded, idx: list[int] | np.ndarray, pad_to: int | None = None) -> dict[str, np.ndarray]:
    """Pad rows `idx` to their longest length (or to `pad_to`) -> int64 arrays (batch, seq)."""
    rows = [enc.input_ids[i] for i in idx]
    seq = pad_to or max(len(r) for r in rows)
    ids = np.full((len(rows), seq), enc.pad_id, dtype=np.int64)
    types = np.zeros((len(rows), seq), dtype=np.int64)
    mask = np.zeros((len(rows), seq), dtype=np.int64)
    for j, i in enumerate(idx):
        n = min(len(enc.input_ids[i]), seq)
        ids[j, :n] = enc.input_ids[i][:n]
        types[j, :n] = enc.token_type_ids[i][:n]
        mask[j, :n] = 1
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}


def unpad(logits, rows: int, seq: int):
    """A model output for a batch padded to a fixed shape, cut back to the batch's `rows`
    and, on an output with a sequence axis ((batch, seq, labels)), its `seq` positions
    ((batch, labels) has none)."""
    return logits[(slice(rows), slice(seq))[: logits.ndim - 1]]


def position_logits(enc: Encoded, batches, run, num_labels: int) -> np.ndarray:
    """fp32 logits (positions, labels) of every scored position, in row order: `run` takes a
    collated batch (compress.data.tokens.collate) and returns its logits, (batch, labels) or
    (batch, seq, labels). Positions of rows in no batch stay 0 (another rank's share)."""
    out = np.zeros((len(enc.labels), num_labels), dtype=np.float32)
    for idx in batches:
        out[enc.positions(idx)] = enc.scored(run(collate(enc, idx)), idx)
    return out


def length_grouped_batches(lengths: list[int], batch_size: int, rng: random.Random,
                           group_batches: int = 50) -> list[list[int]]:
    """Shuffled batches of similar-length rows.

    Rows are shuffled, cut into groups of `group_batches` batches, sorted by length inside
    each group, then the batches are shuffled: padding per batch drops to near zero while
    the order stays random at the batch level.
    """
    idx = list(range(len(lengths)))
    rng.shuffle(idx)
    batches = []
    span = batch_size * group_batches
    for start in range(0, len(idx), span):
        group = sorted(idx[start:start + span], key=lambda i: lengths[i])
        batches += [group[k:k + batch_size] for k in range(0, len(group), batch_size)]
    rng.shuffle(batches)
    return batches


def eval_batches(lengths: list[int], batch_size: int) -> list[list[int]]:
    """Deterministic batches for evaluation: sorted by length to minimise padding."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    return [order[k:k + batch_size] for k in range(0, len(order), batch_size)]
