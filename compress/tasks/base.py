"""The task-kind interface, the registry of kinds, and `Task`: one dataset's kind and labels.

A kind says what a model predicts and how its data is read and scored; a `Task` is a kind
bound to one dataset's name and label set (read from the training split by `prepare`,
recorded in the data card and in every model's config.json). Code outside this package
asks a Task (or its kind) and never branches on a kind's or a dataset's name.

Contract of a kind (a `TaskKind` subclass registered with `register`):
- `columns`: the `prepare.columns` keys it reads, with their defaults (None: optional);
- `read(path, fmt, columns)`: raw rows of one split file, strings as written, each with
  its line number (compress.tasks.formats);
- `label_values(raw)`: the label strings of a raw row (its tags for a tagger);
- `example(raw, label_id, where)`: the row with label strings turned into class ids;
- `default_labels(seen)`: the class order when params give none;
- `check_labels(labels, where)`: refuse a label set the kind cannot score;
- `to_json(example, labels)` / `from_json(row, label_id)`: a prepared JSON-lines row;
- `count(counts, example)`, `count_unit`, `split_card(rows, counts, task)`: the data card;
- `metrics(num_labels)` and `primary_metric`: what reports carry and rank by;
  `score(task, enc, logits)`, `intervals(task, enc, pred)` and `details(task, enc, pred)`
  compute them from the logits of every scored position (compress.data.tokens);
- `validation_metric(gold, pred, labels)`: the primary metric from per-row gold and
  predicted positions (the INT8 accuracy checks' items);
- `input_example(line, where)`: one line of `compress predict` input;
- `predict(loaded, examples, batch_size, max_length, progress)`: what `compress predict`
  prints (`progress(n)` as n examples are done);
- `augmentations`: the transfer-set augmentation kinds it supports (compress.training.augment);
- `half_cache`: the teacher-logits cache is stored in float16 (one row per word: large);
- `validation_metric_name`: what `validation_metric` computes, as reports name it;
- `head`: the model head (compress.training.models.HEADS), `token_level`, `pair`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Iterator

from compress.core.errors import DataError

KINDS: dict[str, "TaskKind"] = {}


@dataclass(frozen=True)
class Example:
    """One row of a classification task: its text (and second text), and class id."""
    text_a: str
    text_b: str | None
    label: int


class TaskKind:
    name: str = ""
    head: str = "sequence"  # compress.training.models.HEADS key
    token_level: bool = False  # one prediction per word (True) or per row
    pair: bool = False  # two texts per row
    primary_metric: str = "accuracy"
    columns: dict[str, str | None] = {}
    count_unit: str = "rows"  # what a split's label counts count
    augmentations: tuple[str, ...] = ()
    half_cache: bool = False
    validation_metric_name: str = "accuracy"

    def metrics(self, num_labels: int) -> tuple[str, ...]:
        raise NotImplementedError

    def read(self, path, fmt: str | None, columns: dict) -> Iterator:
        raise NotImplementedError

    def read_hub(self, dataset_id: str, split: str, revision: str | None, columns: dict) -> Iterator:
        raise NotImplementedError

    def label_values(self, raw) -> Iterable[str]:
        raise NotImplementedError

    def example(self, raw, label_id: dict[str, int], where: str):
        raise NotImplementedError

    def default_labels(self, seen: Iterable[str]) -> list[str]:
        raise NotImplementedError

    def check_labels(self, labels: list[str], where: str) -> dict:
        """Refuse labels this kind cannot score; returns facts for the data card."""
        return {}

    def stratum(self, example, labels: tuple[str, ...]) -> str:
        """The group a row is stratified by when a dev split is carved from train."""
        raise NotImplementedError

    def texts(self, example) -> tuple[str, ...]:
        """The text(s) a row holds, as a reader sees them: what prepare compares when it keeps
        validation texts out of the training rows (compress.data.overlap)."""
        raise NotImplementedError

    def to_json(self, example, labels: tuple[str, ...]) -> dict:
        raise NotImplementedError

    def from_json(self, row: dict, label_id: dict[str, int]):
        """A prepared row back; KeyError/TypeError/ValueError on a malformed one."""
        raise NotImplementedError

    def count(self, counts, example) -> None:
        """Add one example to a split's label counts (class id -> count_unit)."""
        raise NotImplementedError

    def split_card(self, rows, counts, task: "Task") -> dict:
        """The data card's facts about one prepared split (its sha256 is added by prepare);
        `rows()` reads the split back, for a kind whose facts need more than `counts`."""
        raise NotImplementedError

    def score(self, task: "Task", enc, logits) -> dict[str, float]:
        """task.metrics from `logits` (positions, labels) of every scored position of `enc`."""
        raise NotImplementedError

    def intervals(self, task: "Task", enc, pred) -> dict[str, float]:
        """95% bootstrap intervals (`<metric>_ci95_low|high`) of the primary metrics."""
        raise NotImplementedError

    def details(self, task: "Task", enc, pred) -> dict:
        """Facts a report shows beside the metrics (e.g. F1 per entity type); {} if none."""
        return {}

    def validation_metric(self, gold: list[list[int]], pred: list[list[int]], labels: tuple[str, ...]) -> float:
        raise NotImplementedError

    def input_example(self, line: str, where: str):
        raise NotImplementedError

    def predict(self, loaded, examples: list, batch_size: int, max_length: int, progress=None) -> list[dict]:
        """What `compress predict` prints for each example; `progress(n)` as n are done."""
        raise NotImplementedError


def locate(where: str, line: int) -> str:
    """`file:line`, or `hub:<id>[<split>] row <i>` for a Hub dataset's row."""
    return f"{where} row {line}" if where.startswith("hub:") else f"{where}:{line}"


def register(kind: TaskKind) -> TaskKind:
    KINDS[kind.name] = kind
    return kind


def get_kind(name: str) -> TaskKind:
    from compress.tasks import classification, tagging  # noqa: F401  (they register themselves)

    if name not in KINDS:
        raise DataError(f"unknown task kind '{name}': choose one of {', '.join(sorted(KINDS))}")
    return KINDS[name]


@dataclass(frozen=True)
class Task:
    """One dataset's task: its name (the params preset it was prepared with), kind and
    labels. `labels` are the values as written in the data (index = class id);
    `label_names` what predictions print (the labels unless params name them)."""
    name: str
    kind: str
    labels: tuple[str, ...]
    label_names: tuple[str, ...]

    def __post_init__(self):
        get_kind(self.kind)
        if len(self.labels) != len(self.label_names):
            raise DataError(f"task '{self.name}': {len(self.labels)} labels but {len(self.label_names)} label names")

    @property
    def kind_impl(self) -> TaskKind:
        return get_kind(self.kind)

    @property
    def head(self) -> str:
        return self.kind_impl.head

    @property
    def is_pair(self) -> bool:
        return self.kind_impl.pair

    @property
    def token_level(self) -> bool:
        return self.kind_impl.token_level

    @property
    def num_labels(self) -> int:
        return len(self.labels)

    @property
    def metrics(self) -> tuple[str, ...]:
        return self.kind_impl.metrics(self.num_labels)

    @property
    def primary_metric(self) -> str:
        return self.kind_impl.primary_metric

    def to_dict(self) -> dict:
        return {"name": self.name, "kind": self.kind, "labels": list(self.labels),
                "label_names": list(self.label_names)}

    @classmethod
    def from_dict(cls, d: dict, where: str) -> "Task":
        try:
            return cls(str(d["name"]), str(d["kind"]), tuple(map(str, d["labels"])),
                       tuple(map(str, d.get("label_names") or d["labels"])))
        except (KeyError, TypeError) as e:
            raise DataError(f"{where}: malformed task record ({e}); re-run the prepare stage") from None
