"""Use an artifact: classify texts (`compress predict`) or score a GLUE-format split
(`compress evaluate`) with exactly the pipeline's pre-processing and runners.

The production artifact (`models/production/`, written by the `select` stage) carries
`artifact.json` with the sha256 of every file; it is checked before anything is loaded,
so a swapped or corrupted file is refused rather than run.

Every artifact knows its task (`task_of`): artifact.json records it for a promoted
artifact, config.json (`finetuning_task`, `task_kind`, `task_labels`, `id2label`) for
any directory a stage wrote (derived formats keep their parent's config.json).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable, Iterator

from compress.data.prepare import Example
from compress.tasks.base import Task
from compress.core.errors import UserError
from compress.report.select import file_hashes
from compress.stream import Loaded, predict_stream, tag_texts  # noqa: F401  (the public API of predict)

DEFAULT_ARTIFACT = Path("models/production")


class IntegrityError(UserError):
    """An artifact's files do not match the hashes recorded when it was promoted."""


def verify(path: Path) -> dict | None:
    """Check every file hash in path/artifact.json; returns its content (None when the
    directory has no artifact.json: a stage output, not a promoted artifact)."""
    meta_path = path / "artifact.json"
    if not meta_path.is_file():
        return None
    meta = json.loads(meta_path.read_text(encoding="utf-8"))
    actual = file_hashes(path)
    for name, digest in meta["sha256"].items():
        if name not in actual:
            raise IntegrityError(f"{path / name}: listed in artifact.json but missing; re-run `dvc repro select`")
        if actual[name] != digest:
            raise IntegrityError(f"{path / name}: sha256 {actual[name][:12]}… does not match artifact.json "
                                 f"({digest[:12]}…); the file changed since promotion, refusing to load it")
    return meta


def artifact_at(path: Path, name: str | None = None):
    """An Artifact for a directory any stage wrote: its format and precision from its
    manifest.json (compress.backends.registry.recognise; a directory without one, such as
    a model saved elsewhere, by its backends' marker files)."""
    from compress.backends import registry
    from compress.backends.base import Artifact

    if not path.is_dir():
        raise UserError(f"{path}: no such artifact directory")
    try:
        fmt, precision = registry.recognise(path)
    except ValueError as e:
        raise UserError(str(e)) from None
    return Artifact(name or path.name, path, fmt, precision)


def _read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise UserError(f"{path}: unreadable ({e})") from None
    if not isinstance(data, dict):
        raise UserError(f"{path}: not a JSON object")
    return data


def detect_task(path: str | Path) -> tuple[Task, str] | None:
    """(task, where it was read) for an artifact directory, or None when nothing in it
    describes a task. Looked up in order:

    1. `artifact.json` "task": a promoted artifact's record (name, kind, labels);
    2. config.json `finetuning_task`, `task_kind` and `task_labels` (written by
       `models.save_classifier(..., task=)` and carried into every derived artifact:
       ONNX, ONNX Runtime INT8, OpenVINO, torchao, INC, TensorRT copy or re-save it),
       `id2label` giving the label names."""
    path = Path(path)
    if (path / "artifact.json").is_file():
        recorded = _read_json(path / "artifact.json").get("task")
        if isinstance(recorded, dict):
            return Task.from_dict(recorded, str(path / "artifact.json")), "artifact.json"
    if not (path / "config.json").is_file():
        return None
    cfg = _read_json(path / "config.json")
    id2label = cfg.get("id2label") or {}
    try:
        names = [str(id2label[str(i)]) for i in range(len(id2label))]
    except KeyError:
        raise UserError(f"{path / 'config.json'}: id2label does not map class ids 0..{len(id2label) - 1}") from None
    # a model this project did not train (or an older one) has no task_kind/task_labels: its
    # head says the kind, id2label the labels (a pair model cannot be told from a single-text one)
    arch = (cfg.get("architectures") or [""])[0]
    kind = cfg.get("task_kind") or ("token_classification" if arch.endswith("ForTokenClassification")
                                    else "classification")
    labels = [str(x) for x in cfg.get("task_labels") or names]
    if not labels:
        return None
    task = Task.from_dict({"name": cfg.get("finetuning_task") or path.name, "kind": kind, "labels": labels,
                           "label_names": names or labels}, str(path / "config.json"))
    return task, "config.json"


def task_of(path: str | Path) -> Task:
    """The task of any artifact directory (see detect_task for where it is read); a
    UserError naming the directory when it records none."""
    found = detect_task(path)
    if found is None:
        raise UserError(f"{path}: the artifact does not record its task (no task in artifact.json, no "
                        "task_kind/task_labels or id2label in config.json): rebuild it with this version's stages")
    return found[0]


def resolve_task(path: str | Path, task: str | None = None) -> Task:
    """The artifact's own task; `task`, when given, must be its name.

    A name that contradicts the recorded one is refused: the model would be fed another
    task's inputs and its scores would be meaningless, with no sign of it."""
    found = task_of(path)
    if task is not None and task != found.name:
        raise UserError(f"{path}: --task {task} contradicts the artifact's task '{found.name}' "
                        f"({found.kind}, labels {', '.join(found.label_names[:8])}"
                        f"{', ...' if found.num_labels > 8 else ''}); omit --task to use it, or choose an "
                        f"artifact trained on {task}")
    return found


def load(path: str | Path = DEFAULT_ARTIFACT, task: str | None = None, target: str = "cpu",
         threads: int = 2) -> Loaded:
    from compress.backends.base import load_runner, skip_reason

    path = Path(path)
    if not path.is_dir():
        raise UserError(f"{path}: no such artifact directory (the production artifact is written by "
                        "`dvc repro select`)")
    meta = verify(path)
    found = resolve_task(path, task)  # before any weights are loaded: a wrong task stops here
    art = artifact_at(path)  # its manifest names the format (and imports a plugin's backend)
    if meta:  # the promoted record names what it is
        from compress.backends.base import Artifact

        art = Artifact(meta["artifact"], path, meta["format"], meta["precision"])
    reason = skip_reason(art, target)
    if reason:
        raise UserError(f"{path} cannot run on {target}: {reason}")
    runner = load_runner(art, target, threads)
    return Loaded(runner, found, list(found.label_names), meta)


def parse_lines(lines: Iterable[bytes | str], kind, source: str) -> Iterator[Example]:
    """One input per line, as the task kind reads it (`TaskKind.input_example`: a text, or
    `text_a<TAB>text_b` for pair tasks); errors name the line."""
    for n, raw in enumerate(lines, 1):
        if isinstance(raw, bytes):
            try:
                raw = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise UserError(f"{source}:{n}: not valid UTF-8 (byte {e.start}); save the input as UTF-8") from None
        line = raw.rstrip("\r\n").lstrip("\ufeff") if n == 1 else raw.rstrip("\r\n")
        if not line.strip():
            continue  # blank lines separate nothing here; skip them
        yield kind.input_example(line, f"{source}:{n}")


def predict(loaded: Loaded, examples: list[Example], batch_size: int = 32, max_length: int = 128,
            progress: bool = False) -> list[dict]:
    return list(predict_stream(loaded, examples, batch_size, max_length, progress, total=len(examples)))


def evaluate(loaded: Loaded, cfg, split: str = "dev", batch_size: int = 64, max_length: int = 128) -> dict:
    """Metrics of the artifact on a split of the source `cfg` (a compress.data.prepare.PrepareConfig)
    describes, validated like the pipeline's data with the artifact's own labels (a label
    the model does not know is an error naming file and line): the task's metrics, and for
    a tagger entities and F1 per entity type."""
    from compress.data.prepare import read_split
    from compress.measure.metrics import task_metrics
    from compress.data.tokens import encode, eval_batches, position_logits

    examples = list(read_split(cfg, split, loaded.task))
    if not examples:
        raise UserError(f"{cfg.source}: split '{split}' has no rows")
    enc = encode(loaded.runner.tokenizer, examples, max_length)
    logits = position_logits(enc, eval_batches(enc.lengths(), batch_size), loaded.runner, loaded.runner.num_labels)
    out = {"rows": len(enc), "source": cfg.source, "split": split, "task": loaded.task.name,
           **task_metrics(loaded.task, enc, logits)}
    return {**out, **loaded.task.kind_impl.details(loaded.task, enc, logits.argmax(-1))}
