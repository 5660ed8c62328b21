"""The majority-class baseline row (compress.measure.baseline): the dev metrics of always
predicting the most frequent training label, for a classifier and a tagger; in the
comparison as a yardstick that select never picks."""
from __future__ import annotations

from pathlib import Path

from conftest import tiny_model


def test_classifier_baseline_predicts_the_majority_training_label(prepared_sst2):
    from compress.data.prepare import Prepared
    from compress.measure.baseline import BASELINE_NAME, baseline_records

    _, tok = tiny_model()
    dev = Prepared.open(prepared_sst2).split("dev")
    (rec,) = baseline_records(prepared_sst2, tok, ["cpu"])
    # train is balanced (16 of each): the tie goes to id 0, "negative"; dev is 4 of 8 negative
    assert rec["artifact"] == BASELINE_NAME and rec["status"] == "ok" and "'negative'" in rec["reason"]
    assert rec["accuracy"] == sum(ex.label == 0 for ex in dev) / len(dev) == 0.5
    # macro-F1: "negative" 2/3 (precision 1/2, recall 1), "positive" 0 (never predicted)
    assert abs(rec["macro_f1"] - 1 / 3) < 1e-6
    assert rec["latency_ms_p50"] is None and rec["size_mb"] is None and rec["eval_rows"] == len(dev)
    assert rec["accuracy_ci95_low"] <= rec["accuracy"] <= rec["accuracy_ci95_high"]
    # the validation split (dev's rows 2..7 here: 2 of 6 negative) gets the same constant prediction
    val = Prepared.open(prepared_sst2).split("validation")
    assert rec["validation_rows"] == len(val) == 6 and len(rec["validation_sha256"]) == 64
    assert rec["validation_metrics"]["accuracy"] == sum(ex.label == 0 for ex in val) / len(val)
    assert rec["validation_metrics"]["accuracy_ci95_low"] <= rec["validation_metrics"]["accuracy"]


def test_baseline_without_a_validation_split_has_no_validation_figures(prepared_sst2):
    from compress.measure.baseline import baseline_records
    from conftest import drop_validation

    _, tok = tiny_model()
    (rec,) = baseline_records(drop_validation(prepared_sst2), tok, ["cpu"])
    assert rec["accuracy"] == 0.5 and rec["validation_metrics"] is None and rec["validation_rows"] is None


def test_tagger_baseline_tags_every_word_o(conll_prepared, tmp_path):
    import shutil

    from compress.data.prepare import Prepared
    from compress.measure.baseline import baseline_records
    from conftest import add_validation

    _, tok = tiny_model()
    conll_prepared = add_validation(Path(shutil.copytree(conll_prepared, tmp_path / "prepared")))
    dev = Prepared.open(conll_prepared).split("dev")
    tags = Prepared.open(conll_prepared).task.labels
    words = [t for s in dev for t in s.tags]
    cpu, gpu = baseline_records(conll_prepared, tok, ["cpu", "gpu"])
    assert "'O'" in cpu["reason"] and cpu["f1"] == 0.0 and cpu["primary_metric"] == "f1"
    assert cpu["token_accuracy"] == round(sum(tags[t] == "O" for t in words) / len(words), 6)
    assert gpu["target"] == "gpu" and gpu["f1"] == cpu["f1"]
    assert cpu["validation_metrics"]["f1"] == 0.0 and "token_accuracy" in cpu["validation_metrics"]


def test_baseline_is_shown_last_and_never_selected(prepared_sst2):
    from compress.measure.baseline import baseline_records
    from compress.report import comparison as C
    from compress.report.select import SelectPolicy, select

    _, tok = tiny_model()
    teacher = {"artifact": "teacher", "target": "cpu", "status": "ok", "reason": None, "format": "pytorch",
               "precision": "fp32", "task": "sst2", "accuracy": 0.9, "validation_metrics": {"accuracy": 0.9},
               "latency_ms_p50": 5.0, "size_mb": 10.0,
               "real_latency_ms_p50": 2.0, "real_latency_ms_p99": 3.0,
               "points": []}
    bench = {"stage": "benchmark", "records": [teacher, *baseline_records(prepared_sst2, tok, ["cpu"])],
             "details": {"baseline": "majority_baseline"}, "environment": {}}
    comp = C.build([{"stage": "teacher", "records": [teacher], "environment": {}}], bench)
    rows = C.table_rows(comp, "cpu")
    assert [r["artifact"] for r in rows] == ["teacher", "majority_baseline"] and rows[1]["baseline"]
    assert "| majority_baseline |" in C.render_markdown(comp)
    assert C.pareto_front(rows) == ["teacher"]
    sel = select(comp, SelectPolicy(exclude=[]))
    assert sel["chosen"] == "teacher"
    assert {"artifact": "majority_baseline", "rule": "baseline",
            "detail": "the majority-class yardstick, never a candidate"} in sel["rejected"]
