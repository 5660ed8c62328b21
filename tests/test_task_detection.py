"""Every artifact knows its task: save_classifier records it in config.json
(`finetuning_task`, `task_kind`, `task_labels`, `id2label`), derived formats keep it, a
model saved without one is read from its head and labels; `compress evaluate` and
`compress predict` then need no --task, and a --task that contradicts the artifact is refused."""
import json

import pytest

from compress.cli import main
from compress.core.errors import UserError
from compress.training.models import save_classifier
from compress.predict import detect_task, task_of
from conftest import MRPC_NAMES, SST2_NAMES, make_task, preset, tiny_model, write_tsv

MRPC_LABELS = list(MRPC_NAMES)
MRPC = make_task("mrpc", "pair_classification", ("0", "1"), MRPC_NAMES)
MRPC_HEADER = ["Quality", "#1 ID", "#2 ID", "#1 String", "#2 String"]


@pytest.fixture
def mrpc_model_dir(tmp_path):
    model, tok = tiny_model()
    save_classifier(model, tok, tmp_path / "mrpc_model", task=MRPC)
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
    cfg = json.loads((mrpc_model_dir / "config.json").read_text())
    assert cfg["finetuning_task"] == "mrpc" and cfg["task_kind"] == "pair_classification"
    assert cfg["task_labels"] == ["0", "1"] and cfg["id2label"] == {"0": "not_equivalent", "1": "equivalent"}
    assert task_of(mrpc_model_dir) == MRPC
    assert detect_task(mrpc_model_dir) == (MRPC, "config.json")


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


def test_a_model_saved_without_a_task_is_read_from_its_head_and_labels(tmp_path):
    """A user's own fine-tuned checkpoint: the head says the kind, id2label the labels."""
    d = _save(tmp_path, "old", ["negative", "positive"])
    task, where = detect_task(d)
    assert where == "config.json" and task.kind == "classification" and task.labels == ("negative", "positive")
    from compress.training.models import load_classifier

    model, tok, _ = load_classifier("random:tiny", 3, seed=0, kind="token")
    save_classifier(model, tok, tmp_path / "tagger", ["O", "B-Drug", "I-Drug"])
    assert task_of(tmp_path / "tagger").kind == "token_classification"


def test_no_config_is_refused(tmp_path):
    with pytest.raises(UserError, match="no_config_here: the artifact does not record its task"):
        task_of(tmp_path / "no_config_here")


def test_artifact_json_task_comes_first(tmp_path, production):
    assert detect_task(production) == (make_task(names=SST2_NAMES), "config.json")
    d = tmp_path / "promoted"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"finetuning_task": "sst2", "id2label": {"0": "negative"}}))
    (d / "artifact.json").write_text(json.dumps({"task": MRPC.to_dict()}))
    assert task_of(d) == MRPC
    (d / "artifact.json").write_text(json.dumps({"task": {"name": "x", "kind": "regression", "labels": []}}))
    with pytest.raises(UserError, match="unknown task kind 'regression'"):
        task_of(d)


def test_derived_artifacts_keep_the_task(mrpc_model_dir, mrpc_dir, mrpc_dev, tmp_path, capsys):
    """ONNX export, ONNX Runtime INT8 and torchao INT8 carry the parent's config.json;
    OpenVINO, INC and TensorRT copy or re-save it the same way."""
    from compress.data.prepare import Prepared, prepare
    from compress.backends.onnx_export import ExportConfig, export_onnx
    from compress.backends.onnx_runtime import OrtQuantConfig, quantize_onnx
    from compress.backends.torchao import QuantizeConfig, quantize_checkpoint

    prepare(preset("mrpc", mrpc_dir), tmp_path / "prepared")
    export_onnx(mrpc_model_dir, tmp_path / "onnx", ExportConfig(parity_shapes=[[1, 8], [2, 24]], threads=1),
                Prepared.open(tmp_path / "prepared"), plain_out_dir=tmp_path / "plain")
    quantize_onnx(tmp_path / "onnx", tmp_path / "onnx_int8", OrtQuantConfig())
    quantize_checkpoint(mrpc_model_dir, tmp_path / "torchao", QuantizeConfig())
    for name in ("onnx", "plain", "onnx_int8", "torchao"):
        assert detect_task(tmp_path / name) == (MRPC, "config.json"), name
    assert main(["evaluate", "--data", str(mrpc_dev), "--artifact", str(tmp_path / "onnx_int8"),
                 "--threads", "1"]) == 0
    assert json.loads(capsys.readouterr().out)["rows"] == 5
