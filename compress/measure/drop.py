"""How much a quantized model loses of its parent's metric, with a confidence bound.

The accuracy checks of the INT8 routes (ONNX Runtime: compress.backends.onnx_runtime_check;
OpenVINO: compress.backends.openvino_check) score a parent and its quantized child on the
validation split and keep the child only while its relative drop is within a max drop at
95% confidence, not only at the point: a check at the limit lets through about half the
models whose true drop is the limit (on the AMX Xeon an SST-2 INT8 IR lost 0.995% of its
parent on 689 validation rows, passed a 1% point check and lost 1.42% on dev).

In:  per row, the gold and predicted labels at its scored positions (one for a classifier's
     row, the kept words for a tagger's) and the task whose validation metric scores them.
Out: `Scored.metric` and `drop_upper_bound(parent, child)`.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class Scored:
    """One model's predictions over the validation rows: per row its gold and predicted
    labels at the scored positions, the task they belong to, and the task kind's
    validation metric over them."""
    gold: list[list[int]]
    pred: list[list[int]]
    task: object

    @property
    def metric(self) -> float:
        return self.metric_of(range(len(self.gold)))

    def metric_of(self, rows) -> float:
        if self.task is None:
            return 0.0
        return float(self.task.kind_impl.validation_metric([self.gold[i] for i in rows],
                                                           [self.pred[i] for i in rows], self.task.labels))


def scored_from_logits(enc, logits: np.ndarray, task) -> Scored:
    """A Scored from an encoded split (compress.data.tokens) and its position logits
    (positions, labels), as compress.data.tokens.position_logits returns them."""
    pred = logits.argmax(axis=-1)
    return Scored([g.tolist() for g in enc.rows(enc.labels)], [p.tolist() for p in enc.rows(pred)], task)


def relative_drop(parent: float, child: float) -> float:
    return (parent - child) / parent if parent > 0 else 0.0


def drop_upper_bound(parent: Scored, other: Scored, level: float = 0.95,
                     n_resamples: int = 1000, seed: int = 0) -> float:
    """One-sided `level` upper bound of `other`'s relative metric drop from `parent`, by a
    paired percentile bootstrap: the same resampled rows score both models, so rows on which
    the two agree cancel and only their disagreements widen the bound."""
    n = len(parent.gold)
    if n == 0 or parent.pred == other.pred:  # no disagreement: nothing to resample
        return 0.0
    rng = np.random.default_rng(seed)
    drops = []
    for _ in range(n_resamples):
        rows = rng.integers(0, n, n)
        drops.append(relative_drop(parent.metric_of(rows), other.metric_of(rows)))
    return float(np.quantile(drops, level))
