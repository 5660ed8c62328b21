"""The validation split: carved by prepare from the training rows (seeded, stratified,
disjoint from train and dev, capped), refused with the fix on data prepared before it,
and the only split a choice is made on. Dev only reports: the stages that fit and choose
(teacher and its seed, teacher logits, distillation, pruning, calibration and parity
batches) finish on a prepared directory whose dev.jsonl is not even JSON, and a scan of
the source finds dev read only where figures are reported."""
import ast
import hashlib
import json
import shutil
from collections import Counter
from pathlib import Path

import pytest

from compress.core.config import build
from compress.data.prepare import DataError, Prepared, carve, prepare, read_split
from conftest import REPO, preset, write_tsv

INTENTS = ["card_arrival", "pin_blocked", "top_up_failed", "lost_card", "exchange_rate"]
WORDS = ["gorgeous", "witty", "dull", "lifeless", "charming", "boring", "moving", "tedious", "sharp", "messy"]


def write_intents(d: Path, rows_per_label: int = 40) -> Path:
    """A 5-intent CSV with distinct texts and no dev file (the banking77 preset carves dev)."""
    d.mkdir(parents=True, exist_ok=True)
    lines = ["text,category"] + [f"query {i} about {label.replace('_', ' ')},{label}"
                                 for i in range(rows_per_label) for label in INTENTS]
    (d / "train.csv").write_text("\n".join(lines) + "\n")
    return d


def texts(rows) -> set:
    return {(r.text_a, r.label) for r in rows}


def test_carve_is_seeded_stratified_disjoint_and_after_the_dev_carve(tmp_path):
    src = write_intents(tmp_path / "b")
    card = prepare(preset("banking77", src), tmp_path / "out")
    p = Prepared.open(tmp_path / "out")
    train, dev, val = p.split("train"), p.split("dev"), p.validation()
    assert (len(train), len(dev), len(val)) == (160, 20, 20)  # dev 10% of 200; validation 10% of the 180 left
    assert not texts(train) & texts(val) and not texts(dev) & texts(val) and not texts(train) & texts(dev)
    assert set(Counter(r.label for r in val).values()) == {4}  # every intent alike
    carved = card["validation_carved"]
    assert {k: carved[k] for k in ("from", "fraction", "max_rows", "seed", "rows")} == \
        {"from": "train", "fraction": 0.1, "max_rows": 2000, "seed": 0, "rows": 20}
    assert card["splits"]["validation"]["rows"] == 20 and len(card["splits"]["validation"]["sha256"]) == 64
    # the dev carve draws what it drew before validation existed
    rows = list(read_split(preset("banking77", src), "train"))
    assert card["dev_carved"]["row_ids_sha256"] == hashlib.sha256(
        json.dumps(carve(rows, p.task, 0.1, 0)[1]).encode()).hexdigest()
    again = prepare(preset("banking77", src), tmp_path / "again")
    other = prepare(preset("banking77", src, seed=1), tmp_path / "other")
    assert again["validation_carved"] == carved and again["splits"] == card["splits"]
    assert other["validation_carved"]["row_ids_sha256"] != carved["row_ids_sha256"]


def test_the_cap_keeps_strata_as_far_as_it_can_and_the_train_slice_comes_after(tmp_path):
    src = write_intents(tmp_path / "b")
    card = prepare(preset("banking77", src, max_validation_rows=3), tmp_path / "capped")
    val = Prepared.open(tmp_path / "capped").validation()
    assert len(val) == card["validation_carved"]["rows"] == 3 and len({r.label for r in val}) == 3
    card = prepare(preset("banking77", src, max_train_rows=10, validation_fraction=0.25), tmp_path / "sliced")
    p = Prepared.open(tmp_path / "sliced")
    assert len(p.split("train")) == 10 and len(p.validation()) == 45  # 25% of 180, not of the 10 kept


def test_bad_validation_params_are_refused(tmp_path):
    from compress.core.config import ConfigError

    src = write_intents(tmp_path / "b")
    for bad, key in (({"validation_fraction": 0.0}, "validation_fraction"),
                     ({"max_validation_rows": 0}, "max_validation_rows"),
                     ({"validation_rows": 5}, "validation_rows")):
        with pytest.raises(ConfigError, match=key):
            preset("banking77", src, **bad)


def test_data_prepared_before_the_validation_split_is_refused_with_the_fix(tmp_path):
    src = write_intents(tmp_path / "b")
    prepare(preset("banking77", src), tmp_path / "old")
    (tmp_path / "old/validation.jsonl").unlink()
    card = json.loads((tmp_path / "old/card.json").read_text())
    del card["validation_carved"], card["splits"]["validation"]
    (tmp_path / "old/card.json").write_text(json.dumps(card))
    p = Prepared.open(tmp_path / "old")
    assert len(p.split("train")) == 160  # what older data holds still reads
    with pytest.raises(DataError, match=r"prepared before the validation split.*dvc repro prepare"):
        p.validation()
    from compress.training.teacher import TeacherConfig, build_teacher

    with pytest.raises(DataError, match=r"dvc repro prepare"):  # before any training starts
        build_teacher(TeacherConfig(model="random:tiny"), p, tmp_path / "teacher", tmp_path / "curves")
    assert not (tmp_path / "teacher").exists()


# --- every choosing stage on data whose dev split cannot be read ----------------------------

def sentence(i: int) -> list[str]:
    a, b, c = WORDS[i % 10], WORDS[(i * 3 + 1) % 10], WORDS[(i * 7 + 2) % 10]
    return [f"a {a} , {b} film number {i} , {c}", str(int(a in WORDS[::2]))]


@pytest.fixture(scope="module")
def poisoned(tmp_path_factory):
    """An SST-2-shaped task of 120 distinct training sentences, prepared, then its dev.jsonl
    replaced by text that is not JSON: any read of dev raises."""
    root = tmp_path_factory.mktemp("validation")
    write_tsv(root / "src/train.tsv", ["sentence", "label"], [sentence(i) for i in range(120)])
    write_tsv(root / "src/dev.tsv", ["sentence", "label"], [sentence(i) for i in range(1000, 1008)])
    prepare(preset("sst2", root / "src"), root / "prepared")
    (root / "prepared/dev.jsonl").write_text("{dev rows must never be read by a stage that fits or chooses\n")
    with pytest.raises(DataError):
        Prepared.open(root / "prepared").split("dev")  # the poison is real
    return root


def steps(n: int, **kw) -> dict:
    return {"epochs": None, "max_steps": n, "min_steps": 0, "batch_size": 8, "lr": 5e-3, "eval_every_steps": 0,
            "log_every_steps": 1, "threads": 1, **kw}


@pytest.fixture(scope="module")
def teacher(poisoned):
    from compress.training.teacher import TeacherConfig, build_teacher

    cfg = build(TeacherConfig, {"model": "random:tiny", "max_length": 32, "seeds": [1, 2], "train": steps(2)},
                "teacher")
    summary = build_teacher(cfg, Prepared.open(poisoned / "prepared"), poisoned / "teacher", poisoned / "curves",
                            eval_max_length=32)
    return summary


def test_teacher_keeps_the_seed_best_on_held_out_training_rows_and_reports_every_seed(poisoned, teacher):
    from compress.data.tokens import encode
    from compress.measure.metrics import task_metrics
    from compress.training.models import load_saved
    from compress.training.train import predict_logits

    runs = teacher["seeds"]
    assert [r["seed"] for r in runs] == [1, 2]
    assert all("accuracy" in r["validation"] and "accuracy" in r["seed_choice"] for r in runs)
    best = max(runs, key=lambda r: r["seed_choice"]["accuracy"])  # the first of equals
    assert teacher["chosen_seed"] == best["seed"] == teacher["training"]["seed"]
    assert teacher["chosen_on"] == "seed_choice" and teacher["training"]["final_seed_choice"] == best["seed_choice"]
    carved = teacher["seed_choice"]
    assert (carved["rows"], carved["fit_rows"], carved["from"]) == (10, 98, "train")  # 10% of the 108 training rows
    prepared = Prepared.open(poisoned / "prepared")
    model, tok = load_saved(poisoned / "teacher")
    val = encode(tok, prepared.validation(), 32)
    # validation is measured on the kept teacher, never used to keep it
    assert task_metrics(prepared.task, val, predict_logits(model, val)) == best["validation"]
    assert teacher["training"]["final_validation"] == best["validation"]
    assert sorted(p.name for p in (poisoned / "curves").iterdir()) == ["eval.csv", "train.csv"]


def test_seeds_are_fitted_without_the_seed_choice_rows_and_chosen_on_them_not_on_validation(
        poisoned, tmp_path, monkeypatch):
    """Scripted figures per seed (fine-tuning stubbed): on the seed-choice rows the middle
    seed is best, on validation the last. The middle one is saved, with its curves; every
    seed fitted the same rows, the training split less the seeded, stratified carve."""
    import torch

    from compress.training import teacher as teacher_mod
    from compress.training.models import load_saved

    choice = {5: 0.6, 6: 0.8, 7: 0.7}
    validation = {5: 0.7, 6: 0.6, 7: 0.9}
    fitted, judged, current = {}, {}, []

    def fake_finetune(model, train, val, cfg, task, curves, desc="", loss_fn=None):
        with torch.no_grad():
            model.classifier.bias.fill_(cfg.seed)  # marks the weights as this seed's
        for name in ("train.csv", "eval.csv"):
            (curves / name).write_text(f"seed,{cfg.seed}\n")
        fitted[cfg.seed], judged[cfg.seed] = len(train), len(val)
        current.append(cfg.seed)
        return {"steps": 1, "train_wall_s": 0.0, "threads": 1, "final_validation": {"accuracy": choice[cfg.seed]}}

    monkeypatch.setattr(teacher_mod, "finetune", fake_finetune)
    monkeypatch.setattr(teacher_mod, "task_metrics", lambda task, enc, logits: {"accuracy": validation[current[-1]]})
    cfg = build(teacher_mod.TeacherConfig, {"model": "random:tiny", "seeds": [5, 6, 7], "seed_choice_fraction": 0.25,
                                            "train": steps(1)}, "teacher")
    prepared = Prepared.open(poisoned / "prepared")
    summary = teacher_mod.build_teacher(cfg, prepared, tmp_path / "t", tmp_path / "c")
    assert summary["chosen_seed"] == 6 and summary["chosen_on"] == "seed_choice"
    assert [r["seed_choice"]["accuracy"] for r in summary["seeds"]] == [0.6, 0.8, 0.7]
    assert [r["validation"]["accuracy"] for r in summary["seeds"]] == [0.7, 0.6, 0.9]  # reported, not chosen on
    model, _ = load_saved(tmp_path / "t")
    assert float(model.classifier.bias[0]) == 6.0
    assert (tmp_path / "c/eval.csv").read_text() == "seed,6\n" and not list((tmp_path / "c").glob("seed-*"))
    # the carve: disjoint, stratified, the same for every seed and every run
    fit, held, card = teacher_mod.seed_choice_rows(cfg, prepared)
    train = prepared.split("train")
    assert len(fit) + len(held) == len(train) and set(map(texts_of, fit)).isdisjoint(map(texts_of, held))
    assert set(fitted.values()) == {len(fit)} and set(judged.values()) == {len(held)} == {28}
    by_label = Counter(r.label for r in train)
    assert {label: round(0.25 * n) for label, n in by_label.items()} == Counter(r.label for r in held)
    assert teacher_mod.seed_choice_rows(cfg, prepared)[2] == card == {k: summary[k] for k in ("chosen_on",
                                                                                              "seed_choice")}
    # one seed: nothing to choose, nothing held out
    one = build(teacher_mod.TeacherConfig, {"model": "random:tiny", "train": steps(1)}, "teacher")
    fit, held, card = teacher_mod.seed_choice_rows(one, prepared)
    assert len(fit) == len(train) and not held and card["chosen_on"] is None


def test_a_seed_choice_share_outside_0_1_is_refused():
    from compress.core.config import ConfigError
    from compress.training.teacher import TeacherConfig

    for bad in (0.0, 1.0):
        with pytest.raises(ConfigError, match="seed_choice_fraction"):
            build(TeacherConfig, {"seeds": [1, 2], "seed_choice_fraction": bad}, "teacher")


def texts_of(row) -> str:
    return row.text_a


def test_logits_distillation_pruning_and_parity_never_read_dev(poisoned, teacher):
    from compress.backends.onnx_export import parity_batches
    from compress.backends.openvino_check import quantization_slices
    from compress.backends.openvino_ir import OpenVinoConfig
    from compress.training.distill import CacheConfig, DistillConfig, cache_teacher_outputs, distill
    from compress.training.models import load_saved
    from compress.training.prune import PruneConfig, prune_student

    root, prepared = poisoned, Prepared.open(poisoned / "prepared")
    cache_teacher_outputs(root / "teacher", prepared, root / "cache",
                          build(CacheConfig, {"max_length": 32, "threads": 1}, "teacher_logits"))
    dcfg = build(DistillConfig, {"student_layers": [0], "train": steps(2)}, "distill")
    summary = distill(dcfg, root / "teacher", root / "cache", prepared, root / "student", root / "s_curves",
                      root / "control", root / "c_curves", eval_max_length=32)
    assert summary["eval_split"] == "validation" and "accuracy" in summary["student"]["final_validation"]
    pcfg = build(PruneConfig, {"head_fraction": 0.25, "importance_rows": 16, "importance_batch_size": 8,
                               "recover": True, "recovery": steps(2)}, "prune")
    pruned = prune_student(pcfg, root / "student", root / "cache", prepared, root / "pruned", root / "p_plots",
                           eval_max_length=32)
    assert set(pruned["before"]) >= {"validation"} and set(pruned["after"]) == {"validation"}
    assert "validation_before_recovery" in pruned["pruned"] and pruned["eval_split"] == "validation"
    _, tok = load_saved(root / "student")
    assert len(parity_batches(prepared, tok, [[1, 8], [2, 16]])) == 2
    data = quantization_slices(root / "prepared", tok, OpenVinoConfig(calibration_rows=8, validation_rows=8))
    assert data.info["validation_split"] == "validation" and len(data.validation) == 8
    from compress.backends.onnx_runtime import OrtQuantConfig
    from compress.backends.onnx_runtime_check import CheckRows

    rows = CheckRows(root / "prepared", tok, OrtQuantConfig(validation_rows=8, rank_rows=4))
    assert rows.info["split"] == "validation" and rows.info["rows"] == 8 and len(rows.rank_enc) == 4


# --- the source: dev is read only where figures are reported --------------------------------

# Where reading the dev split is right: the data layer that writes it, the measurement and
# report side, and the user-facing commands that report on a split the user names.
REPORTING = ("compress/data/prepare.py", "compress/measure/", "compress/report/", "compress/predict.py",
             "compress/cli.py", "pipelines/benchmark.py", "pipelines/compare.py", "pipelines/select.py")


def dev_reads(path: Path) -> list[int]:
    """Lines where a call gets the string "dev" (split("dev"), read_split(cfg, "dev"), ...)
    or a string naming dev.jsonl."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call):
            args = [*node.args, *(k.value for k in node.keywords)]
            lines += [a.lineno for a in args if isinstance(a, ast.Constant) and a.value == "dev"]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and "dev.jsonl" in node.value:
            lines.append(node.lineno)
    return lines


def test_only_reporting_code_reads_the_dev_split():
    found = {}
    for path in sorted([*(REPO / "compress").rglob("*.py"), *(REPO / "pipelines").rglob("*.py")]):
        rel = path.relative_to(REPO).as_posix()
        if not rel.startswith(REPORTING) and (lines := dev_reads(path)):
            found[rel] = lines
    assert not found, f"dev read outside the reporting code (choices read validation): {found}"
    # the scan sees what it is meant to see
    assert dev_reads(REPO / "compress/measure/harness.py")
