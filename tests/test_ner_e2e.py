"""End to end on a tagging task with its own tag set: `dvc repro` of every stage on a
slice of the real NCBI-disease files (tab-separated IOB, one entity type, tags read from
the data) in a temporary copy of the repository (a file of its own, so that `make
test`'s two workers each start on one end-to-end run)."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from compress.backends.torchao import int8_unavailable
from e2e import copy_repo, dvc, env, tiny_params

pytestmark = pytest.mark.slow


@pytest.mark.timeout(1500)
def test_a_custom_tag_set_flows_through_every_stage(tmp_path):
    """A tagger of the user's own entity type (B-Disease/I-Disease) through prepare →
    select on a slice of the real NCBI-disease files: a tiny random-weight tagger (2 x 64,
    4 heads) keeps it to minutes; what is checked is that every stage builds, measures and
    reports a tagger of that tag set on entity F1, not its quality."""
    params = tiny_params("ncbi_disease", train_rows=96)
    params["prepare"]["max_dev_rows"] = 32
    # 30 short epochs at a high rate: one epoch leaves the tiny tagger predicting O everywhere
    # (entity F1 0, which INC's relative goal refuses); this finds some Disease spans
    params["teacher"].update(model="random:tiny", by_task={"ncbi_disease": {"max_length": 64, "train": {
        "epochs": 30.0, "min_steps": 0, "lr": 5.0e-3, "eval_every_steps": 0}}})
    params["teacher_logits"]["by_task"] = {"ncbi_disease": {"max_length": 64}}
    params["distill"].update(student_layers=[1], by_task={"ncbi_disease": {"train": {
        "epochs": 30.0, "min_steps": 0, "lr": 5.0e-3}}})
    # 2 of the student's 4 heads; the preset's 3-epoch recovery replaced by the section's tiny one
    params["prune"].update(head_fraction=0.5, by_task={"ncbi_disease": {"recover": True}})
    repo = copy_repo(tmp_path / "repo", params)
    dvc(repo, "repro", timeout=1200)

    card = json.loads((repo / "data/prepared/card.json").read_text())
    assert card["kind"] == "token_classification" and card["splits"]["train"]["rows"] == 96
    assert card["splits"]["dev"]["rows"] == 32 and card["labels"] == ["O", "B-Disease", "I-Disease"]
    assert card["splits"]["train"]["tag_scheme"] == "IOB2"
    teacher = json.loads((repo / "reports/teacher.json").read_text())
    cpu = next(r for r in teacher["records"] if r["target"] == "cpu")
    assert cpu["status"] == "ok" and cpu["task"] == "ncbi_disease" and cpu["accuracy"] is None
    assert 0 <= cpu["f1"] <= 1 and 0 <= cpu["token_accuracy"] <= 1 and set(cpu["f1_per_type"]) == {"Disease"}
    assert cpu["f1_ci95_low"] <= cpu["f1"] <= cpu["f1_ci95_high"]
    import numpy as np

    cache = np.load(repo / "data/teacher_logits/logits.npy")
    meta = json.loads((repo / "data/teacher_logits/meta.json").read_text())
    assert cache.dtype == np.float16 and cache.shape == (meta["positions"], 3) and meta["rows"] == 96
    config = json.loads((repo / "models/student_onnx/config.json").read_text())
    assert config["id2label"] == {"0": "O", "1": "B-Disease", "2": "I-Disease"}  # every model carries the tags
    distill = json.loads((repo / "reports/distill.json").read_text())
    student = next(r for r in distill["records"] if r["artifact"] == "student" and r["target"] == "cpu")
    assert student["status"] == "ok" and student["f1"] is not None and 0 <= student["agreement_with_parent"] <= 1
    assert json.loads((repo / "reports/prune.json").read_text())["details"]["pruned"]["heads_removed"] == 2
    export = json.loads((repo / "reports/export_onnx.json").read_text())
    assert export["details"]["exports"]["student"]["parity"]["max_abs_diff"] <= 1e-4
    comparison = json.loads((repo / "reports/comparison.json").read_text())
    ok = {r["artifact"] for r in comparison["records"] if r["status"] == "ok" and r["target"] == "cpu"}
    assert {"teacher", "student", "student_pruned", "student_onnx", "student_onnx_int8", "student_ov",
            "student_ov_int8"} | ({"student_int8_torch"} if int8_unavailable() is None else set()) <= ok
    assert all(r["f1"] is not None for r in comparison["records"]
               if r["status"] == "ok" and r["artifact"] in ok and r.get("accuracy") is None
               and r["artifact"] != "bert_base_reference")
    assert "entity F1" in (repo / "reports/comparison.md").read_text()
    dvc(repo, "plots", "show", "-o", str(tmp_path / "plots"))  # curves and plots of a tagger's columns
    assert (tmp_path / "plots" / "index.html").is_file()
    selection = json.loads((repo / "reports/selection.json").read_text())
    assert selection["reasons"] and selection["teacher_f1"] == cpu["f1"]
    if selection["chosen"]:  # `compress predict` runs the promoted tagger on raw text
        out = subprocess.run([sys.executable, "-m", "compress.cli", "predict", "--format", "jsonl",
                              "Germline mutations of the APC gene cause familial adenomatous polyposis ."],
                             cwd=repo, env=env(), capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr[-2000:]
        (r,) = [json.loads(x) for x in out.stdout.splitlines()]
        assert r["text"].startswith("Germline") and {e["type"] for e in r["entities"]} <= {"Disease"}
