"""Kind `token_classification`: words with one BIO tag each, of any entity types, from
CoNLL-style columns (token first, tag last), JSON Lines (`tokens`, `tags` lists) or a
Hub dataset.

Metrics: entity micro-F1 (exact span and type, conlleval; the primary metric), precision,
recall and word tag accuracy, with F1 per entity type beside them (compress.tasks.iob). The tag
order is O, then B-X, I-X per entity type in sorted order, unless params list the tags.
"""
from __future__ import annotations

import numpy as np

from compress.core.errors import DataError
from compress.tasks import iob as ner
from compress.tasks import formats
from compress.tasks.base import Example, TaskKind, locate, register


class TokenClassification(TaskKind):
    name = "token_classification"
    head = "token"
    token_level = True
    primary_metric = "f1"
    columns = {"tokens": "tokens", "tags": "tags"}
    count_unit = "words"
    half_cache = True
    validation_metric_name = "entity_f1"

    def metrics(self, num_labels: int) -> tuple[str, ...]:
        return ("f1", "precision", "recall", "token_accuracy")

    def read(self, path, fmt, columns):
        return formats.read_tagged(path, formats.format_of(path, fmt, tagging=True), columns["tokens"],
                                   columns["tags"])

    def read_hub(self, dataset_id, split, revision, columns):
        return formats.read_hub_tagged(dataset_id, split, revision, columns["tokens"], columns["tags"])

    def label_values(self, raw):
        return raw.tags

    def example(self, raw, label_id, where):
        unknown = [i for i, t in enumerate(raw.tags) if t not in label_id]
        if unknown:
            line = raw.line + unknown[0] if raw.token_lines else raw.line
            raise DataError(f"{locate(where, line)}: tag {raw.tags[unknown[0]]!r} is not one of the task's tags "
                            f"{list(label_id)} (read from the training split, or prepare.labels)")
        return ner.Sentence(tuple(raw.words), tuple(label_id[t] for t in raw.tags))

    def default_labels(self, seen):
        seen = set(seen)
        ner.check_tags(seen, "training split")
        return ner.default_tag_order(t[2:] for t in seen if t != ner.OUTSIDE)

    def check_labels(self, labels, where):
        ner.check_tags(labels, where)
        if ner.OUTSIDE not in labels:
            raise DataError(f"{where}: the tag set {labels} has no '{ner.OUTSIDE}' tag; a tagger needs it for "
                            "words outside every entity (and for words cut by truncation)")
        return {"entity_types": list(ner.entity_types(labels))}

    def stratum(self, example, labels):
        names = [labels[t] for t in example.tags]
        return ",".join(sorted({k for k, *_ in ner.entities(names)}))

    def texts(self, example):
        return (" ".join(example.words),)

    def to_json(self, example, labels):
        return {"words": list(example.words), "tags": [labels[t] for t in example.tags]}

    def from_json(self, row, label_id):
        words, tags = row["words"], row["tags"]
        if len(words) != len(tags) or not words:
            raise ValueError(f"{len(words)} words and {len(tags)} tags")
        return ner.Sentence(tuple(words), tuple(label_id[t] for t in tags))

    def count(self, counts, example):
        counts.update(example.tags)

    def split_card(self, rows, counts, task):
        rows = rows()
        stats = ner.card_counts(rows, task.labels)
        return {"rows": stats["sentences"], "tokens": stats["tokens"], "entities": stats["entities"],
                "tag_counts": {t: counts.get(i, 0) for i, t in enumerate(task.labels)},
                "tag_scheme": ner.tag_scheme([task.labels[t] for t in s.tags] for s in rows)}

    def score(self, task, enc, logits):
        from compress.measure.metrics import entity_metrics_of

        m = entity_metrics_of(enc, np.asarray(logits).argmax(-1), task.labels)
        return {k: round(float(m[k]), 6) for k in task.metrics}

    def intervals(self, task, enc, pred):
        from compress.measure.metrics import entity_f1_ci95

        return entity_f1_ci95(enc, pred, task.labels)

    def details(self, task, enc, pred):
        from compress.measure.metrics import entity_metrics_of

        m = entity_metrics_of(enc, pred, task.labels)
        return {"entities": m["entities"], "f1_per_type": {k: round(v, 6) for k, v in m["f1_per_type"].items()}}

    def validation_metric(self, gold, pred, labels):
        return float(ner.entity_metrics(gold, pred, labels)["f1"])

    def input_example(self, line, where):
        return Example(line, None, -1)  # raw text: the tokenizer's words are tagged

    def predict(self, loaded, examples, batch_size, max_length, progress=None):
        from compress.stream import tag_texts

        # a line of input, or a prepared sentence's words joined by spaces (the dev-stream
        # measurement tags the dev split the way users' text is tagged)
        texts = [" ".join(ex.words) if isinstance(ex, ner.Sentence) else ex.text_a for ex in examples]
        out = tag_texts(loaded, texts, batch_size, max_length)
        if progress is not None:
            progress(len(texts))
        return out


register(TokenClassification())
