"""The recipe sweeps in benchmarks/: a setting wins over the task's preset, the pruning
sweep prunes with the pipeline's verb and names the setting best on validation."""
import json
import sys
from pathlib import Path

import pytest

from compress.core.config import build, section
from compress.data.prepare import Prepared
from compress.training.distill import CacheConfig, cache_teacher_outputs
from compress.training.models import save_classifier
from compress.training.prune import PruneConfig
from conftest import tiny_model

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

PARAMS = {"prepare": {"task": "t", "by_task": {"t": {}}},
          "prune": {"importance_rows": 100, "recover": False,
                    "by_task": {"t": {"importance_rows": 200, "recover": True}}}}


def test_section_override_wins_over_the_preset_which_wins_over_the_base():
    assert section(PARAMS, "prune", PruneConfig).importance_rows == 200
    cfg = section(PARAMS, "prune", PruneConfig, {"importance_rows": 8, "recovery": {"lr": 1e-4}})
    assert (cfg.importance_rows, cfg.recover, cfg.recovery.lr) == (8, True, 1e-4)
    with pytest.raises(Exception, match="importance_rowz"):  # a sweep's typo is refused like a params typo
        section(PARAMS, "prune", PruneConfig, {"importance_rowz": 8})


def test_prune_sweep_scores_each_setting_on_validation_and_dev(tmp_path, prepared_sst2):
    from benchmarks.prune_sweep import markdown, sweep

    prepared = Prepared.open(prepared_sst2)
    model, tok = tiny_model()
    save_classifier(model, tok, tmp_path / "student", ["negative", "positive"])
    cache_teacher_outputs(tmp_path / "student", prepared, tmp_path / "cache",
                          build(CacheConfig, {"max_length": 32, "threads": 1}, "teacher_logits"))
    params = {"prepare": {"task": "sst2"}, "prune": {"importance_rows": 16, "importance_batch_size": 8}}
    rec = sweep(prepared_sst2, tmp_path / "student", tmp_path / "cache", params,
                ["head_fraction=0.25,recover=false", "head_fraction=0.5,recover=true,recovery.epochs=null,recovery.max_steps=2,recovery.batch_size=4"],
                tmp_path / "work", eval_max_length=32)
    a, b = rec["results"]
    assert (a["heads_removed"], b["heads_removed"]) == (2, 4) and a["heads_total"] == 8
    assert "recovery_steps" not in a and b["recovery_steps"] == 2
    assert set(a["validation"]) >= {"accuracy"} and set(a["dev"]) >= {"accuracy"}
    best = max(rec["results"], key=lambda r: r["validation"]["accuracy"])  # first on a tie, as max() is
    assert rec["best_on_validation"] == best["setting"] and rec["chosen_on"] == "validation"
    assert "(best on validation)" in markdown(rec) and json.dumps(rec)


def test_teacher_sweep_prepares_the_task_as_the_pipeline_does_and_the_setting_wins(tmp_path):
    """MRPC's preset (pair kind, its columns) and the pipeline's validation split, with the
    setting over the teacher preset's 575 steps."""
    from benchmarks.teacher_sweep import main
    from conftest import SHARED_DATA

    src = SHARED_DATA / "mrpc"
    if not (src / "train.tsv").is_file():
        pytest.skip(f"{src} is not here (the shared data beside the checkout)")
    out = tmp_path / "sweep.json"
    assert main(["--task", "mrpc", "--source", str(src), "--model", "random:tiny", "--json", str(out),
                 "--setting", "max_steps=2,batch_size=4,max_length=32"]) == 0
    rec = json.loads(out.read_text())
    (row,) = rec["results"]
    assert rec["task"] == "mrpc" and rec["model"] == "random:tiny"
    assert row["steps"] == 2 and row["max_length"] == 32
    assert set(row["validation"]) >= {"accuracy", "f1"} and set(row["dev"]) >= {"accuracy", "f1"}


def test_a_setting_keeps_the_commas_inside_a_list_and_refuses_a_bare_key():
    from benchmarks.distill_levers import parse_setting
    from benchmarks.teacher_sweep import parse_setting as teacher_setting

    assert parse_setting("teacher_logits.augment.kinds=[swap,cross_pair],distill.loss.hidden_mse_weight=1") == {
        "teacher_logits": {"augment": {"kinds": ["swap", "cross_pair"]}}, "distill": {"loss": {"hidden_mse_weight": 1}}}
    assert teacher_setting("lr=5e-5,max_steps=575,seed=3") == {"lr": 5e-5, "max_steps": 575, "seed": 3}
    assert teacher_setting("") == {}
    with pytest.raises(ValueError, match="'max_steps' is not key=value"):
        parse_setting("distill.train.lr=1e-4,max_steps")


def test_distill_levers_score_each_student_and_train_the_control_once_per_budget(tmp_path, prepared_sst2):
    """Two settings with one budget (the loss term differs) share one control; a third with a
    longer budget trains its own; the three share one teacher-logits cache, a fourth with
    another cache length builds its own; the best is named on validation, dev beside it."""
    from benchmarks.distill_levers import levers, markdown

    model, tok = tiny_model()
    save_classifier(model, tok, tmp_path / "teacher", ["negative", "positive"])
    params = {"prepare": {"task": "sst2"}, "teacher_logits": {"max_length": 32, "threads": 1},
              "distill": {"student_layers": [0], "train": {"epochs": None, "max_steps": 2, "batch_size": 4,
                                                           "eval_every_steps": 0, "threads": 1}}}
    rec = levers(prepared_sst2, tmp_path / "teacher", params,
                 ["", "distill.loss.hidden_mse_weight=1", "distill.train.max_steps=3",
                  "teacher_logits.max_length=16"], tmp_path / "work")
    a, b, c, d = rec["results"]
    assert (a["setting"], a["steps"], c["steps"]) == ("(params.yaml)", 2, 3)
    assert b["intermediate_terms"] != "off" and a["intermediate_terms"] == "off"
    assert a["control"] == b["control"] and b["control"]["setting"] == "(params.yaml)"
    assert c["control"]["setting"] == "distill.train.max_steps=3"
    # one teacher pass serves all three (only the distill section differs); a new cache
    # config gets its own (below)
    assert [r["cache_from"] for r in rec["results"]] == ["(params.yaml)"] * 3 + [d["setting"]]
    assert not (tmp_path / "work" / "1" / "cache").exists() and b["cache_s"] == 0.0
    assert (tmp_path / "work" / "3" / "cache").is_dir() and d["transfer_rows"] == a["transfer_rows"]
    assert set(a["student"]["validation"]) >= {"accuracy"} and set(a["student"]["dev"]) >= {"accuracy"}
    best = max(rec["results"], key=lambda r: r["student"]["validation"]["accuracy"])
    assert rec["best_on_validation"] == best["setting"] and rec["chosen_on"] == "validation"
    table = markdown(rec)
    assert "(best on validation)" in table and table.count("\n| `") == 4
    assert table.count("| shared ((params.yaml)) |") == 2
