"""End to end on a user's own N-label data: `dvc repro` of every stage on five intents of
the real BANKING77 CSV (RFC 4180 quoting, labels read from the data, dev carved from
train), then `compress predict` printing the user's label names and `compress evaluate`
on a held-out file of the same format (a file of its own: one end-to-end run per worker)."""
from __future__ import annotations

import csv
import json
import subprocess
import sys

import pytest

from conftest import SHARED_DATA
from e2e import copy_repo, dvc, env, tiny_params

pytestmark = pytest.mark.slow
INTENTS = ["card_arrival", "exchange_rate", "lost_or_stolen_card", "pin_blocked", "top_up_failed"]


def _five_intents(dst):
    """train.csv: every row of five intents (quoting kept as the csv module writes it);
    test.csv: three rows per intent held out of it; bad.csv: an intent training never had."""
    src = SHARED_DATA / "banking77" / "train.csv"
    if not src.is_file():
        pytest.skip(f"{src} is not here (the shared data beside the checkout)")
    with open(src, newline="", encoding="utf-8") as f:
        rows = [r for r in csv.DictReader(f)]
    mine = [r for r in rows if r["category"] in INTENTS]
    test = [r for k in INTENTS for r in [x for x in mine if x["category"] == k][:3]]
    dst.mkdir(parents=True)
    for name, part in (("train.csv", [r for r in mine if r not in test]), ("test.csv", test),
                       ("bad.csv", test[:2] + [{"text": "where is my refund?", "category": "refund"}])):
        with open(dst / name, "w", newline="", encoding="utf-8") as f:
            w = csv.DictWriter(f, ["text", "category"])
            w.writeheader()
            w.writerows(part)
    return dst


@pytest.mark.timeout(1500)
def test_five_intents_from_one_csv_flow_through_every_stage(tmp_path):
    src = _five_intents(tmp_path / "intents")
    params = tiny_params("banking77", train_rows=200)
    params["prepare"].update(source=str(src), max_dev_rows=40)
    params["teacher"].update(model="random:tiny", by_task={"banking77": {"train": {
        "epochs": 1.0, "min_steps": 0, "eval_every_steps": 0}}})
    params["distill"].update(student_layers=[1], by_task={"banking77": {"train": {"epochs": 1.0, "min_steps": 0}}})
    params["prune"].update(head_fraction=0.5, by_task={"banking77": {"recover": True}})
    repo = copy_repo(tmp_path / "repo", params)
    dvc(repo, "repro", timeout=1200)

    card = json.loads((repo / "data/prepared/card.json").read_text())
    assert card["kind"] == "classification" and card["labels"] == INTENTS  # sorted, from the data
    assert card["splits"]["train"]["rows"] == 200 and card["splits"]["dev"]["rows"] == 40
    assert card["dev_carved"]["from"] == "train" and card["dev_carved"]["rows"] > 40  # 10%, then the slice
    assert set(card["splits"]["dev"]["label_counts"]) == set(INTENTS)
    teacher = json.loads((repo / "reports/teacher.json").read_text())
    cpu = next(r for r in teacher["records"] if r["target"] == "cpu")
    assert cpu["status"] == "ok" and cpu["task"] == "banking77" and cpu["primary_metric"] == "accuracy"
    assert 0 <= cpu["macro_f1"] <= 1 and cpu["macro_f1_ci95_low"] <= cpu["macro_f1"] <= cpu["macro_f1_ci95_high"]
    assert cpu["f1"] is None  # the binary F1 is for two-class pair tasks
    for model in ("teacher", "student", "student_pruned", "student_onnx", "student_ov_int8"):
        config = json.loads((repo / "models" / model / "config.json").read_text())
        assert list(config["id2label"].values()) == INTENTS and config["task_kind"] == "classification", model
    comparison = json.loads((repo / "reports/comparison.json").read_text())
    ok = [r for r in comparison["records"] if r["status"] == "ok" and r["artifact"] != "bert_base_reference"]
    assert len(ok) >= 10 and all(r["macro_f1"] is not None for r in ok if r["accuracy"] is not None)
    assert "macro-F1" in (repo / "reports/comparison.md").read_text()
    bench = json.loads((repo / "reports/benchmark.json").read_text())
    ref = next(r for r in bench["records"] if r["artifact"] == "bert_base_reference" and r["target"] == "cpu")
    assert ref["status"] == "ok"  # the reference got a 5-label head
    selection = json.loads((repo / "reports/selection.json").read_text())
    assert selection["reasons"] and selection["teacher_macro_f1"] == cpu["macro_f1"]

    artifact = "models/production" if selection["chosen"] else "models/student_onnx"
    out = subprocess.run([sys.executable, "-m", "compress.cli", "predict", "--artifact", artifact, "--format", "jsonl",
                          "my card still has not arrived", "I typed my PIN wrong three times"],
                         cwd=repo, env=env(), capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    results = [json.loads(x) for x in out.stdout.splitlines()]
    assert len(results) == 2 and all(r["label"] in INTENTS and set(r["probabilities"]) == set(INTENTS)
                                     for r in results)
    ev = subprocess.run([sys.executable, "-m", "compress.cli", "evaluate", "--artifact", artifact, "--data", str(src),
                         "--split", "test", "--file", "test.csv"], cwd=repo, env=env(), capture_output=True,
                        text=True, timeout=300)
    assert ev.returncode == 0, ev.stderr[-2000:]
    res = json.loads(ev.stdout)
    assert res["rows"] == 15 and 0 <= res["accuracy"] <= 1 and 0 <= res["macro_f1"] <= 1
    bad = subprocess.run([sys.executable, "-m", "compress.cli", "evaluate", "--artifact", artifact, "--data", str(src),
                          "--split", "test", "--file", "bad.csv"], cwd=repo, env=env(), capture_output=True,
                         text=True, timeout=300)
    assert bad.returncode == 2 and "bad.csv:4: label 'refund' is not one of the task's labels" in bad.stderr
