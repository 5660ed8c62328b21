"""Tasks and data: read, validate and prepare GLUE classification and CoNLL tagging splits.

Sources are a local GLUE-format directory (``train.tsv`` and ``dev.tsv``, tab-separated,
quoting off, UTF-8 with an optional byte-order mark) or a Hugging Face Hub dataset id
written ``hub:glue/sst2``. Every problem in a local file is reported with the file and
line number. Prepared splits are JSON lines ``{"text_a", "text_b", "label"}``; the
tokenizer of each model turns them into tensors later, so one prepared set serves all
models of a pipeline.

A task's `kind` says what its model predicts: `sequence` (one label per sentence or pair:
SST-2, MRPC) or `token` (one tag per word: CoNLL-2003 NER, read by compress.ner, prepared
as JSON lines ``{"words", "tags"}``). Stages never branch on task names: they ask the
task for its kind and its `primary_metric` (what the comparison and `select` rank by).
"""
from __future__ import annotations

import hashlib
import json
import random
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator

from .config import check
from .errors import UserError
from .io import atomic_dir, atomic_write_json
from .ner import TAG_ID, TAGS, Sentence, card_counts, read_conll

SPLITS = ("train", "dev")


@dataclass(frozen=True)
class Task:
    name: str
    columns: tuple[str, ...]  # header of the GLUE tsv file
    text_columns: tuple[str, ...]  # one column: single sentence; two: sentence pair
    label_column: str
    labels: tuple[str, ...]  # label values as written in the file, index = class id
    label_names: tuple[str, ...]
    hub_columns: tuple[str, ...]  # text columns in the Hub's glue config
    metrics: tuple[str, ...]  # scalar dev metrics in curves and reports (compress.metrics)
    kind: str = "sequence"  # sequence: a label per row | token: a tag per word
    primary_metric: str = "accuracy"  # what the comparison, floors and `select` rank by

    @property
    def is_pair(self) -> bool:
        return len(self.text_columns) == 2

    @property
    def token_level(self) -> bool:
        return self.kind == "token"

    @property
    def num_labels(self) -> int:
        return len(self.labels)


TASKS = {
    "sst2": Task(
        name="sst2",
        columns=("sentence", "label"),
        text_columns=("sentence",),
        label_column="label",
        labels=("0", "1"),
        label_names=("negative", "positive"),
        hub_columns=("sentence",),
        metrics=("accuracy",),
    ),
    "mrpc": Task(
        name="mrpc",
        columns=("Quality", "#1 ID", "#2 ID", "#1 String", "#2 String"),
        text_columns=("#1 String", "#2 String"),
        label_column="Quality",
        labels=("0", "1"),
        label_names=("not_equivalent", "equivalent"),
        hub_columns=("sentence1", "sentence2"),
        metrics=("accuracy", "f1"),
    ),
    # Entity-level micro F1 (exact span and type, conlleval), precision, recall and the
    # tag accuracy of words (compress.ner.entity_metrics)
    "conll2003": Task(
        name="conll2003",
        columns=("token", "tag"),
        text_columns=("tokens",),
        label_column="tag",
        labels=TAGS,
        label_names=TAGS,
        hub_columns=("tokens",),
        metrics=("f1", "precision", "recall", "token_accuracy"),
        kind="token",
        primary_metric="f1",
    ),
}


class DataError(UserError):
    """Input data is missing or malformed; the message names the file and line."""


def get_task(name: str) -> Task:
    if name not in TASKS:
        raise DataError(f"unknown task '{name}': choose one of {', '.join(TASKS)}")
    return TASKS[name]


@dataclass(frozen=True)
class Example:
    text_a: str
    text_b: str | None
    label: int


def read_glue_tsv(path: str | Path, task: Task) -> Iterator[Example]:
    """Stream examples from a GLUE tsv file, validating every row.

    Streams line by line so memory stays bounded for any file size. Raises DataError
    naming the file and 1-based line number on the first bad row.
    """
    path = Path(path)
    if not path.is_file():
        raise DataError(
            f"{path}: file not found. A GLUE-format directory holds train.tsv and dev.tsv "
            f"(set prepare.source to that directory, or to hub:glue/{task.name})"
        )
    with open(path, "rb") as f:
        header = None
        col_index: dict[str, int] = {}
        for lineno, raw in enumerate(f, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise DataError(
                    f"{path}:{lineno}: not valid UTF-8 (byte 0x{raw[e.start]:02x} at column "
                    f"{e.start + 1}); re-encode the file as UTF-8"
                ) from None
            if lineno == 1:
                line = line.lstrip("\ufeff")  # MRPC ships with a byte-order mark
            line = line.rstrip("\r\n")
            if header is None:
                header = line.split("\t")
                missing = [c for c in task.columns if c not in header]
                if missing or len(header) != len(task.columns):
                    raise DataError(
                        f"{path}:1: wrong columns for task '{task.name}': expected "
                        f"{list(task.columns)}, found {header}"
                    )
                col_index = {c: header.index(c) for c in task.columns}
                continue
            if not line.strip():
                # A trailing blank line is harmless; a blank line mid-file is not.
                rest = f.read()
                if rest.strip():
                    raise DataError(f"{path}:{lineno}: empty line inside the data")
                return
            fields = line.split("\t")
            if len(fields) != len(header):
                raise DataError(
                    f"{path}:{lineno}: expected {len(header)} tab-separated fields, found "
                    f"{len(fields)} (a sentence may contain a tab character)"
                )
            label = fields[col_index[task.label_column]].strip()
            if label not in task.labels:
                raise DataError(
                    f"{path}:{lineno}: label {label!r} is not one of task '{task.name}' "
                    f"labels {list(task.labels)}"
                )
            texts = []
            for c in task.text_columns:
                text = fields[col_index[c]].strip()
                if not text:
                    raise DataError(f"{path}:{lineno}: empty sentence in column '{c}'")
                texts.append(text)
            yield Example(
                texts[0], texts[1] if task.is_pair else None, task.labels.index(label)
            )


def read_hub(dataset_id: str, split: str, task: Task, revision: str | None) -> Iterator[Example]:
    """Examples from a Hub dataset such as ``glue/sst2`` (needs network and `datasets`)."""
    try:
        import datasets  # optional: pip install 'bert-compress[hub]'
    except ImportError:
        raise DataError(
            f"hub:{dataset_id} needs the 'datasets' package: pip install 'bert-compress[hub]'"
        ) from None
    parts = dataset_id.split("/")
    hub_split = {"train": "train", "dev": "validation"}[split]
    if len(parts) == 2 and parts[0] == "glue":
        ds = datasets.load_dataset("nyu-mll/glue", parts[1], split=hub_split, revision=revision)
    else:
        ds = datasets.load_dataset(dataset_id, split=hub_split, revision=revision)
    for i, row in enumerate(ds):
        where = f"hub:{dataset_id}[{hub_split}] row {i}"
        missing = [c for c in (*task.hub_columns, "label") if c not in row]
        if missing:
            raise DataError(f"{where}: missing columns {missing}")
        label = row["label"]
        if label not in range(task.num_labels):
            raise DataError(f"{where}: label {label!r} outside 0..{task.num_labels - 1}")
        texts = [str(row[c]).strip() for c in task.hub_columns]
        if not all(texts):
            raise DataError(f"{where}: empty sentence")
        yield Example(texts[0], texts[1] if task.is_pair else None, int(label))


def read_hub_tokens(dataset_id: str, split: str, revision: str | None) -> Iterator[Sentence]:
    """Sentences from a Hub token-classification dataset with `tokens` and `ner_tags`
    columns in CoNLL-2003's tag order (e.g. ``eriktks/conll2003``; needs network)."""
    try:
        import datasets
    except ImportError:
        raise DataError(f"hub:{dataset_id} needs the 'datasets' package: pip install 'bert-compress[hub]'") from None
    hub_split = {"train": "train", "dev": "validation", "test": "test"}[split]
    ds = datasets.load_dataset(dataset_id, split=hub_split, revision=revision)
    for i, row in enumerate(ds):
        where = f"hub:{dataset_id}[{hub_split}] row {i}"
        if "tokens" not in row or "ner_tags" not in row:
            raise DataError(f"{where}: a token-classification dataset needs 'tokens' and 'ner_tags' columns")
        tags = [int(t) for t in row["ner_tags"]]
        if len(tags) != len(row["tokens"]) or any(not 0 <= t < len(TAGS) for t in tags):
            raise DataError(f"{where}: ner_tags must be one id in 0..{len(TAGS) - 1} per token")
        if row["tokens"]:
            yield Sentence(tuple(row["tokens"]), tuple(tags))


def read_split(source: str, split: str, task: Task, revision: str | None = None) -> Iterator[Example | Sentence]:
    if split not in SPLITS + ("test",):
        raise DataError(f"unknown split '{split}': choose one of {SPLITS + ('test',)}")
    if task.token_level:
        if source.startswith("hub:"):
            return read_hub_tokens(source[4:], split, revision)
        return read_conll(Path(source) / f"{split}.txt")
    if source.startswith("hub:"):
        return read_hub(source[4:], split, task, revision)
    return read_glue_tsv(Path(source) / f"{split}.tsv", task)


def json_line(ex: Example | Sentence) -> str:
    if isinstance(ex, Sentence):
        return json.dumps({"words": list(ex.words), "tags": [TAGS[t] for t in ex.tags]}, ensure_ascii=False) + "\n"
    return json.dumps({"text_a": ex.text_a, "text_b": ex.text_b, "label": ex.label}, ensure_ascii=False) + "\n"


def _count(counts: Counter, ex: Example | Sentence) -> None:
    """Label counts of a split: rows per label, or words per tag for a tagging task."""
    if isinstance(ex, Sentence):
        counts.update(ex.tags)
    else:
        counts[ex.label] += 1


def write_split(examples: Iterable[Example | Sentence], path: Path, max_rows: int | None, seed: int) -> Counter:
    """Stream examples into a JSON-lines file; returns the label counts written (words
    per tag for sentences).

    Memory stays bounded whatever the source size: without `max_rows` each row is written
    as it is read; with it, a seeded reservoir sample (Algorithm R) keeps at most
    `max_rows` rows, written in file order."""
    counts: Counter = Counter()
    if max_rows is None:
        with open(path, "w", encoding="utf-8") as f:
            for ex in examples:
                f.write(json_line(ex))
                _count(counts, ex)
        return counts
    rng = random.Random(seed)
    keep: list[tuple[int, Example]] = []
    for i, ex in enumerate(examples):
        if i < max_rows:
            keep.append((i, ex))
        else:
            j = rng.randint(0, i)
            if j < max_rows:
                keep[j] = (i, ex)
    keep.sort(key=lambda t: t[0])
    with open(path, "w", encoding="utf-8") as f:
        for _, ex in keep:
            f.write(json_line(ex))
            _count(counts, ex)
    return counts


def _row(d: dict) -> Example | Sentence:
    if "words" in d:
        words, tags = d["words"], d["tags"]
        if len(words) != len(tags) or not words:
            raise ValueError(f"{len(words)} words and {len(tags)} tags")
        return Sentence(tuple(words), tuple(TAG_ID[t] for t in tags))
    return Example(d["text_a"], d["text_b"], int(d["label"]))


def read_jsonl(path: str | Path) -> list[Example | Sentence]:
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: prepared split not found; run the prepare stage first")
    out = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            try:
                d = json.loads(line)
                out.append(_row(d))
            except (json.JSONDecodeError, KeyError, TypeError, ValueError) as e:
                raise DataError(f"{path}:{lineno}: malformed prepared row ({e})") from None
    return out


def sha256_file(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def data_card(task: Task, source: str, counts: dict[str, Counter], files: dict[str, Path]) -> dict:
    """Rows per split, label balance and content hashes of the prepared files; for a
    tagging task sentences, words and entities per type, and words per tag."""
    card = {"task": task.name, "source": source, "is_pair": task.is_pair,
            "label_names": list(task.label_names), "splits": {}}
    if task.token_level:
        card["kind"] = task.kind
    for name, c in counts.items():
        if task.token_level:
            stats = card_counts(read_jsonl(files[name]))
            card["splits"][name] = {"rows": stats["sentences"], "tokens": stats["tokens"],
                                    "entities": stats["entities"],
                                    "tag_counts": {t: c.get(i, 0) for i, t in enumerate(TAGS)},
                                    "sha256": sha256_file(files[name])}
            continue
        n = sum(c.values())
        card["splits"][name] = {
            "rows": n,
            "label_counts": {task.label_names[i]: c.get(i, 0) for i in range(task.num_labels)},
            "label_fraction": {task.label_names[i]: round(c.get(i, 0) / n, 4) if n else 0.0
                               for i in range(task.num_labels)},
            "sha256": sha256_file(files[name]),
        }
    return card


@dataclass(frozen=True)
class Prepared:
    """A prepared data directory: the splits and the card written by the prepare stage."""
    root: Path
    task: Task
    card: dict

    @classmethod
    def open(cls, root: str | Path) -> "Prepared":
        root = Path(root)
        card_path = root / "card.json"
        if not card_path.is_file():
            raise DataError(f"{card_path}: data card not found; run the prepare stage first")
        card = json.loads(card_path.read_text(encoding="utf-8"))
        return cls(root, get_task(card["task"]), card)

    def split(self, name: str) -> list[Example | Sentence]:
        return read_jsonl(self.root / f"{name}.jsonl")

    def sha256(self, name: str) -> str:
        return self.card["splits"][name]["sha256"]


# --- the prepare verb --------------------------------------------------------------------

@dataclass(frozen=True)
class PrepareConfig:
    task: str = "sst2"
    source: str = "../shared/data/sst2"  # GLUE-format directory, CoNLL directory, or hub:glue/sst2
    revision: str | None = None  # Hub dataset revision (commit or tag) to pin
    max_train_rows: int | None = None  # None: all rows; else a seeded random subset
    max_dev_rows: int | None = None
    seed: int = 0

    def __post_init__(self):
        check(self.task in TASKS, f"unknown task '{self.task}': choose one of {', '.join(TASKS)}")
        check(bool(self.source.strip()), "source must be a directory or hub:<dataset id>")
        for k in ("max_train_rows", "max_dev_rows"):
            v = getattr(self, k)
            check(v is None or v >= 1, f"{k} must be >= 1 or null, got {v}")
        check(self.revision is None or self.source.startswith("hub:"),
              "revision pins a Hub dataset; it has no meaning for a local source")


def prepare(cfg: PrepareConfig, out_dir: str | Path) -> dict:
    """Validate the source splits and write train.jsonl, dev.jsonl and card.json.

    Streams every split (bounded memory for any file size) into a temporary directory
    that replaces out_dir only when every split is valid: a bad row anywhere leaves the
    previous prepared data as it was."""
    task = get_task(cfg.task)
    limits = {"train": cfg.max_train_rows, "dev": cfg.max_dev_rows}
    with atomic_dir(out_dir) as tmp:
        files, counts = {}, {}
        for name in SPLITS:
            files[name] = tmp / f"{name}.jsonl"
            counts[name] = write_split(read_split(cfg.source, name, task, cfg.revision), files[name],
                                       limits[name], cfg.seed)
            where = f"{cfg.source}: split '{name}'"
            if not counts[name]:
                raise DataError(f"{where} has no rows")
            if len(counts[name]) < 2:
                (only,) = counts[name]
                unit = "words" if task.token_level else "rows"
                raise DataError(f"{where} holds only the label '{task.label_names[only]}' "
                                f"({counts[name][only]} {unit}): a {task.num_labels}-class task needs more "
                                "than one class in both splits; check the file (or the max_*_rows slice)")
        card = data_card(task, cfg.source, counts, files)
        card["subsample"] = {"max_train_rows": cfg.max_train_rows, "max_dev_rows": cfg.max_dev_rows,
                             "seed": cfg.seed}
        atomic_write_json(tmp / "card.json", card)
    return card
