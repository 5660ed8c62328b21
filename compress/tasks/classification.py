"""Kinds `classification` (one text, one of N labels) and `pair_classification` (two
texts, one of N labels): rows of a CSV, TSV or JSON Lines file or a Hub dataset.

Metrics: accuracy and macro-F1 (the mean of every class's F1); a binary pair task
reports the F1 of its second class instead of macro-F1 (GLUE's MRPC F1 of "equivalent").
The class order is the sorted label values (numerically when all are integers) unless
params list the labels.
"""
from __future__ import annotations

from ..errors import DataError
from . import formats
from .base import Example, TaskKind, locate, register


class Classification(TaskKind):
    name = "classification"
    columns = {"text": "text", "label": "label"}

    def metrics(self, num_labels: int) -> tuple[str, ...]:
        return ("accuracy", "macro_f1")

    def _pair_column(self, columns: dict) -> str | None:
        return columns.get("text_pair") if self.pair else None

    def read(self, path, fmt, columns):
        return formats.read_table(path, formats.format_of(path, fmt, tagging=False), columns["text"],
                                  self._pair_column(columns), columns["label"])

    def read_hub(self, dataset_id, split, revision, columns):
        return formats.read_hub_table(dataset_id, split, revision, columns["text"], self._pair_column(columns),
                                      columns["label"])

    def label_values(self, raw):
        return (raw.label,)

    def example(self, raw, label_id, where):
        if raw.label not in label_id:
            raise DataError(f"{locate(where, raw.line)}: label {raw.label!r} is not one of the task's labels "
                            f"{sorted(label_id)} (read from the training split, or prepare.labels)")
        return Example(raw.text, raw.text_pair, label_id[raw.label])

    def default_labels(self, seen):
        seen = sorted(set(seen))
        try:
            return sorted(seen, key=int)
        except ValueError:
            return seen

    def stratum(self, example, labels):
        return labels[example.label]


class PairClassification(Classification):
    name = "pair_classification"
    pair = True
    columns = {"text": "text", "text_pair": "text_pair", "label": "label"}

    def metrics(self, num_labels: int) -> tuple[str, ...]:
        return ("accuracy", "f1") if num_labels == 2 else ("accuracy", "macro_f1")


register(Classification())
register(PairClassification())
