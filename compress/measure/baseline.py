"""The majority-class baseline: the dev metrics of always predicting the most frequent
training label (a tagger: the most frequent training tag, `O`, on every word). A yardstick
beside the artifacts, never a candidate: `select` rejects it by name (rule `baseline`).

In:  the prepared data directory and a tokenizer of the task's models (the scored positions
     of a tagger are the first pieces of words, as for every artifact).
Out: one Record dict per target, status ok, with the task's metrics and their intervals on
     dev and, where the data has a validation split, on validation (`validation_metrics`,
     as every measured record), and no latency, size or memory (nothing runs).
"""
from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np

from compress.data.prepare import Prepared
from compress.data.tokens import encode
from compress.measure.metrics import task_ci95, task_metrics
from compress.measure.validation import validation_fields
from compress.report.schema import Record

BASELINE_NAME = "majority_baseline"


def majority_label(prepared: Prepared, tokenizer, max_length: int) -> int:
    """The most frequent label id over the training split's scored positions (rows of a
    classifier, words of a tagger); ties go to the lower id."""
    counts = Counter(encode(tokenizer, prepared.split("train"), max_length).labels.tolist())
    return min(counts, key=lambda label: (-counts[label], label))


def baseline_records(prepared_root: str | Path, tokenizer, targets: list[str], max_length: int = 128) -> list[dict]:
    prepared = Prepared.open(prepared_root)
    task = prepared.task
    label = majority_label(prepared, tokenizer, max_length)
    def constant_logits(enc) -> np.ndarray:  # every scored position predicts the majority label
        logits = np.zeros((len(enc.labels), task.num_labels), dtype=np.float32)
        logits[:, label] = 1.0
        return logits

    enc = encode(tokenizer, prepared.split("dev"), max_length)
    logits = constant_logits(enc)
    pred = logits.argmax(-1)
    validation = validation_fields(prepared, tokenizer, max_length, None, constant_logits)
    metrics = task_metrics(task, enc, logits)
    details = task.kind_impl.details(task, enc, pred)
    reason = f"always predicts '{task.label_names[label]}', the most frequent training label"
    return [Record(
        artifact=BASELINE_NAME, target=target, status="ok", reason=reason, stage="benchmark", backend="constant",
        task=task.name, primary_metric=task.primary_metric, accuracy=metrics.get("accuracy"), f1=metrics.get("f1"),
        macro_f1=metrics.get("macro_f1"), metrics=dict(metrics), token_accuracy=metrics.get("token_accuracy"),
        f1_per_type=details.get("f1_per_type"), eval_rows=len(enc), data_sha256=prepared.sha256("dev"),
        **validation, **task_ci95(task, enc, pred)).to_dict() for target in targets]
