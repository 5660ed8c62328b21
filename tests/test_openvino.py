"""OpenVINO IRs: FP32 parity with ONNX Runtime (and the gate that stops a bad IR), INT8 by
NNCF with int8 embedding tables, calibration on training rows only, the accuracy check and accuracy-control
on validation rows, the runner inside the measurement harness, the gpu/bf16 skip reasons, and a
tagger (per-token logits, entity-F1 validation).

One tiny uneven-head pruned BERT (the harder of the two students to convert) is exported
with the project's own export code and built into IRs once per module."""
from __future__ import annotations

import json
import shutil
from dataclasses import replace

import numpy as np
import pytest
import torch

from compress.backends import openvino_check as oc
from compress.backends import openvino_ir as oi
from compress.core.config import ConfigError, build
from compress.data.prepare import Prepared, prepare
from compress.training.models import save_classifier
from compress.backends.onnx_export import ExportConfig, count_initializer_params, cpu_session, export_onnx, run_session
from compress.backends.openvino_ir import (OpenVinoConfig, OpenVinoParityError, build_openvino, convert_onnx,
                                  embedding_tables, quantize_embedding_tables, quantize_openvino)
from compress.backends.openvino_check import quantization_slices
from compress.backends.openvino_runner import OpenVinoIrError, OpenVinoRunner, compile_config, gpu_unavailable, parity_check
from compress.backends.base import Artifact, load_runner, skip_reason
from conftest import CONLL_TAGS, preset, tiny_model, write_tsv

ov = pytest.importorskip("openvino")
pytest.importorskip("nncf")

TRAIN = [[f"{s} number {i}", str(i % 2)] for i, s in enumerate(
    ["a gorgeous , witty movie", "the movie is a disaster", "charming and hilarious", "dull and lifeless",
     "one of the best films", "i hated every minute", "a warm , moving story", "boring and far too long"] * 5)]
DEV = [["an unexpected delight from start to end", "1"], ["tedious , predictable , forgettable", "0"],
       ["sharp writing and fine acting", "1"], ["a mess of a screenplay", "0"]] * 3
# accuracy_control auto, the default: whether plain PTQ of this random tiny model loses more
# than 1% on 16 rows depends on the CPU's int8 kernels (it did on CI's Xeon and on an AVX2
# EPYC, where the PTQ IR alone agreed with FP32 on no row), so the tests accept either route
# and check that the recorded route is the one that ran.
CFG = OpenVinoConfig(calibration_rows=16, validation_rows=16, parity_shapes=[[1, 8], [3, 24], [2, 40]])
ROUTES = {"ptq": "nncf.quantize", "accuracy_control": "nncf.quantize_with_accuracy_control"}


def ragged(rows: int, seq: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    ids = rng.integers(1000, 5000, (rows, seq)).astype(np.int64)
    ids[:, 0] = 101
    mask = np.ones_like(ids)
    for i in range(rows):
        keep = seq - i % max(1, seq // 2)
        ids[i, keep:], mask[i, keep:] = 0, 0
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}


def label_with_predictions(model, tok, prepared) -> None:
    """Rewrite the validation rows' labels as the float model's own predictions. A random
    model scores chance on real labels, so an accuracy check on them cannot see an INT8 IR
    that flips every prediction (on an AVX2 EPYC plain PTQ of this model agreed with FP32
    on no row and still scored higher on the real labels); on these labels accuracy is
    agreement with FP32, which is what the check is for."""
    from compress.data.prepare import json_line
    from compress.data.tokens import encode
    from compress.training.train import predict_logits

    rows = prepared.validation()
    preds = predict_logits(model, encode(tok, rows, 128)).argmax(-1)
    (prepared.root / "validation.jsonl").write_text(
        "".join(json_line(replace(r, label=int(p)), prepared.task) for r, p in zip(rows, preds)))


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """Export (project code) and build the FP32 and INT8 IRs once. The INT8 IR is built from
    a prepared directory whose dev split is not JSON: reading it would raise, so a build
    that finishes never touched a dev row."""
    root = tmp_path_factory.mktemp("ov")
    write_tsv(root / "sst2/train.tsv", ["sentence", "label"], TRAIN)
    write_tsv(root / "sst2/dev.tsv", ["sentence", "label"], DEV)
    # half the 40 training rows carved as validation: 20 calibrate, 20 check accuracy
    prepare(preset("sst2", str(root / "sst2"), validation_fraction=0.5), root / "prepared")
    model, tok = tiny_model()
    model.bert.prune_heads({0: [0], 1: [1, 2]})  # uneven heads per layer, like the pruned student
    with torch.no_grad():  # logits of a useful size, so differences are meaningful
        model.bert.pooler.dense.weight.normal_(0.0, 0.3)
        model.classifier.weight.normal_(0.0, 2.0)
    save_classifier(model, tok, root / "student", ["negative", "positive"])
    prepared = Prepared.open(root / "prepared")
    label_with_predictions(model, tok, prepared)
    export_onnx(root / "student", root / "student_onnx", ExportConfig(parity_shapes=[[1, 8]]), prepared,
                plain_out_dir=root / "plain")
    poisoned = root / "poisoned"
    shutil.copytree(root / "prepared", poisoned)
    (poisoned / "dev.jsonl").write_text("{dev rows must never be read here\n")
    from compress.backends.onnx_export import parity_batches
    batches = parity_batches(prepared, tok, CFG.parity_shapes)
    summary = build_openvino(root / "plain", root / "ov", root / "ov_int8", poisoned, CFG, batches)
    return root, summary, batches


# --- config ------------------------------------------------------------------------------

def test_config_defaults_and_params_section():
    import yaml

    from conftest import REPO

    assert build(OpenVinoConfig, {}, "openvino") == OpenVinoConfig()
    cfg = build(OpenVinoConfig, yaml.safe_load((REPO / "params.yaml").read_text())["openvino"], "openvino")
    assert cfg.quantize_embeddings and cfg.parity_atol == 1e-4 and cfg.accuracy_control_max_drop == 0.01


@pytest.mark.parametrize("data, field", [
    ({"calibration_rows": 0}, "calibration_rows"),
    ({"validation_rows": 0}, "validation_rows"),
    ({"preset": "fast"}, "preset"),
    ({"model_type": "cnn"}, "model_type"),
    ({"accuracy_control": "sometimes"}, "accuracy_control"),
    ({"accuracy_control_max_drop": 0.0}, "accuracy_control_max_drop"),
    ({"accuracy_control_max_drop": 1.5}, "accuracy_control_max_drop"),
    ({"int8_inference_precision": "fp16"}, "int8_inference_precision"),
    ({"parity_atol": 0.0}, "parity_atol"),
    ({"parity_shapes": [[1]]}, "parity_shapes"),
    ({"quantize_embeddings": "yes"}, "quantize_embeddings"),
    ({"threads": 0}, "threads"),
    ({"calibration_row": 10}, "calibration_rows"),  # a typo names the nearest key
])
def test_config_rejects_illegal_values(data, field):
    with pytest.raises(ConfigError, match=field):
        build(OpenVinoConfig, data, "openvino")


# --- FP32 IR: parity and the gate --------------------------------------------------------

def test_fp32_runner_matches_onnx_runtime(built):
    root, summary, _ = built
    fp32 = summary["fp32"]
    assert fp32["parity"]["fp32"]["max_abs_diff"] <= CFG.parity_atol
    assert fp32["parity"]["fp32"]["argmax_agreement"] == 1.0 and fp32["parity"]["fp32"]["rows"] == 6
    assert set(fp32["parity"]["fp32"]["per_shape"]) == {"b1_s8", "b3_s24", "b2_s40"}
    runner = load_runner(Artifact("student_ov", root / "ov", "openvino", "fp32"), "cpu", 2)
    assert runner.backend == "openvino-cpu-f32"  # explicit: bf16 is the plugin default on bf16 CPUs
    session = cpu_session(root / "plain/model.onnx", 2)
    for rows, seq in ((1, 8), (4, 33), (2, 70)):  # shapes the IR never saw, padding inside the batch
        batch = ragged(rows, seq, seed=seq)
        ref, got = run_session(session, batch), runner(batch)
        assert got.dtype == np.float32 and got.shape == (rows, 2)
        assert np.abs(got - ref).max() <= 1e-4 and np.abs(ref).max() > 0.05  # logits are not all ~0
    assert runner.num_labels == 2 and runner.num_params == count_initializer_params(root / "plain/model.onnx")
    meta = json.loads((root / "ov/openvino.json").read_text())
    assert meta["runtime"]["fp32"]["inference_precision"] == "f32" and meta["precision"] == "fp32"
    assert {p.name for p in (root / "ov").iterdir()} >= {"model.xml", "model.bin", "config.json", "tokenizer.json"}
    assert not list((root / "ov").glob("*.onnx"))


def _perturbed_convert(monkeypatch, shift: float):
    """ov.convert_model, with `shift` added to the logits: an IR that no longer matches."""
    real = ov.convert_model

    def convert(path, *a, **k):
        model = real(path, *a, **k)
        (result,) = model.get_results()
        shifted = ov.opset13.add(result.input_value(0), ov.opset13.constant(np.float32(shift)))
        result.input(0).replace_source_output(shifted.output(0))
        return model

    monkeypatch.setattr(ov, "convert_model", convert)


def test_fp32_parity_gate_stops_a_wrong_ir(built, tmp_path, monkeypatch):
    root, _, batches = built
    _perturbed_convert(monkeypatch, 0.01)
    with pytest.raises(OpenVinoParityError, match=r"bad_ov/model\.xml.*parity_atol = 0\.0001.*nothing was written"):
        convert_onnx(root / "plain", tmp_path / "bad_ov", CFG, batches)
    assert not (tmp_path / "bad_ov").exists() and not list(tmp_path.glob("bad_ov.tmp-*"))
    # The same IR with a tolerance above the shift is accepted, and its difference recorded.
    ok = convert_onnx(root / "plain", tmp_path / "loose_ov", OpenVinoConfig(parity_atol=0.05), batches)
    assert 0.005 < ok["parity"]["fp32"]["max_abs_diff"] < 0.02
    assert (tmp_path / "loose_ov/model.xml").is_file()


def test_parity_check_measures_a_perturbed_ir(built, tmp_path, monkeypatch):
    root, _, batches = built
    _perturbed_convert(monkeypatch, 0.5)
    convert_onnx(root / "plain", tmp_path / "shifted", CFG)  # no parity batches: no gate
    report = parity_check(tmp_path / "shifted", "fp32", root / "plain/model.onnx", batches, 2)
    assert report["max_abs_diff"] == pytest.approx(0.5, abs=1e-3)


@pytest.mark.skipif(oi._bf16_ok() is False, reason="no native bf16 on this CPU")
def test_bf16_parity_is_recorded_not_gated(built):
    _, summary, _ = built
    bf16 = summary["fp32"]["parity"]["bf16"]
    assert 0 < bf16["max_abs_diff"] < 0.5 and bf16["backend"] == "openvino-cpu-bf16"


# --- INT8 --------------------------------------------------------------------------------

def test_int8_ir_has_int8_embeddings_and_is_small(built):
    root, summary, _ = built
    int8 = summary["int8"]
    tables = embedding_tables(ov.Core().read_model(str(root / "ov_int8/model.xml")))
    word = tables["/bert/embeddings/word_embeddings/Gather"]
    assert word == {"dtype": "i8", "shape": [30522, 64], "scale_shape": [30522, 1]}  # one scale per row
    assert all(t["dtype"] == "i8" for t in tables.values()) and len(tables) == 3
    fp32_tables = embedding_tables(ov.Core().read_model(str(root / "ov/model.xml")))
    assert fp32_tables["/bert/embeddings/word_embeddings/Gather"]["dtype"] == "f32"
    fp32_bytes = (root / "ov/model.bin").stat().st_size
    assert (root / "ov_int8/model.bin").stat().st_size < 0.3 * fp32_bytes
    assert int8["embedding_route"] == "nncf int8 per-row" and int8["approach"] in ROUTES
    # the controlled route ran exactly when PTQ alone lost more than the allowed drop
    assert ("ptq_validation" in int8) == (int8["approach"] == "accuracy_control")
    # every MatMul with a constant weight reads int8 weights
    model = ov.Core().read_model(str(root / "ov_int8/model.xml"))
    weights = [oi._const_source(op.input_value(1))[0] for op in model.get_ordered_ops()
               if op.get_type_name() == "MatMul"]
    weights = [w for w in weights if w is not None]
    int8_weights = [w.get_output_element_type(0).get_type_name() == "i8" for w in weights]
    # PTQ: every one; accuracy control returns the layers that cost the most accuracy to float
    assert weights and (all(int8_weights) if int8["approach"] == "ptq" else any(int8_weights))


def test_int8_runner_agrees_with_onnx_runtime(built):
    root, summary, _ = built
    parity = summary["int8"]["parity"]["int8"]
    assert parity["argmax_agreement"] >= 0.8 and parity["max_abs_diff"] < 1.0
    runner = OpenVinoRunner(Artifact("student_ov_int8", root / "ov_int8", "openvino", "int8"), "cpu", 2)
    meta = json.loads((root / "ov_int8/openvino.json").read_text())
    assert runner.backend == f"openvino-cpu-{meta['runtime']['int8']['inference_precision']}"
    batch = ragged(4, 32)
    ref = run_session(cpu_session(root / "plain/model.onnx", 2), batch)
    assert np.abs(runner(batch) - ref).max() < 1.0
    assert meta["route"] == ROUTES[summary["int8"]["approach"]] and meta["num_params"] == runner.num_params


def test_calibration_is_training_rows_and_the_accuracy_check_validation_rows(built):
    root, summary, _ = built
    info = summary["int8"]["calibration"]
    assert info == {"split": "train", "train_rows": 20, "calibration_rows": 16, "validation_split": "validation",
                    "validation_rows": 16, "seed": 0}
    # (the module's INT8 build read a prepared dir whose dev.jsonl is not JSON, and finished)
    from compress.training.models import load_tokenizer

    tok = load_tokenizer(root / "plain")
    data = quantization_slices(root / "poisoned", tok, CFG)
    calib, val = data.calibration, data.validation
    ids = lambda batch: tuple(batch["input_ids"][0].tolist())  # noqa: E731
    prepared = Prepared.open(root / "poisoned")
    train = {tuple(tok(e.text_a)["input_ids"]): e.label for e in prepared.split("train")}
    validation = {tuple(tok(e.text_a)["input_ids"]): e.label for e in prepared.validation()}
    dev = {tuple(tok(t)["input_ids"]) for t, _ in DEV}
    calib_rows, val_rows = [ids(b) for b in calib], [ids(v["inputs"]) for v in val]
    assert all(r in train for r in calib_rows) and all(r in validation for r in val_rows)
    assert not (set(calib_rows) | set(val_rows)) & dev and not set(calib_rows) & set(val_rows)
    assert [v["gold"].tolist() for v in val] == [[validation[r]] for r in val_rows]
    with pytest.raises(Exception):
        Prepared.open(root / "poisoned").split("dev")  # the poison is real


def test_float_embedding_option_keeps_tables_float(built, tmp_path):
    root, summary, _ = built
    from compress.training.models import load_tokenizer

    cfg = OpenVinoConfig(calibration_rows=8, validation_rows=8, quantize_embeddings=False)
    data = quantization_slices(root / "poisoned", load_tokenizer(root / "plain"), cfg)
    out = quantize_openvino(root / "ov", tmp_path / "float_emb", cfg, data)
    tables = embedding_tables(ov.Core().read_model(str(tmp_path / "float_emb/model.xml")))
    assert tables["/bert/embeddings/word_embeddings/Gather"]["dtype"] == "f32"
    assert out["embedding_route"].startswith("float") and out["size_mb"] > 3 * summary["int8"]["size_mb"]


def test_tables_nncf_leaves_float_are_quantized_per_row_by_us(built, tmp_path, monkeypatch):
    """An NNCF that does not touch Gather weights (simulated with an ignored scope): the
    INT8 IR still stores int8 tables, written by quantize_embedding_tables."""
    root, _, _ = built
    from dataclasses import replace

    from compress.training.models import load_tokenizer

    real = oi._quantize
    monkeypatch.setattr(oi, "_quantize", lambda model, calib, val, cfg, controlled: real(
        model, calib, val, replace(cfg, quantize_embeddings=False), controlled))
    cfg = OpenVinoConfig(calibration_rows=8, validation_rows=8)
    data = quantization_slices(root / "poisoned", load_tokenizer(root / "plain"), cfg)
    out = quantize_openvino(root / "ov", tmp_path / "own", cfg, data)
    assert out["embedding_route"].startswith("own int8 per-row")
    tables = embedding_tables(ov.Core().read_model(str(tmp_path / "own/model.xml")))
    assert all(t["dtype"] == "i8" and t["scale_shape"] == [t["shape"][0], 1] for t in tables.values())


def test_accuracy_control_takes_over_when_ptq_loses_accuracy(built, tmp_path, monkeypatch):
    """Plain PTQ scored as losing everything on the validation rows: the accuracy-controlled
    NNCF route runs on the same rows and is recorded as the approach."""
    root, _, _ = built
    from compress.training.models import load_tokenizer

    real_quantize, real_validate, calls, scored = oi._quantize, oi.validate, [], []

    def quantize(*args, controlled):
        calls.append(controlled)
        return real_quantize(*args, controlled=controlled)

    def validate(compiled, items):
        scored.append(1)
        acc, per_item = real_validate(compiled, items)
        return (0.0, [0.0] * len(per_item)) if len(scored) == 2 else (acc, per_item)  # 2nd: the PTQ IR

    monkeypatch.setattr(oi, "_quantize", quantize)
    monkeypatch.setattr(oi, "validate", validate)
    # f32 float parts: no float-parts check, so the 2nd validate call is the PTQ IR on any CPU
    cfg = OpenVinoConfig(calibration_rows=12, validation_rows=20, seed=3, int8_inference_precision="f32")
    data = quantization_slices(root / "poisoned", load_tokenizer(root / "plain"), cfg)
    out = quantize_openvino(root / "ov", tmp_path / "ac", cfg, data)
    assert calls == [False, True] and "float_parts" not in out
    assert out["ptq_validation"]["accuracy_int8"] == 0.0 and out["ptq_validation"]["relative_drop"] == 1.0
    assert out["approach"] == "accuracy_control" and out["validation"]["rows"] == 20
    meta = json.loads((tmp_path / "ac/openvino.json").read_text())
    assert meta["route"] == "nncf.quantize_with_accuracy_control" and meta["calibration"]["split"] == "train"


def _scored(correct: list[int]):
    """A classifier's Scored over len(correct) rows, gold 1 everywhere: 1 right, 0 wrong."""
    from compress.tasks.base import Task

    task = Task(name="t", kind="classification", labels=("0", "1"), label_names=("0", "1"))
    return oc.Scored([[1] for _ in correct], [[c] for c in correct], task)


def test_float_parts_choice():
    """auto keeps bf16 float parts while their drop is within the max drop at 95% confidence
    (paired bootstrap), or while f32 does no better; else f32."""
    n = 700
    parent = [1] * 612 + [0] * 88  # 87.4%
    # the AMX SST-2 case: 7 more rows wrong of 700 (1.1% relative): passed a point check
    # at 1% in one run, is not shown within it
    bf16_close = [1] * 605 + [0] * 95
    f32 = [1] * 617 + [0] * 83
    hint, rec = oi.choose_float_parts(_scored(parent), _scored(bf16_close), _scored(f32), 0.0115)
    assert rec["bf16_relative_drop"] < 0.0115 < rec["bf16_drop_upper_bound"]  # within at the point, not the bound
    assert hint == "f32" == rec["chosen"] and "upper 95% bound" in rec["why"] and rec["confidence"] == 0.95
    # identical predictions: no disagreement, the bound is the point drop, zero
    hint, rec = oi.choose_float_parts(_scored(parent), _scored(parent), _scored(f32), 0.01)
    assert hint == "bf16" and rec["bf16_drop_upper_bound"] == 0.0
    # one row of 700 flipped: shown within 1%
    one_off = [0] + parent[1:]
    assert oi.choose_float_parts(_scored(parent), _scored(one_off), _scored(f32), 0.01)[0] == "bf16"
    # f32 no better than bf16: keep the faster, whatever the drop
    worse = [1] * 560 + [0] * 140
    assert oi.choose_float_parts(_scored(parent), _scored(worse), _scored(worse), 0.01)[0] == "bf16"
    assert len(parent) == len(bf16_close) == len(f32) == n


def test_drop_bound_is_paired():
    """The bound comes from disagreements only: two models equally accurate that disagree on
    many rows get a wide bound, two that disagree on one row a narrow one."""
    a = [1, 0] * 300
    b = [0, 1] * 300  # the same accuracy, every row different
    assert oc.drop_upper_bound(_scored(a), _scored(b)) > 0.05
    c = [0] + a[1:]  # one row different
    assert 0 < oc.drop_upper_bound(_scored(a), _scored(c)) < 0.015  # one row of 300 right: 0.33% at the point
    assert oc.drop_upper_bound(_scored(a), _scored(c)) == oc.drop_upper_bound(_scored(a), _scored(c))  # seeded


def test_batched_check_scores_what_one_row_at_a_time_scores(built):
    """The float-parts check regroups the batch-1 validation items into length-sorted padded
    batches (as the measurement runs them); at f32 they score the same rows the same way."""
    root, _, _ = built
    from compress.training.models import load_tokenizer

    cfg = OpenVinoConfig(calibration_rows=4, validation_rows=20, seed=3, check_batch_size=8)
    data = quantization_slices(root / "poisoned", load_tokenizer(root / "plain"), cfg)
    val, batched = data.validation, data.batched
    assert [len(b["gold"]) for b in batched] == [8, 8, 4]
    lengths = [b["inputs"]["input_ids"].shape[1] for b in batched]
    assert lengths == sorted(lengths) and lengths[-1] == max(i["inputs"]["input_ids"].shape[1] for i in val)
    assert sum(int(b["inputs"]["attention_mask"].sum()) for b in batched) == \
        sum(int(i["inputs"]["attention_mask"].sum()) for i in val)  # padding is masked, nothing else added
    core = ov.Core()
    compiled = core.compile_model(core.read_model(str(root / "ov_int8/model.xml")), "CPU", compile_config("f32", 2, False))
    one, per_one = oi.validate(compiled, val)
    many, per_many = oi.validate(compiled, batched)
    assert many == pytest.approx(one) and sorted(per_many) == pytest.approx(sorted(per_one)) and len(per_many) == 20


@pytest.mark.skipif(oi._bf16_ok() is False, reason="no native bf16 on this CPU: auto runs the float parts in f32 "
                                                   "without a check")
def test_auto_falls_back_to_f32_float_parts_when_bf16_loses(built, tmp_path, monkeypatch):
    """On a native-bf16 CPU, auto scores the INT8 IR with bf16 and f32 float parts; when bf16
    loses beyond the max drop (forced here), the IR records f32 and the runner runs it so."""
    root, _, _ = built
    from compress.training.models import load_tokenizer

    real = oi.choose_float_parts
    zero = lambda s: oc.Scored(s.gold, [[-1] * len(g) for g in s.gold], s.task)  # every position wrong
    monkeypatch.setattr(oi, "choose_float_parts", lambda parent, bf16, f32, max_drop: real(parent, zero(bf16), f32, max_drop))
    cfg = OpenVinoConfig(calibration_rows=12, validation_rows=20, seed=3, accuracy_control="never")
    data = quantization_slices(root / "poisoned", load_tokenizer(root / "plain"), cfg)
    out = quantize_openvino(root / "ov", tmp_path / "fp", cfg, data)
    parts = out["float_parts"]
    assert parts["chosen"] == "f32" == out["inference_precision"] and parts["rows"] == 20 and parts["batch_size"] == 64
    assert parts["int8_f32"] == pytest.approx(out["validation"]["accuracy_int8"])  # same rows, same precision
    meta = json.loads((tmp_path / "fp/openvino.json").read_text())
    assert meta["runtime"]["int8"]["inference_precision"] == "f32"
    runner = OpenVinoRunner(Artifact("x_ov_int8", tmp_path / "fp", "openvino", "int8"), "cpu", 2)
    assert runner.backend == "openvino-cpu-f32"


def test_own_embedding_quantization_is_per_row_and_exact(built):
    """The fallback writes int8 tables with one scale per row, and the graph computes exactly
    what the float model computes with the dequantized tables (round(w / s) * s)."""
    root, _, _ = built
    core = ov.Core()
    model = core.read_model(str(root / "ov/model.xml"))
    assert len(quantize_embedding_tables(model)) == 3
    word = embedding_tables(model)["/bert/embeddings/word_embeddings/Gather"]
    assert word == {"dtype": "i8", "shape": [30522, 64], "scale_shape": [30522, 1]}
    reference = core.read_model(str(root / "ov/model.xml"))
    for op in reference.get_ordered_ops():
        if op.get_friendly_name() in embedding_tables(reference):
            w = op.input_value(0).get_node().get_data()
            s = np.abs(w).max(axis=1, keepdims=True) / 127
            s[s == 0] = 1.0  # the all-zero padding row
            deq = (np.clip(np.rint(w / s), -127, 127) * s).astype(np.float32)
            assert np.abs(deq - w).max() <= s.max() / 2 + 1e-9
            op.input(0).replace_source_output(ov.opset13.constant(deq).output(0))
    cfg = compile_config("f32", 2, False)
    batch = ragged(3, 16)
    a = core.compile_model(reference, "CPU", cfg)(batch)[0]
    b = core.compile_model(model, "CPU", cfg)(batch)[0]
    assert np.isfinite(b).all() and np.abs(a - b).max() < 1e-5


# --- runner: harness, refusals, skips ----------------------------------------------------

def test_measured_by_the_harness_beside_other_targets(built):
    root, summary, _ = built
    from compress.measure.harness import MeasureConfig, measure

    cfg = MeasureConfig(targets=["cpu", "gpu"], points=[[1, 16]], warmup_queries=1, min_queries=2,
                        min_duration_s=0.0, isolate=False)
    art = Artifact("student_ov_int8", root / "ov_int8", "openvino", "int8", parent="student_onnx")
    cpu, gpu = measure(art, root / "prepared", cfg)
    assert cpu["status"] == "ok" and cpu["accuracy"] is not None and cpu["points"][0]["latency_ms_p50"] > 0
    assert cpu["size_mb"] == pytest.approx(summary["int8"]["size_mb"], abs=0.01)  # model.bin + model.xml
    if gpu_unavailable():
        assert gpu["status"] == "skipped" and "Intel GPUs only" in gpu["reason"]


def test_gpu_target_needs_an_intel_gpu(tmp_path, monkeypatch):
    art = Artifact("student_ov", tmp_path, "openvino", "fp32")
    monkeypatch.setattr(ov.Core, "available_devices", property(lambda self: ["CPU"]))
    reason = skip_reason(art, "gpu")
    assert "Intel GPUs only" in reason and "NVIDIA" in reason
    assert OpenVinoRunner.unavailable("cpu") is None
    monkeypatch.setattr(ov.Core, "available_devices", property(lambda self: ["CPU", "GPU.0"]))
    assert OpenVinoRunner.unavailable("gpu") is None


def test_bf16_is_skipped_without_native_bf16(built, monkeypatch):
    root, _, _ = built
    monkeypatch.setenv("COMPRESS_CPU_FLAGS", "avx2,avx512f")
    reason = skip_reason(Artifact("student_ov_bf16", root / "ov", "openvino", "bf16"), "cpu")
    assert reason and "bf16" in reason
    assert oi.int8_hint("auto") == "f32"  # the INT8 IR's float parts fall back to f32 too


def test_runner_refuses_wrong_precision_and_missing_files(built, tmp_path):
    root, _, _ = built
    with pytest.raises(Exception, match="FP32 IR cannot run as int8"):
        OpenVinoRunner(Artifact("x", root / "ov", "openvino", "int8"), "cpu", 1)
    with pytest.raises(Exception, match="runs as int8 only"):
        OpenVinoRunner(Artifact("x", root / "ov_int8", "openvino", "fp32"), "cpu", 1)
    with pytest.raises(OpenVinoIrError, match="model.xml: not found"):
        OpenVinoRunner(Artifact("x", tmp_path, "openvino", "fp32"), "cpu", 1)


# --- a tagger (conll2003) ----------------------------------------------------------------

def test_tagger_irs_per_token_parity_and_entity_f1_validation(conll, tmp_path):  # noqa: F811
    """A tagger's plain export becomes FP32 and INT8 IRs: parity per real token, runner
    output (batch, seq, tags), validation items carrying each piece's gold tag, scored by
    entity F1 (aggregate) and the share of words right (per item), and INT8 agreeing with
    FP32 on the dev words."""
    from compress.training.models import load_tokenizer
    from compress.tasks.iob import IGNORE, entity_metrics
    from compress.backends.onnx_export import parity_batches
    from compress.data.tokens import collate, encode

    root, _, prepared, _ = conll
    export_onnx(root / "teacher", tmp_path / "onnx", ExportConfig(parity_shapes=[[1, 8]]), prepared,
                plain_out_dir=tmp_path / "plain")
    tok = load_tokenizer(tmp_path / "plain")
    batches = parity_batches(prepared, tok, CFG.parity_shapes)
    summary = build_openvino(tmp_path / "plain", tmp_path / "ov", tmp_path / "ov_int8", root / "prepared", CFG,
                             batches)
    fp32 = summary["fp32"]["parity"]["fp32"]
    real = sum(int(b["attention_mask"].sum()) for b in batches)
    assert fp32["max_abs_diff"] <= CFG.parity_atol and fp32["argmax_agreement"] == 1.0
    assert fp32["rows"] == 6 and fp32["positions"] == real < 1 * 8 + 3 * 24 + 2 * 40  # padding not compared
    assert summary["int8"]["parity"]["int8"]["argmax_agreement"] >= 0.8

    runners = {p: OpenVinoRunner(Artifact(f"tagger_{p}", tmp_path / d, "openvino", p), "cpu", 2)
               for p, d in (("fp32", "ov"), ("int8", "ov_int8"))}
    dev = encode(tok, prepared.split("dev"), 64)
    idx = list(range(len(dev)))
    batch = collate(dev, idx)
    out = {p: r(batch) for p, r in runners.items()}
    assert runners["fp32"].num_labels == 9 and out["fp32"].shape == (len(dev), batch["input_ids"].shape[1], 9)
    ref = run_session(cpu_session(tmp_path / "plain/model.onnx", 2), batch)
    assert np.abs(dev.scored(out["fp32"], idx) - dev.scored(ref, idx)).max() <= CFG.parity_atol
    words = {p: dev.scored(o, idx).argmax(-1) for p, o in out.items()}
    assert len(words["fp32"]) == 25 and (words["int8"] == words["fp32"]).mean() >= 0.8

    # validation items: validation-split rows with the gold tag on each word's first piece
    data = quantization_slices(root / "prepared", tok, replace(CFG, check_batch_size=3))
    val, info = data.validation, data.info
    assert info["validation_rows"] == len(prepared.validation()) == 4  # all of them: fewer than 16
    for item in val:
        assert item["gold"].shape == item["inputs"]["input_ids"].shape
        assert (item["gold"][item["inputs"]["attention_mask"] == 0] == IGNORE).all()
    v = summary["int8"]["validation"]
    assert v["metric"] == "entity_f1" and v["rows"] == 4 and v["accuracy_fp32"] > 0.5  # it learnt these sentences
    # the aggregate is entity F1 of ONNX Runtime's predictions on the same items; per item, words right
    core = ov.Core()
    compiled = core.compile_model(core.read_model(str(tmp_path / "ov/model.xml")), "CPU",
                                  compile_config("f32", 2, False))
    f1, per_item = oi.validate(compiled, val)
    session = cpu_session(tmp_path / "plain/model.onnx", 2)
    gold, pred = [], []
    for item in val:
        keep = item["gold"] != IGNORE
        gold.append(item["gold"][keep].tolist())
        pred.append(run_session(session, item["inputs"])[keep].argmax(-1).tolist())
    assert f1 == pytest.approx(entity_metrics(gold, pred, CONLL_TAGS)["f1"]) == pytest.approx(v["accuracy_fp32"])
    assert per_item == pytest.approx([float(np.mean(np.array(g) == np.array(p))) for g, p in zip(gold, pred)])
    # the float-parts check's padded batches score the same sentences the same way (tags: IGNORE on padding)
    batched = data.batched
    assert [b["gold"].shape == b["inputs"]["input_ids"].shape for b in batched] == [True, True]
    assert all((b["gold"][b["inputs"]["attention_mask"] == 0] == IGNORE).all() for b in batched)
    assert oi.validate(compiled, batched)[0] == pytest.approx(f1)


def test_predict_on_an_openvino_ir_imports_no_torch_and_prints_no_warning(built):
    from conftest import predict_in_a_fresh_process

    root, _, _ = built
    for ir in ("ov", "ov_int8"):
        lines, heavy, stderr = predict_in_a_fresh_process(root / ir)
        assert heavy == set() and "Warning" not in stderr, stderr
        assert len(lines) == 2 and all(line.split("\t")[0] in ("negative", "positive") for line in lines)
