"""TensorRT engines: config validation, the skip path (everywhere), the per-precision ONNX
graphs (checked with ONNX Runtime on the CPU), and real engine builds (NVIDIA GPU with the
tensorrt package only; skipped elsewhere)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import onnx
import pytest

from compress.backends.onnx_export import count_initializer_params
import torch

from compress.backends import tensorrt_engine as te
from compress.core.config import ConfigError, build
from compress.core.io import sha256_file
from compress.core.errors import UserError
from compress.training.models import count_parameters
from compress.backends.base import Artifact, load_runner, skip_reason
from conftest import CONLL_TAGS as TAGS
from compress.backends.parity import compared_logits
from compress.backends.tensorrt_engine import (EngineConfig, build_engine, build_engines, onnx_num_labels, prepare_onnx,
                                      take_rows, training_batches)
from compress.backends.tensorrt_runner import (EngineBuildError, TrtRunner, parity_check, resolve_onnx,
                                      tensorrt_unavailable)
from conftest import REPO, tiny_model  # noqa: E402

REASON = tensorrt_unavailable()
needs_trt = pytest.mark.skipif(REASON is not None, reason=f"TensorRT engines cannot be built here: {REASON}")
INPUTS = ["input_ids", "attention_mask", "token_type_ids"]


def _tiny_onnx(tmp_path_factory, model, tokenizer, name: str, labels: list[str], seed: int, per_token: bool):
    """`model` with every weight drawn at random (so no two initializers are equal: the
    exporter stores equal ones once; and the logits are not all near zero), exported to
    ONNX beside its tokenizer and config (the export stage's layout)."""
    torch.manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.05)
    model.eval()
    model.config.id2label = dict(enumerate(labels))
    model.config.label2id = {t: i for i, t in enumerate(labels)}
    out = tmp_path_factory.mktemp("onnx") / name
    out.mkdir()
    model.config.save_pretrained(out)
    tokenizer.save_pretrained(out)
    ids = torch.randint(1000, 2000, (2, 16))
    logits_axes = {0: "batch", 1: "seq"} if per_token else {0: "batch"}
    torch.onnx.export(model, (ids, torch.ones_like(ids), torch.zeros_like(ids)), str(out / "model.onnx"),
                      dynamo=False, opset_version=17, input_names=INPUTS, output_names=["logits"],
                      dynamic_axes={**{n: {0: "batch", 1: "seq"} for n in INPUTS}, "logits": logits_axes})
    return SimpleNamespace(dir=out, onnx=out / "model.onnx", num_params=count_parameters(model))


@pytest.fixture(scope="module")
def export(tmp_path_factory):
    """A tiny BERT classifier exported to ONNX."""
    model, tokenizer = tiny_model()
    return _tiny_onnx(tmp_path_factory, model, tokenizer, "student", ["negative", "positive"], 1, per_token=False)


@pytest.fixture(scope="module")
def tagger(tmp_path_factory):
    """A tiny BERT tagger (9 CoNLL tags) exported as the export stage lays it out: logits
    (batch, seq, tags) with dynamic batch and seq."""
    from compress.training.models import load_classifier

    model, tokenizer, _ = load_classifier("random:tiny", len(TAGS), seed=0, kind="token")
    return _tiny_onnx(tmp_path_factory, model, tokenizer, "tagger", list(TAGS), 2, per_token=True)


def make_batch(rows: int, seq: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Token ids with ragged lengths (row i loses i % (seq // 2) tokens to padding)."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(1000, 5000, (rows, seq)).astype(np.int64)
    ids[:, 0] = 101
    mask = np.ones_like(ids)
    for i in range(rows):
        keep = seq - i % max(1, seq // 2)
        ids[i, keep:] = 0
        mask[i, keep:] = 0
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}


def ort_logits(onnx_path: Path, batch: dict[str, np.ndarray]) -> np.ndarray:
    import onnxruntime as ort

    session = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    return session.run(None, batch)[0]


# --- config ------------------------------------------------------------------------------

def test_defaults_build():
    cfg = build(EngineConfig, {}, "tensorrt")
    assert cfg == EngineConfig()
    assert cfg.precisions == ["fp16", "int8"]
    assert (cfg.min_shape, cfg.opt_shape, cfg.max_shape) == ([1, 8], [8, 128], [32, 512])
    assert cfg.parity_atol == {"fp16": 0.05, "int8": 0.5}


def test_one_precision_keeps_default_tolerances():
    assert build(EngineConfig, {"precisions": ["fp16"]}, "tensorrt").precisions == ["fp16"]


@pytest.mark.parametrize("section, field", [
    ({"min_shape": [64, 8]}, "min_shape"),  # min batch > opt batch
    ({"max_shape": [32, 64]}, "max_shape"),  # max seq < opt seq
    ({"opt_shape": [8]}, "opt_shape"),
    ({"min_shape": [0, 8]}, "min_shape"),
    ({"precisions": ["fp8"]}, "precisions"),
    ({"precisions": []}, "precisions"),
    ({"precisions": ["fp16", "fp16"]}, "precisions"),
    ({"workspace_mb": 0}, "workspace_mb"),
    ({"workspace": 1024}, "workspace_mb"),  # unknown key: the nearest valid one is named
    ({"calibration_rows": 0}, "calibration_rows"),
    ({"parity_atol": {"fp16": 0.05, "int9": 0.5}}, "parity_atol"),
    ({"parity_atol": {"fp16": 0.0, "int8": 0.5}}, "parity_atol"),
    ({"precisions": ["int8"], "parity_atol": {"fp16": 0.05}}, "parity_atol"),
    ({"min_shape": ["1", 8]}, "min_shape"),
])
def test_bad_config_names_the_field(section, field):
    with pytest.raises(ConfigError, match=field):
        build(EngineConfig, section, "tensorrt")


# --- the skip path (runs everywhere) -----------------------------------------------------

@pytest.mark.skipif(REASON is None, reason="TensorRT and CUDA are available here")
def test_unavailable_here_is_reported(tmp_path):
    assert isinstance(REASON, str) and REASON
    assert TrtRunner.unavailable("gpu") == REASON
    assert "GPU" in TrtRunner.unavailable("cpu")
    engine = Artifact("student-fp16", tmp_path, format="tensorrt", precision="fp16")
    assert skip_reason(engine, "gpu") == REASON
    with pytest.raises(EngineBuildError, match="cannot build"):
        build_engine(tmp_path / "model.onnx", tmp_path / "out", "fp16", EngineConfig())


@pytest.mark.skipif(REASON is None, reason="TensorRT and CUDA are available here")
def test_build_engines_skips_here(tmp_path):
    cfg = EngineConfig(timing_cache=str(tmp_path / "timing.cache"))
    out = build_engines({"student": tmp_path / "student", "teacher": tmp_path / "teacher"}, tmp_path / "trt",
                        cfg, lambda *a: pytest.fail("calibration data asked for on the skip path"))
    assert out == [{"artifact": a, "precision": p, "status": "skipped", "reason": REASON}
                   for a in ("student", "teacher") for p in ("fp16", "int8")]
    assert not (tmp_path / "trt").exists() and not (tmp_path / "timing.cache").exists()


def test_build_engines_skip_path_never_raises(tmp_path, monkeypatch):
    # Forced, so this also runs on GPU machines; the ONNX paths need not even exist.
    monkeypatch.setattr(te, "tensorrt_unavailable", lambda: "no TensorRT in this test")
    out = build_engines({"student": tmp_path / "missing.onnx"}, tmp_path / "trt", EngineConfig(precisions=["int8"]),
                        lambda *a: pytest.fail("calibration data asked for on the skip path"))
    assert out == [{"artifact": "student", "precision": "int8", "status": "skipped",
                    "reason": "no TensorRT in this test"}]
    assert list(tmp_path.iterdir()) == []


def test_module_does_not_import_tensorrt():
    code = "import sys, compress.backends.tensorrt_engine; print('tensorrt' in sys.modules)"
    res = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip().splitlines()[-1] == "False"


# --- the graphs TensorRT builds (ONNX Runtime on the CPU) --------------------------------

def test_num_params_match_pytorch(export):
    # what a TensorRT engine's meta records: the plain graph's initializers, PyTorch's count
    assert count_initializer_params(export.onnx) == export.num_params


def test_resolve_onnx(export, tmp_path):
    assert resolve_onnx(export.dir) == export.onnx
    assert resolve_onnx(export.onnx) == export.onnx
    with pytest.raises(UserError, match="exactly one"):
        resolve_onnx(tmp_path)
    with pytest.raises(UserError, match="not found"):
        resolve_onnx(tmp_path / "nope.onnx")


def test_fp16_graph(export, tmp_path):
    out = tmp_path / "model.fp16.onnx"
    recipe = prepare_onnx(export.onnx, "fp16", out)
    assert recipe["kept_fp32_ops"] == ["LayerNormalization"]
    model = onnx.load(str(out))
    onnx.checker.check_model(model, full_check=True)  # also: topologically sorted
    assert [i.type.tensor_type.elem_type for i in model.graph.input] == [onnx.TensorProto.INT64] * 3
    assert model.graph.output[0].type.tensor_type.elem_type == onnx.TensorProto.FLOAT
    fp32 = {t.name for t in model.graph.initializer if t.data_type == onnx.TensorProto.FLOAT}
    fp16 = {t.name for t in model.graph.initializer if t.data_type == onnx.TensorProto.FLOAT16}
    users = {name: {n.op_type for n in model.graph.node if name in n.input} for name in fp32 | fp16}
    assert all(users[w] == {"LayerNormalization"} for w in fp32)  # only LayerNorm's gamma/beta
    assert {"MatMul", "Gather", "Gemm"} <= set().union(*(users[w] for w in fp16))  # the rest is FP16
    producers = {o: n for n in model.graph.node for o in n.output}
    norms = [n for n in model.graph.node if n.op_type == "LayerNormalization"]
    assert norms and all(producers[n.input[0]].op_type == "Cast" for n in norms)  # computed in FP32
    batch = make_batch(6, 24)
    ref, got = ort_logits(export.onnx, batch), ort_logits(out, batch)
    assert got.dtype == np.float32
    assert np.abs(got - ref).max() < 1e-2


def test_int8_graph(export, tmp_path):
    out, cache = tmp_path / "model.int8.onnx", tmp_path / "calibration.json"
    batches = [make_batch(16, seq, seed) for seed, seq in enumerate((12, 24, 40, 9))]
    recipe = prepare_onnx(export.onnx, "int8", out, batches, calibration_cache=cache)
    assert recipe["calibration_rows"] == 64
    model = onnx.load(str(out))
    onnx.checker.check_model(model)
    inits = {t.name: t for t in model.graph.initializer}
    qdq = [n for n in model.graph.node if n.op_type in ("QuantizeLinear", "DequantizeLinear")]
    assert qdq
    for node in qdq:  # TensorRT's form: signed int8, zero point 0
        zero_point = inits[node.input[2]]
        assert zero_point.data_type == onnx.TensorProto.INT8
        assert not onnx.numpy_helper.to_array(zero_point).any()
    producers = {o: n for n in model.graph.node for o in n.output}
    matmuls = [n for n in model.graph.node if n.op_type == "MatMul"]
    quantized = [n for n in matmuls if all(producers.get(i) is not None and producers[i].op_type == "DequantizeLinear"
                                           for i in n.input)]
    # 2 layers x (query, key, value, attention output, FFN up, FFN down); the 2 attention
    # MatMuls per layer stay FP32
    assert len(matmuls) == 16 and len(quantized) == 12
    assert all("/attention/self/MatMul" not in n.name for n in quantized)
    batch = make_batch(8, 30, seed=7)
    assert np.abs(ort_logits(out, batch) - ort_logits(export.onnx, batch)).max() < 0.1
    if recipe["calibration_cache"]:
        assert "data" in json.loads(cache.read_text())


def test_int8_graph_needs_calibration(export, tmp_path):
    with pytest.raises(UserError, match="calibration"):
        prepare_onnx(export.onnx, "int8", tmp_path / "q.onnx", [])


def test_quantized_onnx_is_refused(export, tmp_path):
    quantized = tmp_path / "q.onnx"
    prepare_onnx(export.onnx, "int8", quantized, [make_batch(8, 16)])
    with pytest.raises(UserError, match="already quantized"):
        prepare_onnx(quantized, "fp16", tmp_path / "again.onnx")


def test_onnxruntime_fused_graph_is_refused(export, tmp_path):
    # The export stage's optimize: true graph (ONNX Runtime contrib ops) is not TensorRT's.
    from onnxruntime.transformers.optimizer import optimize_model

    fused = tmp_path / "fused.onnx"
    optimize_model(str(export.onnx), model_type="bert", num_heads=4, hidden_size=64).save_model_to_file(str(fused))
    assert any(n.domain == "com.microsoft" for n in onnx.load(str(fused)).graph.node)
    with pytest.raises(UserError, match="com.microsoft"):
        prepare_onnx(fused, "fp16", tmp_path / "out.onnx")


def test_take_rows():
    batches = [make_batch(16, 8, seed) for seed in range(3)]
    assert [len(b["input_ids"]) for b in take_rows(batches, 40)] == [16, 16, 8]
    assert [len(b["input_ids"]) for b in take_rows(iter(batches), 100)] == [16, 16, 16]


def test_training_batches(prepared_sst2, export):
    batches = training_batches(prepared_sst2, export.dir, rows=20, batch_size=8, max_length=32)
    assert sum(len(b["input_ids"]) for b in batches) == 20
    assert all(len(b["input_ids"]) <= 8 and b["input_ids"].shape[1] <= 32 for b in batches)
    assert all(sorted(b) == sorted(INPUTS) and b["input_ids"].dtype == np.int64 for b in batches)
    again = training_batches(prepared_sst2, export.dir, rows=20, batch_size=8, max_length=32)
    assert all(np.array_equal(a["input_ids"], b["input_ids"]) for a, b in zip(batches, again))


# --- taggers: (batch, seq, tags) logits (the host side, everywhere) -----------------------

def test_onnx_num_labels_reads_the_last_dim(export, tagger, tmp_path):
    assert onnx_num_labels(export.onnx) == 2
    assert onnx_num_labels(tagger.onnx) == len(TAGS)
    dims = onnx.load(str(tagger.onnx)).graph.output[0].type.tensor_type.shape.dim
    assert [d.dim_param or d.dim_value for d in dims] == ["batch", "seq", len(TAGS)]
    # A graph that leaves the tag count symbolic states no labels (engine.json then takes
    # config.json's id2label).
    h = onnx.helper
    graph = h.make_graph([h.make_node("Identity", ["x"], ["logits"])], "g",
                         [h.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["batch", "seq", "tags"])],
                         [h.make_tensor_value_info("logits", onnx.TensorProto.FLOAT, ["batch", "seq", "tags"])])
    onnx.save(h.make_model(graph), str(tmp_path / "symbolic.onnx"))
    assert onnx_num_labels(tmp_path / "symbolic.onnx") is None


def test_parity_compares_a_tagger_at_real_tokens_only():
    batch = make_batch(3, 6)  # rows keep 6, 5, 4 tokens
    ref = np.random.default_rng(0).normal(size=(3, 6, len(TAGS))).astype(np.float32)
    got = ref.copy()
    got[batch["attention_mask"] == 0] += 100.0  # what padding outputs is never used
    a, b = compared_logits(got, ref, batch)
    assert a.shape == b.shape == (15, len(TAGS)) and np.array_equal(a, b)
    got[2, 3, 0] += 1.0  # the last real token of row 2
    a, b = compared_logits(got, ref, batch)
    assert np.abs(a - b).max() == pytest.approx(1.0)
    rows = ref[:, 0]  # a classifier's (batch, labels): every row, as it is
    a, b = compared_logits(rows, rows + 1, batch)
    assert np.array_equal(a, rows) and np.array_equal(b, rows + 1) and a.shape == (3, len(TAGS))
    with pytest.raises(ValueError, match=r"\(3, 6, 9\) vs the reference's \(3, 5, 9\)"):
        compared_logits(got, ref[:, :5], batch)
    with pytest.raises(ValueError, match="attention_mask of shape"):  # the mask's (3, 6) vs (3, 5)
        compared_logits(got[:, :5], ref[:, :5], batch)


def host_runner(onnx_path: Path, token_level: bool, min_shape: list[int], max_shape: list[int]):
    """A TrtRunner whose engine call is ONNX Runtime on the CPU: everything around it
    (chunking, padding up to the profile's min shape and dropping it again, empty
    batches) is host code, checked here without a GPU. Returns it and the shapes run."""
    import onnxruntime as ort

    session = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    runner = object.__new__(TrtRunner)  # no engine to load
    runner._inputs, runner._min, runner._max, runner._pad_id = list(INPUTS), min_shape, max_shape, 0
    runner._out_rank, runner.num_labels = 3 if token_level else 2, onnx_num_labels(onnx_path)
    shapes = []

    def execute(batch):
        shapes.append(batch["input_ids"].shape)
        return session.run(None, batch)[0]

    runner._execute = execute
    return runner, shapes


@pytest.mark.parametrize("model, token_level", [("tagger", True), ("export", False)])
def test_runner_pads_chunks_and_unpads_taggers_and_classifiers(request, model, token_level):
    art = request.getfixturevalue(model)
    runner, shapes = host_runner(art.onnx, token_level, [2, 8], [4, 64])
    labels = runner.num_labels
    for rows, seq in ((11, 20), (1, 5), (3, 64)):  # > max batch (chunked); < min batch and seq (padded); max seq
        batch = make_batch(rows, seq, seed=rows)
        got, ref = runner(batch), ort_logits(art.onnx, batch)
        assert got.shape == ref.shape == ((rows, seq, labels) if token_level else (rows, labels))
        got, ref = compared_logits(got, ref, batch)
        assert np.abs(got - ref).max() < 1e-4
    assert shapes == [(4, 20), (4, 20), (3, 20), (2, 8), (3, 64)]
    empty = runner({k: v[:0] for k, v in make_batch(2, 7).items()})
    assert empty.shape == ((0, 7, labels) if token_level else (0, labels)) and empty.dtype == np.float32
    assert len(shapes) == 5  # an empty batch never reaches the engine


def test_tagger_graphs_per_precision(tagger, conll_prepared, tmp_path):
    from compress.data.prepare import Prepared

    train_rows = len(Prepared.open(conll_prepared).split("train"))  # what the validation carve left
    calibration = training_batches(conll_prepared, tagger.dir, rows=32, batch_size=8, max_length=32)
    assert sum(len(b["input_ids"]) for b in calibration) == train_rows  # the whole CoNLL train split
    assert all(sorted(b) == sorted(INPUTS) for b in calibration)  # token ids only, never tags
    # a key that is no graph input (gold tags a caller kept) is not fed to calibration
    calibration[0] = {**calibration[0], "labels": np.zeros_like(calibration[0]["input_ids"])}
    fp16, int8 = tmp_path / "model.fp16.onnx", tmp_path / "model.int8.onnx"
    prepare_onnx(tagger.onnx, "fp16", fp16)
    assert prepare_onnx(tagger.onnx, "int8", int8, calibration)["calibration_rows"] == train_rows
    batch = make_batch(5, 24, seed=3)
    ref = ort_logits(tagger.onnx, batch)
    assert ref.shape == (5, 24, len(TAGS))
    for graph, atol in ((fp16, 1e-2), (int8, 0.1)):
        got = ort_logits(graph, batch)
        assert got.shape == ref.shape and got.dtype == np.float32
        a, b = compared_logits(got, ref, batch)
        assert np.abs(a - b).max() < atol, graph.name


# --- real engines (NVIDIA GPU + tensorrt only) -------------------------------------------

def small_config(tmp_path: Path, **kw) -> EngineConfig:
    return EngineConfig(**{"min_shape": [1, 8], "opt_shape": [4, 32], "max_shape": [8, 64], "workspace_mb": 512,
                           "timing_cache": str(tmp_path / "timing.cache"), **kw})


@needs_trt
def test_fp16_engine_matches_onnxruntime(export, tmp_path):
    cfg = small_config(tmp_path, precisions=["fp16"])
    engine_dir = tmp_path / "student-fp16"
    summary = build_engine(export.onnx, engine_dir, "fp16", cfg)
    assert summary["precision"] == "fp16" and summary["build_seconds"] > 0
    files = {f.name for f in engine_dir.iterdir()}
    assert {"model.engine", "engine.json", "config.json", "tokenizer_config.json"} <= files
    assert not any(name.endswith(".onnx") for name in files)
    meta = json.loads((engine_dir / "engine.json").read_text())
    assert meta["num_params"] == export.num_params and meta["num_labels"] == 2
    assert meta["onnx"]["sha256"] == sha256_file(export.onnx)
    assert meta["shapes"] == {"min": [1, 8], "opt": [4, 32], "max": [8, 64]}
    assert Path(cfg.timing_cache).is_file()

    artifact = Artifact("student-fp16", engine_dir, format="tensorrt", precision="fp16")
    assert skip_reason(artifact, "gpu") is None
    runner = load_runner(artifact, "gpu", threads=1)
    assert isinstance(runner, TrtRunner)
    assert (runner.num_labels, runner.num_params) == (2, export.num_params)
    assert runner.tokenizer("a fine film")["input_ids"][0] == runner.tokenizer.cls_token_id
    for rows, seq in ((11, 20), (3, 5), (1, 64)):  # > max batch (chunked); < min seq (padded); max seq
        batch = make_batch(rows, seq, seed=rows)
        got = runner(batch)
        runner.synchronize()
        assert got.shape == (rows, 2) and got.dtype == np.float32
        assert np.abs(got - ort_logits(export.onnx, batch)).max() < cfg.parity_atol["fp16"]
    with pytest.raises(ValueError, match="max_shape"):
        runner(make_batch(2, 65))
    check = parity_check(engine_dir, export.onnx, [make_batch(8, 32)], atol=0.05)
    assert check["passed"] and check["rows"] == check["positions"] == 8

    with pytest.raises(UserError, match="max_position_embeddings"):
        build_engine(export.onnx, tmp_path / "too-long", "fp16", small_config(tmp_path, max_shape=[8, 1024]))


@needs_trt
def test_build_engines_fp16_and_int8(export, tmp_path):
    cfg = small_config(tmp_path, max_shape=[16, 64], calibration_rows=48, calibration_batch_size=16)
    calls = []

    def calibration(onnx_path, rows, batch_size):
        calls.append((onnx_path, rows, batch_size))
        return [make_batch(batch_size, seq, seed) for seed, seq in enumerate((12, 24, 40, 9))]

    results = build_engines({"student": export.dir}, tmp_path / "trt", cfg, calibration)
    assert calls == [(export.onnx, 48, 16)]
    assert [(r["artifact"], r["precision"], r["status"]) for r in results] == [
        ("student", "fp16", "built"), ("student", "int8", "built")]
    for r in results:
        engine_dir = Path(r["engine_dir"])
        assert engine_dir == tmp_path / "trt" / f"student-{r['precision']}"
        assert r["parity"]["passed"] and r["parity"]["rows"] == 48
        assert r["parity"]["max_abs_diff"] <= cfg.parity_atol[r["precision"]]
        assert json.loads((engine_dir / "parity.json").read_text()) == r["parity"]
    meta = json.loads((tmp_path / "trt" / "student-int8" / "engine.json").read_text())
    assert meta["recipe"]["method"].startswith("explicit quantization")
    assert meta["timing_cache"]["reused"]  # written by the fp16 build just before
    if meta["recipe"]["calibration_cache"]:
        assert (tmp_path / "trt" / "student-int8" / "calibration.json").is_file()


@needs_trt
def test_tagger_engine_matches_onnxruntime_at_real_tokens(tagger, tmp_path):
    cfg = small_config(tmp_path, precisions=["fp16"])
    engine_dir = tmp_path / "tagger-fp16"
    build_engine(tagger.onnx, engine_dir, "fp16", cfg)
    meta = json.loads((engine_dir / "engine.json").read_text())
    assert meta["num_labels"] == len(TAGS) and meta["num_params"] == tagger.num_params
    runner = load_runner(Artifact("tagger-fp16", engine_dir, format="tensorrt", precision="fp16"), "gpu", threads=1)
    assert runner.num_labels == len(TAGS)
    for rows, seq in ((11, 20), (3, 5), (1, 64)):  # chunked; padded to the min seq and cut back; max seq
        batch = make_batch(rows, seq, seed=rows)
        got, ref = runner(batch), ort_logits(tagger.onnx, batch)
        runner.synchronize()
        assert got.shape == ref.shape == (rows, seq, len(TAGS)) and got.dtype == np.float32
        a, b = compared_logits(got, ref, batch)
        assert np.abs(a - b).max() < cfg.parity_atol["fp16"]
    assert runner({k: v[:0] for k, v in make_batch(2, 16).items()}).shape == (0, 16, len(TAGS))
    batch = make_batch(8, 32)
    check = parity_check(engine_dir, tagger.onnx, [batch], atol=cfg.parity_atol["fp16"])
    assert check["passed"] and check["rows"] == 8
    assert check["positions"] == int(batch["attention_mask"].sum())  # real tokens, not 8 x 32
