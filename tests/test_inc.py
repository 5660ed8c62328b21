"""Intel Neural Compressor route (compress/backends/inc.py): accuracy-aware INT8 autotune on a tiny
BERT with scripted validation accuracies, the report, float-kept layers, INT8 word embeddings,
INT8 storage without pickle."""
from __future__ import annotations

import importlib.util
import json
import pickle
import types

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from compress.core.config import ConfigError, build
from compress.core.errors import UserError
from compress.backends.inc import IncConfig, IncGoalNotMet, inc_autotune, plan_trials
from compress.backends.inc_artifact import load_inc_int8, save_inc_int8
from compress.backends.inc_graph import IncInt8Classifier, linear_module_names, quantized_module_names
from tests.conftest import SST2_ROWS, tiny_model


def _has_inc() -> bool:
    try:
        return importlib.util.find_spec("neural_compressor.torch.quantization") is not None
    except ImportError:
        return False


needs_inc = pytest.mark.skipif(
    not _has_inc(), reason="Intel Neural Compressor not installed: pip install 'neural-compressor-pt==3.10'")

TINY_LINEARS = sorted(
    [f"bert.encoder.layer.{i}.{m}" for i in range(2) for m in (
        "attention.self.query", "attention.self.key", "attention.self.value", "attention.output.dense",
        "intermediate.dense", "output.dense")] + ["bert.pooler.dense", "classifier"])


@pytest.fixture(scope="module")
def tiny():
    model, tokenizer = tiny_model()
    enc = tokenizer([r[0] for r in SST2_ROWS], padding="longest", return_tensors="np", return_token_type_ids=True)
    batches = [{k: enc[k][i:i + 4].astype(np.int64) for k in ("input_ids", "attention_mask", "token_type_ids")}
               for i in (0, 4)]
    return model, tokenizer, batches


def scripted(baseline: float, trials: list[float], seen: list | None = None):
    """An eval_fn returning `baseline` for the float graph, then `trials` in order; it also
    runs the model on a batch so every trial is really executed."""
    values = iter([baseline, *trials])

    def eval_fn(model):
        assert isinstance(model, IncInt8Classifier) and model.config.num_labels == 2
        model.eval()  # as predict_logits does; a bare torch.export graph would refuse this
        ids = torch.tensor([[101, 2023, 3185, 2003, 2204, 102]])
        logits = model(input_ids=ids, attention_mask=torch.ones_like(ids),
                       token_type_ids=torch.zeros_like(ids)).logits
        assert logits.shape == (1, 2) and torch.isfinite(logits).all()
        if seen is not None:
            seen.append(None if model.spec is None else model.spec["name"])
        return next(values)

    return eval_fn


def float_logits(model, batch):
    model.eval()
    with torch.no_grad():
        return model(**{k: torch.as_tensor(v) for k, v in batch.items()}).logits


# --- config -----------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs, message", [
    (dict(approaches=[]), "at least one"),
    (dict(approaches=["dynamic", "qat"]), "unknown approaches"),
    (dict(approaches=["static", "static"]), "repeat"),
    (dict(tolerable_loss=-0.01), "tolerable_loss"),
    (dict(tolerable_loss=1.0), "tolerable_loss"),
    (dict(max_trials=0), "max_trials"),
    (dict(calibration_rows=0), "calibration_rows"),
    (dict(keep_fp32=["classifier", ""]), "non-empty"),
    (dict(fallback_fp32=["layer[0-"]), "not a regular expression"),
    (dict(on_miss="ignore"), "on_miss"),
])
def test_config_rejects_bad_values(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        IncConfig(**kwargs)


def test_config_from_params_section():
    cfg = build(IncConfig, {"approaches": ["static"], "tolerable_loss": 0, "keep_fp32": []}, "inc")
    assert cfg.approaches == ["static"] and cfg.tolerable_loss == 0.0 and cfg.keep_fp32 == []
    with pytest.raises(ConfigError, match="Did you mean 'max_trials'"):
        build(IncConfig, {"max_trial": 3}, "inc")
    with pytest.raises(ConfigError, match="inc.approaches"):
        build(IncConfig, {"approaches": "dynamic"}, "inc")
    assert IncConfig().quantize_embeddings and not build(IncConfig, {"quantize_embeddings": False}, "inc") \
        .quantize_embeddings
    with pytest.raises(ConfigError, match="inc.quantize_embeddings"):
        build(IncConfig, {"quantize_embeddings": "no"}, "inc")


def test_plan_orders_variants_then_fallbacks_without_duplicates():
    cfg = IncConfig(approaches=["static", "dynamic"], keep_fp32=["classifier"],
                    fallback_fp32=[r"layer\.\d+\.output\.dense$"])
    plan = plan_trials(cfg, TINY_LINEARS)
    assert [t["name"] for t in plan] == [
        "static/act-minmax-asym", "static/act-kl-asym", "static/act-minmax-sym", "static/act-kl-sym",
        "dynamic/w-per_channel", "dynamic/w-per_tensor",
        "static/act-minmax-asym+fallback", "dynamic/w-per_channel+fallback"]
    assert plan[0]["fp32_modules"] == ["classifier"]
    assert plan[-1]["fp32_modules"] == ["bert.encoder.layer.0.output.dense", "bert.encoder.layer.1.output.dense",
                                        "classifier"]
    # a fallback adding nothing new is the same config: not tried twice
    same = plan_trials(IncConfig(approaches=["dynamic"], keep_fp32=["classifier"], fallback_fp32=["classifier"]),
                       TINY_LINEARS)
    assert [t["name"] for t in same] == ["dynamic/w-per_channel", "dynamic/w-per_tensor"]


def test_pattern_matching_no_layer_is_an_error():
    with pytest.raises(UserError, match="keep_fp32 pattern 'clasifier' matches no Linear"):
        plan_trials(IncConfig(keep_fp32=["clasifier"]), TINY_LINEARS)


def test_quantized_module_names_of_the_eager_torchao_route():
    from compress.backends.torchao import QuantizeConfig, quantize

    model, _ = tiny_model()
    q = quantize(model.eval(), QuantizeConfig())
    assert linear_module_names(q) == TINY_LINEARS
    assert quantized_module_names(q) == [n for n in TINY_LINEARS if n != "classifier"]
    assert quantized_module_names(model) == []


# --- autotune ----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def dynamic_result(tiny):
    """Dynamic INT8, pooler and classifier in float; trial 1 misses (0.80 < 0.891), trial 2 meets."""
    model, _, batches = tiny
    seen = []
    cfg = IncConfig(approaches=["dynamic", "static"], calibration_rows=6)
    model.train()
    table = model.bert.embeddings.word_embeddings.weight.detach().clone()
    qmodel, report = inc_autotune(model, scripted(0.9, [0.80, 0.895, 0.9], seen), batches, cfg)
    assert model.training  # the caller's mode is restored
    assert torch.equal(model.bert.embeddings.word_embeddings.weight, table)  # and its FP32 table
    return qmodel, report, seen


@needs_inc
def test_autotune_stops_at_first_config_meeting_the_goal(tiny, dynamic_result):
    model, _, batches = tiny
    qmodel, report, seen = dynamic_result
    assert seen == [None, "dynamic/w-per_channel", "dynamic/w-per_tensor"]  # baseline, then in order
    assert report["baseline_accuracy"] == 0.9 and report["goal_accuracy"] == pytest.approx(0.891)
    assert [(t["name"], t["accuracy"], t["met_goal"]) for t in report["trials"]] == [
        ("dynamic/w-per_channel", 0.80, False), ("dynamic/w-per_tensor", 0.895, True)]
    assert report["trials"][0]["relative_loss"] == pytest.approx(0.1 / 0.9)
    assert report["met_goal"] and report["chosen"]["trial"] == 2
    assert report["chosen"]["name"] == qmodel.spec["name"] == "dynamic/w-per_tensor"
    assert len(report["planned"]) == 6 and report["calibration_rows"] == 6
    assert report["wall_s"] > 0 and all(t["wall_s"] > 0 for t in report["trials"])
    json.dumps(report)  # storable as is
    # every Linear is INT8 except the float-kept pooler and classifier
    assert linear_module_names(qmodel) == TINY_LINEARS
    assert quantized_module_names(qmodel) == [n for n in TINY_LINEARS
                                              if n not in ("bert.pooler.dense", "classifier")]
    assert report["float_linears"] == ["bert.pooler.dense", "classifier"]
    # the word embeddings run as their per-row INT8 values, in the baseline and every trial
    from compress.backends.torchao import dequantize_rows

    assert report["word_embeddings"] == "int8-symmetric-per-row"
    q, scale = qmodel.word_embeddings_int8
    assert q.dtype == torch.int8 and scale.shape == (q.shape[0], 1)
    assert torch.equal(qmodel.gm.state_dict()["bert.embeddings.word_embeddings.weight"], dequantize_rows(q, scale))
    # it is a classifier close to the float one, called like the HF model, any batch shape
    for batch in batches:
        ref = float_logits(model, batch)
        with torch.no_grad():
            out = qmodel(**{k: torch.as_tensor(v) for k, v in batch.items()}).logits
        assert out.shape == ref.shape and float((out - ref).norm() / ref.norm()) < 0.05
    with pytest.raises(RuntimeError, match="inference-only"):
        qmodel.train()


@needs_inc
def test_static_trial_honours_keep_fp32_patterns(tiny):
    model, _, batches = tiny
    cfg = IncConfig(approaches=["static"], keep_fp32=[r"layer\.1\.", "classifier"], calibration_rows=8)
    qmodel, report = inc_autotune(model, scripted(1.0, [1.0]), batches, cfg)
    assert [t["name"] for t in report["trials"]] == ["static/act-minmax-asym"]
    assert quantized_module_names(qmodel) == [n for n in TINY_LINEARS if n.startswith("bert.encoder.layer.0.")] \
        + ["bert.pooler.dense"]
    ref = float_logits(model, batches[1])
    with torch.no_grad():
        out = qmodel(**{k: torch.as_tensor(v) for k, v in batches[1].items()}).logits
    assert float((out - ref).norm() / ref.norm()) < 0.05


@needs_inc
def test_no_config_meeting_the_goal_raises_with_the_report(tiny):
    model, _, batches = tiny
    cfg = IncConfig(approaches=["dynamic"], max_trials=2, calibration_rows=4)
    with pytest.raises(IncGoalNotMet, match=r"no INC INT8 config met the accuracy goal >= 0\.9900") as e:
        inc_autotune(model, scripted(1.0, [0.5, 0.6]), batches, cfg)
    report = e.value.report
    assert not report["met_goal"] and len(report["trials"]) == 2
    assert not any(t["met_goal"] for t in report["trials"])
    assert "dynamic/w-per_channel 0.5000; dynamic/w-per_tensor 0.6000" in str(e.value)


@needs_inc
def test_on_miss_best_returns_the_most_accurate_trial_then_fallback_meets(tiny):
    model, _, batches = tiny
    cfg = IncConfig(approaches=["dynamic"], keep_fp32=["classifier"], fallback_fp32=[r"layer\.\d+\.output\.dense$"],
                    on_miss="best", calibration_rows=4)
    # the fallback trial (3rd) meets the goal
    qmodel, report = inc_autotune(model, scripted(1.0, [0.5, 0.6, 0.995]), batches, cfg)
    assert report["met_goal"] and qmodel.spec["name"] == "dynamic/w-per_channel+fallback"
    assert "bert.encoder.layer.0.output.dense" not in quantized_module_names(qmodel)
    assert "bert.pooler.dense" in quantized_module_names(qmodel)
    # none meets: the best (trial 2) comes back, flagged
    qmodel, report = inc_autotune(model, scripted(1.0, [0.5, 0.6, 0.55]), batches, cfg)
    assert not report["met_goal"] and report["chosen"]["trial"] == 2
    assert qmodel.spec["name"] == "dynamic/w-per_tensor"
    assert "bert.encoder.layer.0.output.dense" in quantized_module_names(qmodel)


@needs_inc
def test_baseline_must_be_a_positive_score(tiny):
    model, _, batches = tiny
    with pytest.raises(UserError, match="positive score"):
        inc_autotune(model, scripted(0.0, [0.0]), batches, IncConfig(max_trials=1))


# --- storage -----------------------------------------------------------------------------

@needs_inc
def test_save_and_load_rebuild_identical_model_without_pickle(tiny, dynamic_result, tmp_path, monkeypatch):
    model, tokenizer, batches = tiny
    static, report = inc_autotune(model, scripted(1.0, [1.0]), batches,
                                  IncConfig(approaches=["static"], calibration_rows=8, quantize_embeddings=False))
    assert report["word_embeddings"] == "float32" and static.word_embeddings_int8 is None
    float_bytes = sum(v.numel() * 4 for v in model.state_dict().values())
    emb = "bert.embeddings.word_embeddings.weight"
    for name, qmodel in [("dynamic", dynamic_result[0]), ("static", static)]:
        out = tmp_path / name
        save_inc_int8(qmodel, tokenizer, out, extra={"trials": 1})
        assert {p.suffix for p in out.iterdir()} <= {".json", ".safetensors", ".txt"}
        assert not list(out.glob("*.pt*")) and not list(out.glob("*.bin"))
        # INT8 Linear weights (+ per-row INT8 word embeddings for "dynamic") as int8 tensors
        t = load_file(str(out / "model.safetensors"))
        w = "bert.encoder.layer.0.intermediate.dense.weight"
        assert t[f"{w}_int8"].dtype == torch.int8 and w not in t and "classifier.weight" in t
        assert (f"{emb}_int8" in t) == (name == "dynamic") and (emb in t) == (name == "static")
        int8_bytes = sum(v.numel() for k, v in t.items() if k.endswith("_int8"))
        assert (out / "model.safetensors").stat().st_size < float_bytes - 0.9 * 3 * int8_bytes
        with monkeypatch.context() as m:  # loading never unpickles anything
            m.setattr(pickle, "loads", lambda *a, **k: pytest.fail("pickle.loads called"))
            m.setattr(torch, "load", lambda *a, **k: pytest.fail("torch.load called"))
            loaded, tok, meta = load_inc_int8(out)
        assert meta["spec"] == qmodel.spec and meta["extra"] == {"trials": 1}
        assert quantized_module_names(loaded) == quantized_module_names(qmodel)
        x = {k: torch.as_tensor(v) for k, v in batches[1].items()}
        assert torch.equal(loaded(**x).logits, qmodel(**x).logits)
        assert tok("a test")["input_ids"] == tokenizer("a test")["input_ids"]

    # a stored calibration scale that the rebuild cannot reproduce is caught
    meta_path = tmp_path / "static" / "inc_int8.json"
    meta = json.loads(meta_path.read_text())
    node = next(k for k, v in meta["qparams"].items() if "quantize_per_tensor" in v["target"] and "1" in v["args"])
    meta["qparams"][node]["args"]["1"] *= 3
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(UserError, match="probe logits differ"):
        load_inc_int8(tmp_path / "static")
    meta["qparams"]["no_such_node"] = meta["qparams"].pop(node)
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(UserError, match="does not match the stored one"):
        load_inc_int8(tmp_path / "static")
    with pytest.raises(UserError, match="not an INC INT8 artifact"):
        load_inc_int8(tmp_path)
    # altered tensors: refused with the file (and tensor) named
    st = tmp_path / "dynamic" / "model.safetensors"
    good = load_file(str(st))
    key = "bert.encoder.layer.0.intermediate.dense.weight"
    for change, message in [
        (lambda t: t.__setitem__(f"{key}_int8", t[f"{key}_int8"].float()),
         f"model.safetensors: {key}_int8 is torch.float32"),
        # (per-tensor weights here: the graph's recorded scale no longer gives the stored int8 data)
        (lambda t: t.__setitem__(f"{key}_scale", t[f"{key}_scale"] * 2),
         f"model.safetensors: {key}: the rebuilt graph's int8 weight differs from the stored one"),
        (lambda t: t.pop(f"{emb}_scale"), f"model.safetensors: {emb}_scale is missing"),
        (lambda t: t.__setitem__(f"{emb}_int8", t[f"{emb}_int8"][:-1]), f"model.safetensors: {emb} is"),
    ]:
        t = dict(good)
        change(t)
        save_file(t, str(st), metadata={"format": "pt"})
        with pytest.raises((UserError, ValueError), match=message):
            load_inc_int8(tmp_path / "dynamic")


@needs_inc
@pytest.mark.slow
def test_runner_compiles_to_int8_kernels_with_the_same_predictions(tiny, dynamic_result, tmp_path):
    from compress.backends.inc_artifact import IncInt8Runner

    model, tokenizer, batches = tiny
    save_inc_int8(dynamic_result[0], tokenizer, tmp_path / "inc")
    runner = IncInt8Runner(types.SimpleNamespace(path=tmp_path / "inc"), "cpu", threads=1)
    assert runner.num_labels == 2 and runner.num_params > 0
    assert IncInt8Runner.unavailable("cpu") is None and "CPU only" in IncInt8Runner.unavailable("gpu")
    for batch in batches:  # second shape: no recompile needed (dynamic shapes)
        got = runner(batch)
        want = dynamic_result[0](**{k: torch.as_tensor(v) for k, v in batch.items()}).logits.detach().numpy()
        assert got.dtype == np.float32 and got.shape == want.shape
        assert np.abs(got - want).max() < 1e-2 * (1 + np.abs(want).max())


# --- a tagger (BertForTokenClassification: logits per token, no pooler) ---------------------



def test_default_keep_fp32_skips_the_pooler_a_tagger_lacks():
    tagger = [n for n in TINY_LINEARS if n != "bert.pooler.dense"]
    assert plan_trials(IncConfig(), tagger)[0]["fp32_modules"] == ["classifier"]
    assert plan_trials(IncConfig(), TINY_LINEARS)[0]["fp32_modules"] == ["bert.pooler.dense", "classifier"]
    with pytest.raises(UserError, match="keep_fp32 pattern 'clasifier' matches no Linear"):  # typos still fail
        plan_trials(IncConfig(keep_fp32=["pooler", "clasifier"]), tagger)


@needs_inc
def test_tagger_tunes_on_entity_f1_and_runs_through_the_runner(conll, tmp_path):
    from compress.measure.metrics import task_metrics
    from compress.training.models import load_saved
    from compress.backends.base import Artifact, runner_class
    from compress.data.tokens import collate, encode, eval_batches
    from compress.training.train import predict_logits

    root, _, prepared, _ = conll
    task = prepared.task
    model, tok = load_saved(root / "teacher")
    val, dev = (encode(tok, rows, 64) for rows in (prepared.validation(), prepared.split("dev")))
    scores = []

    def val_objective(m) -> float:  # as pipelines/inc.py: the task's primary metric on validation
        scores.append(task_metrics(task, val, predict_logits(m, val))[task.primary_metric])
        return scores[-1]

    calib = encode(tok, prepared.split("train")[:8], 64)
    batches = [collate(calib, b) for b in eval_batches(calib.lengths(), 4)]
    cfg = IncConfig(approaches=["dynamic"], max_trials=1, calibration_rows=8, on_miss="best")
    qmodel, report = inc_autotune(model, val_objective, batches, cfg, task.primary_metric)
    assert task.primary_metric == "f1" and report["objective"] == "f1"
    assert report["baseline_accuracy"] == scores[0] > 0 and report["trials"][0]["accuracy"] == scores[1]
    assert report["float_linears"] == ["classifier"]  # keep_fp32's "pooler" names nothing here
    save_inc_int8(qmodel, tok, tmp_path / "inc", extra={"tuning": report})
    assert json.loads((tmp_path / "inc/inc_int8.json").read_text())["extra"]["tuning"]["objective"] == "f1"
    # The registry's runner for this artifact (what load_runner builds), run eagerly: inductor's
    # compile takes 15-45 s on this machine; test_runner_compiles_... covers the compiled graph.
    artifact = Artifact("tagger_inc", tmp_path / "inc", "pytorch_inc", "int8", parent="teacher")
    runner = runner_class(artifact, "cpu")(artifact, "cpu", 1, compile=False)
    assert type(runner).__name__ == "IncInt8Runner" and runner.num_labels == 9
    idx = list(range(len(dev)))
    batch = collate(dev, idx)
    got = runner(batch)
    assert got.dtype == np.float32 and got.shape == (len(idx), batch["input_ids"].shape[1], 9)
    want = float_logits(model, batch).numpy()
    pred, ref = dev.scored(got, idx).argmax(-1), dev.scored(want, idx).argmax(-1)
    assert len(pred) == len(dev.labels) == 25  # one scored position per word
    assert (pred == ref).mean() >= 0.8
