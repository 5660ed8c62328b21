"""Task metrics from logits: accuracy and macro-F1 of N classes, F1 of the second class
(binary pair tasks), entity F1 for taggers; and their 95% bootstrap confidence intervals.

Dev splits are often small (hundreds of rows), so a metric alone overstates how well two
artifacts are told apart: on 872 rows a 90% accuracy is +-2 points at 95%.
`bootstrap_ci` gives a percentile bootstrap interval: the dev rows are resampled with
replacement (as many as there are) `n_resamples` times, the metric is computed on each
resample, and the interval is the (1 - level)/2 and (1 + level)/2 percentiles of those
values. The seed is fixed, so one set of predictions always gives the same interval; the
Monte Carlo error of the end points at the default 2,000 resamples is about 0.06 of the
interval's standard deviation (~0.1 point on 872 rows).

What the interval covers: which dev rows happened to be drawn, for this one trained
model. What it does not: training-seed variance (another seed gives another model with
its own interval), the shift from the dev split to real traffic, or the correlation
between two artifacts scored on the same rows (intervals that overlap do not prove two
artifacts equal; a paired comparison would be tighter).
"""
from __future__ import annotations

import numpy as np

METRICS = ("accuracy", "f1", "macro_f1")
BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 0
_CHUNK_INDICES = 2**22  # resampled row indices held at once (32 MiB of int64), whatever the split size


def _f1(tp, fp, fn):
    """F1 of class 1; 0 when there is no true positive (as sklearn's zero_division=0)."""
    tp, fp, fn = (np.asarray(x, dtype=np.float64) for x in (tp, fp, fn))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(tp > 0, 2 * tp / (2 * tp + fp + fn), 0.0)


def _class_counts(pred, labels, num_classes: int) -> np.ndarray:
    """(classes, 3) true positives, false positives, false negatives of each class."""
    pred, labels = np.asarray(pred), np.asarray(labels)
    c = np.arange(num_classes)[:, None]
    hit = pred == labels
    return np.stack([((pred == c) & hit).sum(1), ((pred == c) & ~hit).sum(1), ((labels == c) & ~hit).sum(1)], 1)


def _macro_f1(counts: np.ndarray) -> np.ndarray:
    """Mean F1 over the classes present in gold or predictions, per leading index:
    counts (..., classes, 3) -> (...). A class neither in gold nor predicted is left out
    (its F1 is undefined), as a class of a resample that drew none of its rows."""
    tp, fp, fn = counts[..., 0], counts[..., 1], counts[..., 2]
    present = (tp + fp + fn) > 0
    f1 = _f1(tp, fp, fn)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(present.any(-1), (f1 * present).sum(-1) / present.sum(-1), 0.0)


def classification_metrics(logits: np.ndarray, labels: np.ndarray, names: tuple[str, ...]) -> dict[str, float]:
    pred = np.asarray(logits).argmax(-1)
    labels = np.asarray(labels)
    out = {}
    for name in names:
        if name == "accuracy":
            out["accuracy"] = float((pred == labels).mean()) if len(labels) else float("nan")
        elif name == "f1":
            tp = int(((pred == 1) & (labels == 1)).sum())
            fp = int(((pred == 1) & (labels == 0)).sum())
            fn = int(((pred == 0) & (labels == 1)).sum())
            out["f1"] = float(_f1(tp, fp, fn))
        elif name == "macro_f1":
            out["macro_f1"] = float(_macro_f1(_class_counts(pred, labels, logits.shape[-1])[None])[0])
        else:
            raise ValueError(f"unknown metric '{name}'")
    return {k: round(v, 6) for k, v in out.items()}


def bootstrap_ci(pred, labels, metric: str, n_resamples: int = BOOTSTRAP_RESAMPLES, seed: int = BOOTSTRAP_SEED,
                 level: float = 0.95, num_classes: int | None = None) -> tuple[float, float]:
    """(low, high) percentile bootstrap interval of `metric` ("accuracy" or "f1", as
    classification_metrics defines them) for predicted classes `pred` against `labels`.
    Deterministic for a seed: resample b is `rng.integers(0, n, n)`, the b-th draw of
    `np.random.default_rng(seed)`."""
    pred, labels = np.asarray(pred), np.asarray(labels)
    if metric not in METRICS:
        raise ValueError(f"unknown metric '{metric}': choose from {', '.join(METRICS)}")
    if pred.shape != labels.shape or pred.ndim != 1:
        raise ValueError(f"pred and labels must be 1-D of one length, got {pred.shape} and {labels.shape}")
    if len(pred) == 0:
        raise ValueError("no rows to resample")
    if n_resamples < 1 or not 0 < level < 1:
        raise ValueError(f"need n_resamples >= 1 and 0 < level < 1, got {n_resamples}, {level}")
    # Per row, what it adds to each count; a resample's counts are then sums over its rows.
    if metric == "accuracy":
        per_row = (pred == labels)[:, None]
    elif metric == "macro_f1":  # per row and class: tp, fp, fn (classes x 3 columns)
        k = num_classes or int(max(pred.max(), labels.max())) + 1
        c = np.arange(k)
        hit = (pred == labels)[:, None]
        per_row = np.concatenate([(pred[:, None] == c) & hit, (pred[:, None] == c) & ~hit,
                                  (labels[:, None] == c) & ~hit], axis=1)
    else:
        per_row = np.stack([(pred == 1) & (labels == 1), (pred == 1) & (labels == 0),
                            (pred == 0) & (labels == 1)], axis=1)
    per_row = per_row.astype(np.int64)
    n = len(pred)
    rng = np.random.default_rng(seed)
    counts = []
    rows_per_chunk = max(1, _CHUNK_INDICES // n)
    for start in range(0, n_resamples, rows_per_chunk):  # chunks draw the same stream as one call would
        idx = rng.integers(0, n, size=(min(rows_per_chunk, n_resamples - start), n))
        counts.append(np.stack([per_row[:, k][idx].sum(axis=1) for k in range(per_row.shape[1])], axis=1))
    c = np.concatenate(counts)
    if metric == "accuracy":
        values = c[:, 0] / n
    elif metric == "macro_f1":
        k = c.shape[1] // 3
        values = _macro_f1(np.stack([c[:, :k], c[:, k:2 * k], c[:, 2 * k:]], axis=-1))
    else:
        values = _f1(c[:, 0], c[:, 1], c[:, 2])
    low, high = np.percentile(values, [50 * (1 - level), 50 * (1 + level)])
    return float(low), float(high)


def ci95_fields(pred, labels, names: tuple[str, ...], num_classes: int | None = None) -> dict[str, float]:
    """{"<metric>_ci95_low": .., "<metric>_ci95_high": ..} for every metric in `names`
    (the report Record's fields), at the fixed seed and resample count of this module."""
    out = {}
    for name in names:
        low, high = bootstrap_ci(pred, labels, name, num_classes=num_classes)
        out[f"{name}_ci95_low"], out[f"{name}_ci95_high"] = round(low, 6), round(high, 6)
    return out


# --- any task: metrics from the logits of every scored position (compress.data.tokens) -----------

def task_metrics(task, enc, logits: np.ndarray) -> dict[str, float]:
    """The task's scalar dev metrics (task.metrics) from `logits` (positions, labels) of
    every scored position of `enc` in row order; the task's kind computes them
    (compress.tasks: accuracy and F1 of rows for a classifier, entity F1 for a tagger)."""
    return task.kind_impl.score(task, enc, logits)


def task_ci95(task, enc, pred: np.ndarray) -> dict[str, float]:
    """95% bootstrap intervals of the task's primary metrics from the predicted label of
    every scored position (the task's kind says how rows are resampled)."""
    return task.kind_impl.intervals(task, enc, np.asarray(pred))


def entity_metrics_of(enc, pred: np.ndarray, tag_names) -> dict:
    """compress.tasks.iob.entity_metrics of predicted tags per scored position (each kept word's
    first piece; ids into `tag_names`); words cut by truncation count as predicted O."""
    from compress.tasks.iob import entity_metrics

    return entity_metrics(enc.word_tags, [r.tolist() for r in enc.rows(np.asarray(pred))], tag_names)


def entity_f1_ci95(enc, pred: np.ndarray, tag_names) -> dict[str, float]:
    """95% bootstrap interval of entity F1 over resampled sentences (entities of one
    sentence are not independent draws), from per-sentence counts of true positives, gold
    and predicted entities, the same way bootstrap_ci does rows."""
    from compress.tasks.iob import entity_counts

    per_row = np.zeros((len(enc), 3), dtype=np.int64)  # tp, gold, predicted entities
    for i, (gold, p) in enumerate(zip(enc.word_tags, enc.rows(np.asarray(pred)))):
        per_row[i] = entity_counts(gold, p.tolist(), tag_names)  # cut words count as O
    n = len(per_row)
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    values = []
    rows_per_chunk = max(1, _CHUNK_INDICES // n)
    for start in range(0, BOOTSTRAP_RESAMPLES, rows_per_chunk):
        idx = rng.integers(0, n, size=(min(rows_per_chunk, BOOTSTRAP_RESAMPLES - start), n))
        tp, ng, np_ = (per_row[:, k][idx].sum(axis=1) for k in range(3))
        with np.errstate(invalid="ignore", divide="ignore"):
            values.append(np.where(tp > 0, 2 * tp / (ng + np_), 0.0))
    low, high = np.percentile(np.concatenate(values), [2.5, 97.5])
    return {"f1_ci95_low": round(float(low), 6), "f1_ci95_high": round(float(high), 6)}
