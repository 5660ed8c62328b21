"""Kind `token_classification`: words with one BIO tag each, of any entity types, from
CoNLL-style columns (token first, tag last), JSON Lines (`tokens`, `tags` lists) or a
Hub dataset.

Metrics: entity micro-F1 (exact span and type, conlleval; the primary metric), precision,
recall and word tag accuracy, with F1 per entity type beside them (compress.ner). The tag
order is O, then B-X, I-X per entity type in sorted order, unless params list the tags.
"""
from __future__ import annotations

from ..errors import DataError
from .. import ner
from . import formats
from .base import TaskKind, locate, register


class TokenClassification(TaskKind):
    name = "token_classification"
    head = "token"
    token_level = True
    primary_metric = "f1"
    columns = {"tokens": "tokens", "tags": "tags"}

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


register(TokenClassification())
