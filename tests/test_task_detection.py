"""Every artifact knows its task: save_classifier records it in config.json
(`finetuning_task`), derived formats keep it, promoted artifacts carry it in artifact.json,
older directories are recognised by their label names; `compress evaluate` and
`compress predict` then need no --task, and a --task that contradicts the artifact is refused."""
import json

import pytest

from compress.cli import main
from compress.errors import UserError
from compress.models import save_classifier
from compress.predict import detect_task, task_of
from conftest import tiny_model, write_tsv

MRPC_LABELS = ["not_equivalent", "equivalent"]
MRPC_HEADER = ["Quality", "#1 ID", "#2 ID", "#1 String", "#2 String"]


@pytest.fixture
def mrpc_model_dir(tmp_path):
    model, tok = tiny_model()
    save_classifier(model, tok, tmp_path / "mrpc_model", MRPC_LABELS, task="mrpc")
    return tmp_path / "mrpc_model"


@pytest.fixture
def mrpc_dev(tmp_path):
    rows = [[str(i % 2), str(i), str(i + 100), f"the {w} was fine , he said .", f"he said the {w} was fine"]
            for i, w in enumerate(["cat", "dog", "car", "plan", "deal"])]
    write_tsv(tmp_path / "mrpc_data" / "dev.tsv", MRPC_HEADER, rows, bom=True)
    return tmp_path / "mrpc_data"


def _save(tmp_path, name, labels, task=None):
    model, tok = tiny_model()
    save_classifier(model, tok, tmp_path / name, labels, task=task)
    return tmp_path / name


def test_saved_task_is_in_config_and_detected(mrpc_model_dir):
    assert json.loads((mrpc_model_dir / "config.json").read_text())["finetuning_task"] == "mrpc"
    assert task_of(mrpc_model_dir) == "mrpc"
    assert detect_task(mrpc_model_dir) == ("mrpc", "config.json finetuning_task")


def test_save_refuses_an_unknown_task(tmp_path):
    model, tok = tiny_model()
    with pytest.raises(UserError, match="unknown task 'qqp'"):
        save_classifier(model, tok, tmp_path / "m", MRPC_LABELS, task="qqp")
    assert not (tmp_path / "m").exists()


def test_evaluate_and_predict_need_no_task(mrpc_model_dir, mrpc_dev, capsys):
    assert main(["evaluate", "--data", str(mrpc_dev), "--artifact", str(mrpc_model_dir), "--threads", "1"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["rows"] == 5 and "f1" in res and "accuracy" in res
    assert main(["predict", "--artifact", str(mrpc_model_dir), "--format", "jsonl", "--threads", "1",
                 "a cat sat\tthe cat sat"]) == 0
    (r,) = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert r["text"] == ["a cat sat", "the cat sat"] and set(r["probabilities"]) == set(MRPC_LABELS)
    assert main(["predict", "--artifact", str(mrpc_model_dir), "one sentence only"]) == 2  # a pair task
    assert "this task takes sentence pairs" in capsys.readouterr().err


def test_an_explicit_task_agreeing_with_the_artifact_is_accepted(mrpc_model_dir, mrpc_dev, capsys):
    assert main(["evaluate", "--data", str(mrpc_dev), "--artifact", str(mrpc_model_dir), "--task", "mrpc",
                 "--threads", "1"]) == 0
    assert json.loads(capsys.readouterr().out)["rows"] == 5


def test_an_explicit_task_contradicting_the_artifact_is_refused(mrpc_model_dir, sst2_dir, capsys):
    assert main(["evaluate", "--data", str(sst2_dir), "--artifact", str(mrpc_model_dir), "--task", "sst2"]) == 2
    err = capsys.readouterr().err
    assert str(mrpc_model_dir) in err and "--task sst2 contradicts the artifact's task 'mrpc'" in err


@pytest.mark.parametrize("labels, task", [
    (MRPC_LABELS, "mrpc"),
    (["negative", "positive"], "sst2"),
    (["NEGATIVE", "POSITIVE"], "sst2"),  # as some Hub checkpoints spell them
])
def test_older_artifacts_are_recognised_by_their_label_names(tmp_path, labels, task):
    d = _save(tmp_path, "old", labels)
    assert "finetuning_task" not in json.loads((d / "config.json").read_text())
    assert detect_task(d) == (task, "config.json label names")


def test_label_order_matters_and_unknown_finetuning_task_falls_through(tmp_path):
    d = _save(tmp_path, "swapped", ["positive", "negative"])
    assert detect_task(d) is None  # class ids would be read backwards: not sst2
    cfg = json.loads((d / "config.json").read_text())
    cfg.update(finetuning_task="mnli", id2label={"0": "not_equivalent", "1": "equivalent"})
    (d / "config.json").write_text(json.dumps(cfg))
    assert detect_task(d) == ("mrpc", "config.json label names")
    cfg["finetuning_task"] = "SST-2"
    (d / "config.json").write_text(json.dumps(cfg))
    assert detect_task(d) == ("sst2", "config.json finetuning_task")


def test_unknown_labels_need_an_explicit_task(tmp_path, mrpc_dev, capsys):
    d = _save(tmp_path, "custom", ["LABEL_0", "LABEL_1"])
    with pytest.raises(UserError, match=r"custom: the artifact does not record its task.*pass --task"):
        task_of(d)
    assert main(["evaluate", "--data", str(mrpc_dev), "--artifact", str(d)]) == 2
    assert "pass --task" in capsys.readouterr().err
    assert main(["evaluate", "--data", str(mrpc_dev), "--artifact", str(d), "--task", "mrpc",
                 "--threads", "1"]) == 0
    assert json.loads(capsys.readouterr().out)["rows"] == 5
    with pytest.raises(UserError, match="pass --task"):
        task_of(tmp_path / "no_config_here")


def test_artifact_json_task_comes_first(tmp_path, production):
    assert detect_task(production) == ("sst2", "artifact.json")
    d = tmp_path / "promoted"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"finetuning_task": "sst2", "id2label": {"0": "negative"}}))
    (d / "artifact.json").write_text(json.dumps({"task": "mrpc"}))
    assert task_of(d) == "mrpc"
    (d / "artifact.json").write_text(json.dumps({"task": "cola"}))
    with pytest.raises(UserError, match="unknown task 'cola'"):
        task_of(d)


def test_derived_artifacts_keep_the_task(mrpc_model_dir, mrpc_dir, mrpc_dev, tmp_path, capsys):
    """ONNX export, ONNX Runtime INT8 and torchao INT8 carry the parent's config.json;
    OpenVINO, INC and TensorRT copy or re-save it the same way."""
    from compress.data import Prepared, PrepareConfig, prepare
    from compress.onnx_export import ExportConfig, export_onnx
    from compress.onnx_runtime import OrtQuantConfig, quantize_onnx
    from compress.quantize import QuantizeConfig, quantize_checkpoint

    prepare(PrepareConfig(task="mrpc", source=str(mrpc_dir)), tmp_path / "prepared")
    export_onnx(mrpc_model_dir, tmp_path / "onnx", ExportConfig(parity_shapes=[[1, 8], [2, 24]], threads=1),
                Prepared.open(tmp_path / "prepared"), plain_out_dir=tmp_path / "plain")
    quantize_onnx(tmp_path / "onnx", tmp_path / "onnx_int8", OrtQuantConfig())
    quantize_checkpoint(mrpc_model_dir, tmp_path / "torchao", QuantizeConfig())
    for name in ("onnx", "plain", "onnx_int8", "torchao"):
        assert detect_task(tmp_path / name) == ("mrpc", "config.json finetuning_task"), name
    assert main(["evaluate", "--data", str(mrpc_dev), "--artifact", str(tmp_path / "onnx_int8"),
                 "--threads", "1"]) == 0
    assert json.loads(capsys.readouterr().out)["rows"] == 5
