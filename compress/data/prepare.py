"""Users' data: read and validate the split files of a task of any kind, take the label
set from the training split, carve a dev split when there is none, carve the validation
split from the training rows, and write the prepared splits and the data card every later
stage reads.

Three roles, three splits: train fits (teacher, logits cache, distillation, pruning
recovery, calibration); validation chooses (the best of a tuning run, INC's objective,
NNCF's accuracy control, parity batches, `select`'s floor and ranking); dev (and test)
only report. The teacher seed is chosen on training rows of its own that no seed fits
(compress.training.teacher.seed_choice_rows), so validation still measures the kept
teacher without having picked it.
Validation is a seeded, stratified share of the training rows held out from every fit,
so no figure a report prints was used to pick what it reports on.

Sources are a local directory holding the split files named by `prepare.train`, `.dev`
and `.test` (CSV, TSV, JSON Lines or CoNLL columns; the format follows the extension
unless `prepare.format` names it) or a Hugging Face Hub dataset written ``hub:<id>``
(`train`, `dev`, `test` then name Hub splits). Every problem in a file is reported with
the file and line (compress.tasks.formats). Prepared splits are JSON lines:
``{"text_a", "text_b", "label"}`` (label: class id) for classifiers, ``{"words", "tags"}``
(tag names) for taggers; one prepared set serves every model of a pipeline.

Refused: a label in dev or test that training never had (file and line named), a label
set of one class, tags outside IOB1/IOB2, columns a kind does not read.
"""
from __future__ import annotations

import hashlib
import json
import random
from array import array
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator

from compress.core.config import check
from compress.core.errors import DataError
from compress.core.io import atomic_dir, atomic_write_json, sha256_file
from compress.data import overlap
from compress.tasks.iob import Sentence
from compress.tasks.base import Example, Task, get_kind, locate

SPLITS = ("train", "dev")
# a training row's role after the carves (one byte a row); DROPPED: its text sits inside a
# validation row's, so it is neither fitted on nor scored (validation_disjoint_text)
TRAIN, DEV, VALIDATION, DROPPED = 0, 1, 2, 3
COLUMN_KEYS = ("text", "text_pair", "label", "tokens", "tags")

__all__ = ["DataError", "Example", "Prepared", "PrepareConfig", "Task", "prepare", "read_split"]


def json_line(ex: Example | Sentence, task: Task) -> str:
    return json.dumps(task.kind_impl.to_json(ex, task.labels), ensure_ascii=False) + "\n"


def write_split(examples: Iterable[Example | Sentence], path: Path, task: Task, max_rows: int | None,
                seed: int) -> Counter:
    """Stream examples into a JSON-lines file; returns the label counts written (words
    per tag for sentences).

    Memory stays bounded whatever the source size: without `max_rows` each row is written
    as it is read; with it, a seeded reservoir sample (Algorithm R) keeps at most
    `max_rows` rows, written in file order."""
    counts: Counter = Counter()
    if max_rows is None:
        with open(path, "w", encoding="utf-8") as f:
            for ex in examples:
                f.write(json_line(ex, task))
                task.kind_impl.count(counts, ex)
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
            f.write(json_line(ex, task))
            task.kind_impl.count(counts, ex)
    return counts


def read_jsonl(path: str | Path, task: Task) -> list[Example | Sentence]:
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: prepared split not found; run the prepare stage first")
    out = []
    label_id = {t: i for i, t in enumerate(task.labels)}
    kind = task.kind_impl
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            try:
                out.append(kind.from_json(json.loads(line), label_id))
            except (json.JSONDecodeError, KeyError, TypeError, ValueError) as e:
                raise DataError(f"{path}:{lineno}: malformed prepared row ({e})") from None
    return out


def data_card(task: Task, cfg: PrepareConfig, counts: dict[str, Counter], files: dict[str, Path]) -> dict:
    """The task (name, kind, labels), where it was read, and per split the rows, label
    balance and content hash of the prepared file; for a tagger sentences, words,
    entities per type, words per tag and the tag scheme (IOB1/IOB2)."""
    card = {"task": task.name, "kind": task.kind, "labels": list(task.labels),
            "label_names": list(task.label_names), "source": cfg.source,
            "files": {s: cfg.split_file(s) for s in ("train", "dev", "test") if cfg.split_file(s)},
            "format": cfg.format, "columns": cfg.kind_columns(), "splits": {}}
    for name, c in counts.items():
        rows = lambda path=files[name]: read_jsonl(path, task)  # noqa: E731  (read only if the kind needs rows)
        card["splits"][name] = {**task.kind_impl.split_card(rows, c, task), "sha256": sha256_file(files[name])}
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
        if "kind" not in card or "labels" not in card:
            raise DataError(f"{card_path}: written by an older version (no task kind or labels); "
                            "re-run the prepare stage (dvc repro prepare)")
        return cls(root, task_of_card(card, str(card_path)), card)

    def split(self, name: str) -> list[Example | Sentence]:
        """The rows of a prepared split. "validation" is refused, naming the fix, for data
        prepared before the validation split existed."""
        if name == "validation" and not self.has_validation():
            raise DataError(f"{self.root}: prepared before the validation split existed (no validation.jsonl "
                            "or card.json without validation_carved); re-run the prepare stage (dvc repro prepare)")
        return read_jsonl(self.root / f"{name}.jsonl", self.task)

    def has_validation(self) -> bool:
        """True when prepare wrote a validation split: its card entries and its rows."""
        return ("validation_carved" in self.card and "validation" in self.card.get("splits", {})
                and (self.root / "validation.jsonl").is_file())

    def validation(self) -> list[Example | Sentence]:
        """The validation rows: what every choice (a seed, a tuning objective, an accuracy
        check) is made on; carved from the training rows, never fitted on, never dev."""
        return self.split("validation")

    def sha256(self, name: str) -> str:
        return self.card["splits"][name]["sha256"]

    def calibration_rows(self, rows: int, seed: int) -> list[Example | Sentence]:
        """The one calibration sampler of every backend (INC, OpenVINO/NNCF, TensorRT INT8):
        `rows` training rows (all of them when the split is smaller), a seeded sample
        without replacement, in sampled order. Training rows only: what the reports score
        (dev) never shapes a quantization."""
        train = self.split("train")
        return [train[i] for i in random.Random(seed).sample(range(len(train)), min(rows, len(train)))]


def task_of_card(card: dict, where: str) -> Task:
    return Task.from_dict({"name": card.get("task"), "kind": card.get("kind"), "labels": card.get("labels"),
                           "label_names": card.get("label_names")}, where)


# --- the prepare verb --------------------------------------------------------------------

@dataclass(frozen=True)
class PrepareConfig:
    task: str  # the dataset's name: selects every section's by_task preset
    source: str  # a directory of split files, or hub:<dataset id>
    kind: str = "classification"  # classification | pair_classification | token_classification
    format: str | None = None  # csv | tsv | jsonl | conll; null: from each file's extension
    train: str = "train.tsv"  # file names inside source (Hub split names for hub: sources)
    dev: str | None = "dev.tsv"  # null: carve dev_fraction of train (seeded, stratified)
    test: str | None = None  # reported only by `compress evaluate --split test`
    columns: dict[str, str] = field(default_factory=lambda: {"text": "sentence", "label": "label"})
    labels: list[str | int] | None = None  # null: the training split's labels, sorted; else the class order
    label_names: list[str] | None = None  # what predictions print, one per label (null: the labels)
    dev_fraction: float = 0.1
    # The validation split every choosing stage reads: this share of the training rows
    # (after a dev carve, before the max_train_rows slice), capped at max_validation_rows.
    validation_fraction: float = 0.1
    max_validation_rows: int | None = 2000
    # Draw validation only from rows whose text no other training row repeats or contains,
    # and drop the training rows inside a drawn one (compress.data.overlap): a held-out
    # sentence whose phrases stay in train is not held out. false: draw from every row.
    validation_disjoint_text: bool = True
    revision: str | None = None  # Hub dataset revision (commit or tag) to pin
    max_train_rows: int | None = None  # None: all rows; else a seeded random subset
    max_dev_rows: int | None = None
    seed: int = 0

    def __post_init__(self):
        check(_known_kind(self.kind),
              f"unknown kind '{self.kind}': choose one of classification, pair_classification, token_classification")
        kind = get_kind(self.kind)
        check(bool(self.source.strip()), "source must be a directory or hub:<dataset id>")
        check(bool(self.task.strip()), "task must name the dataset (the by_task preset of every section)")
        for k in ("max_train_rows", "max_dev_rows", "max_validation_rows"):
            v = getattr(self, k)
            check(v is None or v >= 1, f"{k} must be >= 1 or null, got {v}")
        check(0 < self.dev_fraction < 1, f"dev_fraction must be in (0, 1), got {self.dev_fraction}")
        check(0 < self.validation_fraction < 1,
              f"validation_fraction must be in (0, 1), got {self.validation_fraction}")
        check(self.revision is None or self.source.startswith("hub:"),
              "revision pins a Hub dataset; it has no meaning for a local source")
        unknown = sorted(set(self.columns) - set(COLUMN_KEYS))
        check(not unknown, f"unknown columns key(s) {unknown}: the keys are {', '.join(COLUMN_KEYS)}")
        check("text_pair" in kind.columns or not self.columns.get("text_pair"),
              f"columns.text_pair names a second text, which kind {self.kind} does not read (its columns: "
              f"{', '.join(kind.columns)})")
        if self.labels is not None:
            check(len(self.labels) >= 2 and len(set(map(str, self.labels))) == len(self.labels),
                  f"labels must list at least two distinct labels, got {self.labels}")
        if self.label_names is not None:
            check(self.labels is not None and len(self.label_names) == len(self.labels),
                  "label_names needs labels, one name per label in the same order")

    def split_file(self, split: str) -> str | None:
        """The file (a Hub split name for hub: sources) of `split`: train, dev or test."""
        return {"train": self.train, "dev": self.dev, "test": self.test}[split]

    def kind_columns(self) -> dict[str, str]:
        kind = get_kind(self.kind)
        return {k: self.columns.get(k, default) for k, default in kind.columns.items()}


def _known_kind(name: str) -> bool:
    try:
        get_kind(name)
        return True
    except DataError:
        return False


def read_raw(cfg: PrepareConfig, split: str) -> tuple[str, Iterator]:
    """(where, raw rows) of one split as written in the source."""
    kind = get_kind(cfg.kind)
    name = cfg.split_file(split)
    if cfg.source.startswith("hub:"):
        return f"{cfg.source}[{name}]", kind.read_hub(cfg.source[4:], name, cfg.revision, cfg.kind_columns())
    path = Path(cfg.source) / name
    if not path.is_file():
        where = "a directory" if Path(cfg.source).is_dir() else "not a directory"
        raise DataError(f"{path}: file not found (prepare.source {cfg.source} is {where}; prepare.{split} "
                        f"names the {split} file inside it)")
    return str(path), kind.read(path, cfg.format, cfg.kind_columns())


def label_set(cfg: PrepareConfig) -> tuple[Task, dict]:
    """The task's labels: params' list (every training label must be in it), or the
    labels of the training split in the kind's default order. One streaming pass."""
    kind = get_kind(cfg.kind)
    where, rows = read_raw(cfg, "train")
    seen: dict[str, int] = {}
    for raw in rows:
        for value in kind.label_values(raw):
            seen.setdefault(value, raw.line)
    if not seen:
        raise DataError(f"{where}: the training split has no rows")
    if cfg.labels is not None:
        labels = [str(x) for x in cfg.labels]
        extra = sorted(set(seen) - set(labels))
        if extra:
            raise DataError(f"{locate(where, seen[extra[0]])}: label {extra[0]!r} is not in prepare.labels {labels}; "
                            "add it there (or remove prepare.labels to take the labels from the data)")
    else:
        labels = kind.default_labels(seen)
    facts = kind.check_labels(labels, where)  # one class only: refused per split by prepare
    names = [str(x) for x in cfg.label_names] if cfg.label_names else labels
    return Task(cfg.task, cfg.kind, tuple(labels), tuple(names)), facts


def examples(cfg: PrepareConfig, split: str, task: Task) -> Iterator[Example | Sentence]:
    kind = task.kind_impl
    where, rows = read_raw(cfg, split)
    label_id = {label: i for i, label in enumerate(task.labels)}
    for raw in rows:
        yield kind.example(raw, label_id, where)


def read_split(cfg: PrepareConfig, split: str, task: Task | None = None) -> Iterator[Example | Sentence]:
    """Validated examples of a split of cfg's source, labels mapped by `task` (default: the
    label set of cfg's training split)."""
    if split not in ("train", "dev", "test"):
        raise DataError(f"unknown split '{split}': choose one of train, dev, test")
    if cfg.split_file(split) is None:
        raise DataError(f"no {split} file: set prepare.{split} (the {split} file inside prepare.source)")
    return examples(cfg, split, task or label_set(cfg)[0])


def carve(items: list, task: Task, fraction: float, seed: int) -> tuple[list[int], list[int]]:
    """(train ids, dev ids): a seeded, stratified share `fraction` of each stratum (a label;
    a tagger's set of entity types) for dev. A stratum of two or more rows gives at least
    one to dev and keeps at least one; the ids of each side stay in file order."""
    strata: dict[str, list[int]] = defaultdict(list)
    for i, ex in enumerate(items):
        strata[task.kind_impl.stratum(ex, task.labels)].append(i)
    chosen = set(carve_strata(strata, fraction, random.Random(seed)))
    return [i for i in range(len(items)) if i not in chosen], sorted(chosen)


def carve_strata(strata: dict, fraction: float, rng: random.Random) -> list[int]:
    """The ids drawn for the carved side: `fraction` of each stratum (keys in sorted order,
    so the draw depends on the seed alone), at least one of a stratum of two or more rows
    and never all of it."""
    out: list[int] = []
    for key in sorted(strata):
        ids = strata[key]
        k = min(max(round(fraction * len(ids)), 1), len(ids) - 1) if len(ids) >= 2 else 0
        # positions drawn from a range: the same draw as rng.sample(ids, k), and `ids` may
        # be a compact array (not a Sequence to random.sample)
        out += [ids[j] for j in rng.sample(range(len(ids)), k)]
    return out


def stratum_codes(rows: Iterable[Example | Sentence], task: Task) -> tuple[array, list[str]]:
    """One pass over the training rows keeping only each row's stratum, as a small int
    (array of 4 bytes a row) and the key of each code: what the carves need, without
    holding the rows themselves."""
    codes, keys, index = array("i"), [], {}
    for ex in rows:
        key = task.kind_impl.stratum(ex, task.labels)
        if key not in index:
            index[key] = len(keys)
            keys.append(key)
        codes.append(index[key])
    return codes, keys


def _strata(codes: array, keys: list[str], roles: bytearray, role: int,
            blocked: bytearray | None = None) -> dict[str, array]:
    """The ids of the rows of `role` (less those `blocked` marks), per stratum key, as
    compact int arrays."""
    strata: dict[str, array] = defaultdict(lambda: array("i"))
    for i, code in enumerate(codes):
        if roles[i] == role and not (blocked and blocked[i]):
            strata[keys[code]].append(i)
    return strata


def carve_roles(cfg: PrepareConfig, task: Task) -> tuple[bytearray, dict | None, dict]:
    """(role of each training row, the dev carve's card entry or None, the validation
    carve's card entry).

    Dev first, when there is no dev file (the same draw as before validation existed:
    `carve`'s seeded stratified share), then validation from the rows left, drawn with
    its own stream of the same seed: `validation_fraction` of each stratum, the fraction
    lowered so that at most `max_validation_rows` are drawn, and a seeded trim of the
    one-per-stratum excess over the cap. Ids count training-file rows from 0.

    With `validation_disjoint_text` the draw (and the cap's fraction) counts only rows whose
    text no other training row repeats or contains, and the training rows whose text sits
    inside a drawn one get the role DROPPED (compress.data.overlap; card: disjoint_text)."""
    codes, keys = stratum_codes(examples(cfg, "train", task), task)
    roles = bytearray(len(codes))  # TRAIN everywhere
    dev_card = None
    if cfg.dev is None:
        dev_ids = sorted(carve_strata(_strata(codes, keys, roles, TRAIN), cfg.dev_fraction, random.Random(cfg.seed)))
        if not dev_ids:
            raise DataError(f"{cfg.source}: {cfg.train} has too few rows to carve a dev split from")
        for i in dev_ids:
            roles[i] = DEV
        dev_card = {"from": "train", "fraction": cfg.dev_fraction, "seed": cfg.seed, "rows": len(dev_ids),
                    "row_ids_sha256": ids_sha256(dev_ids)}
    disjoint, blocked = None, None
    if cfg.validation_disjoint_text:
        # rows another row repeats or contains cannot be drawn (two more passes over the file)
        index = overlap.TextIndex(_texts(cfg, task))
        blocked = index.inside_another(_texts(cfg, task))
    pool = _strata(codes, keys, roles, TRAIN, blocked)
    left = sum(map(len, pool.values()))
    if blocked is not None:
        disjoint = {"candidates": left, "rows_inside_another": sum(blocked)}
    cap = cfg.max_validation_rows
    fraction = min(cfg.validation_fraction, cap / left) if cap is not None and left else cfg.validation_fraction
    rng = random.Random(f"validation:{cfg.seed}")
    val_ids = carve_strata(pool, fraction, rng)
    if cap is not None and len(val_ids) > cap:  # one row per small stratum can overshoot the cap
        val_ids = rng.sample(val_ids, cap)
    val_ids.sort()  # none when no stratum has two rows: refused by prepare once dev is validated
    for i in val_ids:
        roles[i] = VALIDATION
    val_card = {"from": "train", "fraction": cfg.validation_fraction, "max_rows": cap, "seed": cfg.seed,
                "rows": len(val_ids), "row_ids_sha256": ids_sha256(val_ids)}
    if disjoint is not None:
        if not val_ids:
            raise DataError(f"{cfg.source}: {cfg.train}: no validation row can be held out with "
                            "prepare.validation_disjoint_text: every training row's text repeats or sits inside "
                            f"another's ({disjoint['rows_inside_another']} of {len(roles)} rows), or no label has two "
                            "rows that do not; set it to false to draw from every row (a validation text may then "
                            "also be in train)")
        # training rows whose text sits inside a drawn validation row (its phrases) leave train
        spans = overlap.sub_windows((t for i, t in enumerate(_texts(cfg, task)) if roles[i] == VALIDATION),
                                    index.vocab)
        dropped = 0
        for i, hit in enumerate(overlap.inside(_texts(cfg, task), spans, index.vocab)):
            if hit and roles[i] == TRAIN:
                roles[i] = DROPPED
                dropped += 1
        val_card["disjoint_text"] = {
            **disjoint, "train_rows_dropped": dropped,
            "note": "validation drawn only from rows whose text no other training row repeats or contains; "
                    "training rows whose text sits inside a validation row's were dropped"}
    return roles, dev_card, val_card


def _texts(cfg: PrepareConfig, task: Task) -> Iterator[tuple[str, ...]]:
    """The text(s) of every training row, streamed in file order."""
    for ex in examples(cfg, "train", task):
        yield task.kind_impl.texts(ex)


def ids_sha256(ids: list[int]) -> str:
    """The hash a data card records for a carved split's row ids (ids in carve order)."""
    return hashlib.sha256(json.dumps(ids).encode()).hexdigest()


def with_role(cfg: PrepareConfig, task: Task, roles: bytearray, role: int) -> Iterator[Example | Sentence]:
    """The training rows of one role, streamed from the source in file order."""
    for i, ex in enumerate(examples(cfg, "train", task)):
        if roles[i] == role:
            yield ex


def _check_classes(counts: Counter, task: Task, where: str) -> None:
    if not counts:
        raise DataError(f"{where} has no rows")
    if len(counts) < 2:
        (only,) = counts
        unit = task.kind_impl.count_unit
        raise DataError(f"{where} holds only the label '{task.label_names[only]}' ({counts[only]} {unit}): a "
                        f"{task.num_labels}-class task needs more than one class in every split; check the file "
                        "(or the max_*_rows slice)")


def prepare(cfg: PrepareConfig, out_dir: str | Path) -> dict:
    """Validate the source splits and write train.jsonl, dev.jsonl, validation.jsonl
    (test.jsonl when given) and card.json.

    The label set comes from a first pass over the training split, each row's stratum from
    a second (`carve_roles`: the dev carve when there is no dev file, then the validation
    carve); each split is then streamed through validation and written, the training rows
    routed by role, so only a byte and a stratum code per training row stay in memory. The
    max_train_rows slice is taken from what the carves leave. Everything is written into a
    temporary directory that replaces out_dir only when every split is valid: a bad row
    anywhere leaves the previous prepared data as it was."""
    task, facts = label_set(cfg)
    roles, dev_carved, val_carved = carve_roles(cfg, task)
    limits = {"train": cfg.max_train_rows, "dev": cfg.max_dev_rows, "validation": None, "test": None}
    sources: dict[str, Iterable] = {"train": with_role(cfg, task, roles, TRAIN),
                                    "dev": with_role(cfg, task, roles, DEV) if cfg.dev is None
                                    else examples(cfg, "dev", task),
                                    "validation": with_role(cfg, task, roles, VALIDATION)}
    if cfg.test is not None:
        sources["test"] = examples(cfg, "test", task)
    with atomic_dir(out_dir) as tmp:
        files, counts = {}, {}
        for name, rows in sources.items():
            files[name] = tmp / f"{name}.jsonl"
            counts[name] = write_split(rows, files[name], task, limits[name], cfg.seed)
            if name == "validation" and not counts[name]:
                raise DataError(f"{cfg.source}: {cfg.train} has too few rows to carve a validation split from "
                                "(a label, or a tagger's set of entity types, needs two training rows)")
            if name != "test":
                _check_classes(counts[name], task, f"{cfg.source}: split '{name}'")
        card = data_card(task, cfg, counts, files)
        card.update(facts)
        card["dev_carved"] = dev_carved
        card["validation_carved"] = val_carved
        card["subsample"] = {"max_train_rows": cfg.max_train_rows, "max_dev_rows": cfg.max_dev_rows,
                             "seed": cfg.seed}
        atomic_write_json(tmp / "card.json", card)
    return card
