"""Shared fixtures: tiny BERT models built in code, GLUE files written on the fly, and the
real GLUE data beside the checkout where realism matters."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("COMPRESS_SHARED_DATA", REPO.parent / "shared" / "data"))

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # tests never touch the network
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")


def pytest_collection_modifyitems(items):
    """Longest files first: the end-to-end files by their timeout marks, then the other files
    with `slow` tests, then the rest, each file's tests kept together and in order (module
    fixtures are built once). Under `make test`'s two workers (pytest-xdist, one file at a
    time, in this order) each starts on an end-to-end run and both end on short tests,
    instead of one idling while the other runs a 7-minute pipeline last. Plain `pytest`
    runs the same order. The sort is stable, so every worker computes the same list."""
    def weight(item) -> tuple:
        timeout = item.get_closest_marker("timeout")
        return (timeout.args[0] if timeout and timeout.args else 0, item.get_closest_marker("slow") is not None)

    files: dict = {}
    for item in items:
        files.setdefault(item.path, []).append(item)
    order = sorted(files, key=lambda path: max(weight(i) for i in files[path]), reverse=True)
    items[:] = [item for path in order for item in files[path]]


def preset(task: str, source, **overrides):
    """compress.data.prepare.PrepareConfig of the committed params.yaml's `task` preset (what the
    pipeline reads for it), with `source` and any prepare keys given over it.

    validation_disjoint_text is off unless given: the fixtures repeat their rows on purpose
    (SST2_ROWS * 4, the CoNLL sentences x 8), which that carve refuses; test_overlap and the
    e2e runs on the real data cover it."""
    from compress.cli import prepare_config
    from compress.core.config import build
    from compress.data.prepare import PrepareConfig

    cfg = prepare_config(str(REPO / "params.yaml"), task, str(source))
    values = {**{k: getattr(cfg, k) for k in cfg.__dataclass_fields__}, "validation_disjoint_text": False}
    return build(PrepareConfig, {**values, **overrides}, "prepare")


def make_task(name: str = "sst2", kind: str = "classification", labels=("0", "1"), names=None):
    from compress.tasks.base import Task

    return Task(name, kind, tuple(labels), tuple(names or labels))


# The presets' label sets, as params.yaml fixes them
SST2_NAMES = ("negative", "positive")
MRPC_NAMES = ("not_equivalent", "equivalent")
CONLL_TAGS = ("O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC", "B-MISC", "I-MISC")


def write_tsv(path: Path, header: list[str], rows: list[list[str]], bom: bool = False) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "\n".join("\t".join(r) for r in [header, *rows]) + "\n"
    path.write_bytes((b"\xef\xbb\xbf" if bom else b"") + text.encode("utf-8"))
    return path


SST2_ROWS = [
    ["a gorgeous , witty , seductive movie .", "1"],
    ["the movie is a disaster from start to finish .", "0"],
    ["an utterly charming and hilarious film", "1"],
    ["dull , lifeless and poorly acted", "0"],
    ["one of the best films of the year", "1"],
    ["i hated every minute of it", "0"],
    ["a warm , funny and moving story", "1"],
    ["boring and far too long", "0"],
]


@pytest.fixture
def sst2_dir(tmp_path) -> Path:
    d = tmp_path / "sst2"
    write_tsv(d / "train.tsv", ["sentence", "label"], SST2_ROWS * 4)
    write_tsv(d / "dev.tsv", ["sentence", "label"], SST2_ROWS)
    return d


@pytest.fixture
def mrpc_dir(tmp_path) -> Path:
    d = tmp_path / "mrpc"
    header = ["Quality", "#1 ID", "#2 ID", "#1 String", "#2 String"]
    rows = [[str(i % 2), str(i), str(i + 100), f"he said \" the {w} \" was fine .", f"the {w} was fine , he said"]
            for i, w in enumerate(["cat", "dog", "car", "plan", "deal", "test", "song", "game"])]
    write_tsv(d / "train.tsv", header, rows * 2, bom=True)
    write_tsv(d / "dev.tsv", header, rows, bom=True)
    return d


def tiny_model(num_labels: int = 2, seed: int = 0):
    """A 2-layer, 64-wide BERT with the real bert-base-uncased vocabulary, random weights."""
    from compress.training.models import load_classifier

    model, tokenizer, _ = load_classifier("random:tiny", num_labels, seed=seed)
    return model, tokenizer


@pytest.fixture
def tiny_model_dir(tmp_path) -> Path:
    from compress.training.models import save_classifier

    model, tokenizer = tiny_model()
    out = tmp_path / "tiny"
    save_classifier(model, tokenizer, out, ["negative", "positive"])
    return out


def add_validation(root: Path, rows: slice = slice(None)) -> Path:
    """Give a prepared directory a validation split as prepare writes it (validation.jsonl,
    the card's splits.validation with its sha256), a copy of dev's `rows`; a directory that
    already has one (prepare wrote it) is left as it is. Returns root."""
    import json

    from compress.core.io import sha256_file

    card = json.loads((root / "card.json").read_text(encoding="utf-8"))
    if "validation" in card["splits"] and "validation_carved" in card:
        return root
    lines = (root / "dev.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)[rows]
    (root / "validation.jsonl").write_text("".join(lines), encoding="utf-8")
    card["splits"]["validation"] = {"rows": len(lines), "sha256": sha256_file(root / "validation.jsonl")}
    card["validation_carved"] = {"from": "dev", "rows": len(lines), "note": "test fixture: a copy of dev rows"}
    (root / "card.json").write_text(json.dumps(card, indent=2), encoding="utf-8")
    return root


def drop_validation(root: Path) -> Path:
    """The directory as data prepared before the validation split existed: no split, no card entry."""
    import json

    card = json.loads((root / "card.json").read_text(encoding="utf-8"))
    card["splits"].pop("validation", None)
    card.pop("validation_carved", None)
    (root / "card.json").write_text(json.dumps(card, indent=2), encoding="utf-8")
    (root / "validation.jsonl").unlink(missing_ok=True)
    return root


@pytest.fixture
def prepared_sst2(tmp_path, sst2_dir) -> Path:
    """Prepared SST-2-format data with train, dev and validation (dev's rows 2 to 7) splits."""
    from compress.data.prepare import prepare

    out = tmp_path / "prepared"
    prepare(preset("sst2", str(sst2_dir)), out)
    # six of dev's rows, in place of any split prepare carved: the tests count on these rows
    return add_validation(drop_validation(out), slice(2, 8))


@pytest.fixture
def production(tmp_path) -> Path:
    """A tiny PyTorch model promoted by the selection policy, as the select stage does."""
    from compress.training.models import save_classifier
    from compress.report.select import SelectPolicy, promote, select

    model, tok = tiny_model()
    save_classifier(model, tok, tmp_path / "models" / "tiny", task=make_task(names=SST2_NAMES))
    env = {"cpu_model": "test CPU", "libraries": {}}
    records = [{"artifact": name, "target": "cpu", "status": "ok", "reason": None, "stage": "test",
                "backend": "pytorch-cpu", "format": "pytorch", "precision": "fp32", "task": "sst2",
                "accuracy": 0.5, "f1": None, "validation_metrics": {"accuracy": 0.5}, "validation_rows": 8,
                "parent": None, "latency_ms_p50": p50, "latency_ms_p99": p50,
                "real_latency_ms_p50": p50 / 4, "real_latency_ms_p99": p50 / 2,
                "throughput_seq_per_s": 100.0, "size_mb": 1.0, "num_params": 1000, "peak_mem_mb": 500.0,
                "threads": 2, "path": str(tmp_path / "models" / name)}
               for name, p50 in (("teacher", 10.0), ("tiny", 1.0))]
    sel = select({"environment": env, "records": records}, SelectPolicy())
    meta = promote(sel, env, tmp_path / "models" / "production")
    assert meta["artifact"] == "tiny" and "model.safetensors" in meta["sha256"]
    return tmp_path / "models" / "production"


# --- named-entity recognition (CoNLL-2003 format) ---------------------------------------

CONLL_TRAIN = """-DOCSTART- O

EU B-ORG
rejects O
German B-MISC
call O
to O
boycott O
British B-MISC
lamb O
. O

Peter B-PER
Blackburn I-PER

BRUSSELS B-LOC
1996-08-22 O

The O
European B-ORG
Commission I-ORG
said O
on O
Thursday O
it O
disagreed O
with O
German B-MISC
advice O
. O
"""

def write_conll(d: Path) -> Path:
    """A CoNLL-format directory: train.txt (the 4 sentences below, 8 times) and dev.txt
    (them once)."""
    d.mkdir(parents=True, exist_ok=True)
    (d / "train.txt").write_text(CONLL_TRAIN + ("\n" + CONLL_TRAIN.split("\n", 2)[2]) * 7)
    (d / "dev.txt").write_text(CONLL_TRAIN)
    return d


@pytest.fixture(scope="session")
def conll(tmp_path_factory):
    """A small CoNLL directory (4 hand-written sentences x 8) prepared, and a tiny tagger
    fine-tuned on it and saved: what the stages read and write."""
    from compress.data.prepare import Prepared, prepare
    from compress.training.models import load_classifier, save_classifier
    from compress.data.tokens import encode
    from compress.training.train import FinetuneConfig, finetune

    root = tmp_path_factory.mktemp("conll")
    write_conll(root / "src")
    card = prepare(preset("conll2003", root / "src"), root / "prepared")
    prepared = Prepared.open(root / "prepared")
    model, tok, _ = load_classifier("random:tiny", 9, seed=0, kind="token")
    train, val = (encode(tok, prepared.split(s), 64) for s in ("train", "validation"))
    summary = finetune(model, train, val, FinetuneConfig(epochs=12, batch_size=8, lr=5e-3, eval_every_steps=0,
                                                         log_every_steps=1), prepared.task, root / "curves")
    save_classifier(model, tok, root / "teacher", task=prepared.task)
    return root, card, prepared, summary


@pytest.fixture(scope="session")
def conll_prepared(tmp_path_factory) -> Path:
    """The small CoNLL directory (write_conll), prepared (28 train sentences, 4 carved as validation); no model."""
    from compress.data.prepare import prepare

    root = tmp_path_factory.mktemp("conll_prepared")
    prepare(preset("conll2003", write_conll(root / "src")), root / "prepared")
    return root / "prepared"


# --- a quiet, light `compress predict` -----------------------------------------------------

LIGHT_CHECK = ("import sys; from compress.cli import main; rc = main(['predict', '--artifact', sys.argv[1], "
               "'a warm and funny film', 'dull']); print('HEAVY', ','.join(sorted(m for m in "
               "('torch', 'torchao', 'transformers') if m in sys.modules))); sys.exit(rc)")


def predict_in_a_fresh_process(artifact: Path) -> tuple[list[str], set[str], str]:
    """(output lines, heavy modules imported, stderr) of `compress predict` on two texts in a
    new interpreter with every warning shown (-W default)."""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-W", "default", "-c", LIGHT_CHECK, str(artifact)],
                          capture_output=True, text=True, cwd=REPO, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    heavy = {m for m in lines[-1].removeprefix("HEAVY ").split(",") if m}
    return lines[:-1], heavy, proc.stderr
