"""Kinds `classification` (one text, one of N labels) and `pair_classification` (two
texts, one of N labels): rows of a CSV, TSV or JSON Lines file or a Hub dataset.

Metrics: accuracy and macro-F1 (the mean of every class's F1); a binary pair task
reports the F1 of its second class instead of macro-F1 (GLUE's MRPC F1 of "equivalent").
The class order is the sorted label values (numerically when all are integers) unless
params list the labels.
"""
from __future__ import annotations

from compress.core.errors import DataError, UserError
from compress.tasks import formats
from compress.tasks.base import Example, TaskKind, locate, register


class Classification(TaskKind):
    name = "classification"
    columns = {"text": "text", "label": "label"}
    augmentations = ("word_drop", "word_swap", "word_replace")

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

    def texts(self, example):
        return (example.text_a,) if example.text_b is None else (example.text_a, example.text_b)

    def to_json(self, example, labels):
        return {"text_a": example.text_a, "text_b": example.text_b, "label": example.label}

    def from_json(self, row, label_id):
        return Example(row["text_a"], row["text_b"], int(row["label"]))

    def count(self, counts, example):
        counts[example.label] += 1

    def split_card(self, rows, counts, task):
        n = sum(counts.values())
        names = task.label_names
        return {"rows": n, "label_counts": {names[i]: counts.get(i, 0) for i in range(task.num_labels)},
                "label_fraction": {names[i]: round(counts.get(i, 0) / n, 4) if n else 0.0
                                   for i in range(task.num_labels)}}

    def score(self, task, enc, logits):
        from compress.measure.metrics import classification_metrics

        return classification_metrics(logits, enc.labels, task.metrics)

    def intervals(self, task, enc, pred):
        from compress.measure.metrics import ci95_fields

        return ci95_fields(pred, enc.labels, task.metrics, task.num_labels)

    def validation_metric(self, gold, pred, labels):
        pairs = [(g, p) for gs, ps in zip(gold, pred) for g, p in zip(gs, ps)]
        return sum(g == p for g, p in pairs) / len(pairs) if pairs else 0.0

    def input_example(self, line, where):
        return Example(line, None, -1)

    def predict(self, loaded, examples, batch_size, max_length, progress=None):
        from compress.stream import classify_rows

        return classify_rows(loaded, examples, batch_size, max_length, progress)


class PairClassification(Classification):
    name = "pair_classification"
    pair = True
    columns = {"text": "text", "text_pair": "text_pair", "label": "label"}
    augmentations = ("swap", "cross_pair") + Classification.augmentations

    def metrics(self, num_labels: int) -> tuple[str, ...]:
        return ("accuracy", "f1") if num_labels == 2 else ("accuracy", "macro_f1")

    def input_example(self, line, where):
        parts = line.split("\t")
        if len(parts) != 2:
            raise UserError(f"{where}: this task takes sentence pairs, one `text_a<TAB>text_b` per line; found "
                            f"{len(parts)} field(s)")
        return Example(parts[0], parts[1], -1)


register(Classification())
register(PairClassification())
