"""The validation split's figures of a record: what `select` chooses on.

The prepare stage holds out a validation split (at most 2,000 rows, never trained on)
beside dev. Every measured record scores it through the same runner and pre-processing
as dev, so the choice among artifacts is made on validation and the dev figures stay an
unbiased report of the chosen one (a choice made on dev would flatter its dev figures).

In:  a prepared data directory, a tokenizer and a way to get logits of encoded rows.
Out: the Record fields `validation_metrics` (every task metric and its 95% bootstrap
     interval, keyed as on a record: `accuracy`, `accuracy_ci95_low` ...),
     `validation_rows` and `validation_sha256`; all None when the prepared directory has
     no validation split (data prepared before it existed): never an error.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from compress.data.prepare import Prepared
from compress.data.tokens import encode
from compress.measure.metrics import task_ci95, task_metrics

NONE = {"validation_metrics": None, "validation_rows": None, "validation_sha256": None}


def validation_examples(prepared: Prepared, max_rows: int | None = None) -> list | None:
    """The validation rows (the first `max_rows` when set, as eval_max_rows caps dev), or
    None when the directory has no validation split."""
    if not prepared.has_validation():
        return None
    rows = prepared.split("validation")
    return rows[:max_rows] if max_rows else rows


def figures(task, enc, logits: np.ndarray) -> dict[str, float]:
    """Every metric the task reports from the logits of `enc`'s scored positions, with
    its 95% bootstrap interval (`<metric>_ci95_low/_high`), in one mapping."""
    intervals = task_ci95(task, enc, logits.argmax(axis=-1)) if len(enc) else {}
    return {**task_metrics(task, enc, logits), **intervals}


def validation_fields(prepared: Prepared, tokenizer, max_length: int, max_rows: int | None,
                      logits_of: Callable) -> dict:
    """The Record's validation fields: `logits_of(enc)` scores the encoded validation rows
    (the runner's eval pass, or a constant for the baseline); NONE without the split."""
    rows = validation_examples(prepared, max_rows)
    if rows is None:
        return dict(NONE)
    enc = encode(tokenizer, rows, max_length)
    return {"validation_metrics": figures(prepared.task, enc, logits_of(enc)), "validation_rows": len(enc),
            "validation_sha256": prepared.sha256("validation")}
