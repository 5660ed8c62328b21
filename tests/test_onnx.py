"""ONNX export (validated against PyTorch), fusion of uneven-head pruned models, ONNX
Runtime dynamic INT8 obeying keep_float, INT8 word embeddings (per row, ORT's per tensor,
or FP32), refusal of bad ONNX files, and a tagger's per-token logits through all of it."""
import numpy as np
import onnx
import pytest

from compress.core.config import ConfigError, build
from compress.data.prepare import Prepared
from compress.measure.harness import MeasureConfig, measure_with_reference
from compress.training.models import save_classifier
from compress.backends.onnx_export import (ExportConfig, OnnxFileError, ParityError, check_onnx_file, cpu_session,
                                  export_onnx, run_session)
from compress.backends.onnx_runtime import (OrtQuantConfig, embedding_error, int8_word_embeddings, node_group, quantize_onnx,
                                   quantized_groups)
from compress.backends.base import Artifact
from conftest import preset, tiny_model

FAST = ExportConfig(parity_shapes=[[1, 8], [3, 24], [2, 40]])  # 40 > the traced 16


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """A tiny model with uneven heads per layer, exported once for the module's tests."""
    from compress.data.prepare import prepare
    from conftest import SST2_ROWS, write_tsv

    root = tmp_path_factory.mktemp("onnx")
    write_tsv(root / "sst2/train.tsv", ["sentence", "label"], SST2_ROWS * 4)
    write_tsv(root / "sst2/dev.tsv", ["sentence", "label"], SST2_ROWS)
    prepare(preset("sst2", str(root / "sst2")), root / "prepared")
    model, tok = tiny_model()
    model.bert.prune_heads({0: [0], 1: [1, 2]})  # 3 and 2 heads left
    save_classifier(model, tok, root / "pruned", ["negative", "positive"])
    prepared = Prepared.open(root / "prepared")
    summary = export_onnx(root / "pruned", root / "pruned_onnx", FAST, prepared, plain_out_dir=root / "plain")
    return root, summary, prepared


def test_export_is_valid_self_contained_and_matches_pytorch(exported):
    root, summary, _ = exported
    path = root / "pruned_onnx/model.onnx"
    check_onnx_file(path)  # full checker, no external data
    model = onnx.load(str(path))
    assert all(t.data_location != onnx.TensorProto.EXTERNAL for t in model.graph.initializer)
    assert not [p for p in (root / "pruned_onnx").iterdir() if p.suffix in (".data", ".bin")]
    dims = {i.name: [d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim] for i in model.graph.input}
    assert dims == {n: ["batch", "sequence"] for n in ("input_ids", "attention_mask", "token_type_ids")}
    for key in ("parity_raw", "parity"):
        assert summary[key]["max_abs_diff"] <= 1e-4 and summary[key]["argmax_agreement"] == 1.0
        assert set(summary[key]["per_shape"]) == {"b1_s8", "b3_s24", "b2_s40"}
    assert (root / "pruned_onnx/config.json").is_file() and (root / "pruned_onnx/tokenizer.json").is_file()


def test_uneven_head_pruned_model_fuses_every_attention(exported):
    root, summary, _ = exported
    assert summary["fused_ops"]["Attention"] == 2 and summary["attention_fused"] == "2/2 layers"
    assert "attention_fusion_warning" not in summary
    plain = onnx.load(str(root / "plain/model.onnx"))
    assert all(n.domain in ("", "ai.onnx") for n in plain.graph.node)  # standard ops only, for TensorRT


def test_parity_failure_stops_the_export_and_writes_nothing(exported, tmp_path, monkeypatch):
    import compress.backends.onnx_export as ox

    root, _, prepared = exported
    real = ox.torch_logits
    monkeypatch.setattr(ox, "torch_logits", lambda m, b: real(m, b) + 1e-3)  # a 1e-3 disagreement
    with pytest.raises(ParityError, match="above export_onnx.parity_atol"):
        export_onnx(root / "pruned", tmp_path / "out", FAST, prepared)
    assert not (tmp_path / "out").exists()
    assert not list(tmp_path.glob("out*"))  # no temporary leftovers either


@pytest.mark.parametrize("data, message", [
    ({"parity_atol": 0}, "parity_atol must be > 0"),
    ({"parity_shapes": [[0, 8]]}, "parity shape"),
    ({"opset": 9}, "opset"),
])
def test_export_config_rejects_bad_values(data, message):
    with pytest.raises(ConfigError, match=message):
        build(ExportConfig, data, "export_onnx")


FLOAT_EMB = OrtQuantConfig(keep_float=["embeddings", "layernorm", "classifier"], quantize_embeddings=False)


@pytest.fixture(scope="module")
def int8_graphs(exported):
    """The fused graph quantized once per word-embedding choice: per_row (the default),
    per_tensor (ORT's QEmbedLayerNormalization) and FP32."""
    root, _, _ = exported
    out = {}
    for name, cfg in (("per_row", OrtQuantConfig()), ("per_tensor", OrtQuantConfig(embedding_scheme="per_tensor")),
                      ("float", FLOAT_EMB)):
        out[name] = quantize_onnx(root / "pruned_onnx", root / f"int8_{name}", cfg), root / f"int8_{name}"
    return out


def _batches():
    g = np.random.default_rng(0)
    out = []
    for b, s in ((1, 8), (3, 40)):
        ids = g.integers(1000, 30000, (b, s))
        mask = np.ones_like(ids)
        mask[-1, s // 2:] = 0  # padding inside the batch
        types = np.zeros_like(ids)
        types[:, s // 3:] = 1
        out.append({"input_ids": ids, "attention_mask": mask, "token_type_ids": types})
    return out


def _dequantized_table_copy(src, dst, name="bert.embeddings.word_embeddings.weight"):
    """src with its FP32 word-embedding table replaced by the per-row INT8 values, dequantized."""
    import torch
    from onnx import numpy_helper

    from compress.backends.torchao import dequantize_rows, quantize_rows

    model = onnx.load(str(src))
    t = next(t for t in model.graph.initializer if t.name == name)
    deq = dequantize_rows(*quantize_rows(torch.from_numpy(numpy_helper.to_array(t).copy()))).numpy()
    t.CopyFrom(numpy_helper.from_array(deq, name))
    onnx.save(model, str(dst))
    return dst


def test_onnx_int8_default_has_int8_word_embeddings_and_float_classifier(int8_graphs):
    summary, path = int8_graphs["per_row"]
    groups = quantized_groups(path / "model.onnx")
    assert groups == summary["quantized_nodes_by_group"]
    assert groups.get("attention", 0) >= 2 and groups.get("ffn", 0) == 4 and groups.get("pooler", 0) == 1
    assert groups.get("embeddings") == 1 and "classifier" not in groups
    ops = summary["op_counts"]
    # the other fusions stay; EmbedLayerNormalization is replaced by its INT8-gather equivalent
    assert ops.get("QAttention") == 2 and "EmbedLayerNormalization" not in ops and ops.get("ReduceSum") == 1
    assert ops.get("SkipLayerNormalization") == 2 * 2 + 1  # two per layer, one for the embeddings
    assert summary["word_embeddings"]["replaced"]["op_type"] == "EmbedLayerNormalization"
    assert (path / "tokenizer.json").is_file()
    tables = {t.name: t for t in onnx.load(str(path / "model.onnx")).graph.initializer}
    rows = tables["/bert/embeddings/word_embeddings_int8/rows"]
    assert rows.data_type == onnx.TensorProto.INT8 and list(rows.dims) == [30522, 64]
    assert list(tables["/bert/embeddings/word_embeddings_int8/scales"].dims) == [30522, 1]
    assert "bert.embeddings.word_embeddings.weight" not in tables


def test_word_embedding_choices_size_and_logits(exported, int8_graphs):
    root, _, _ = exported
    fp32 = cpu_session(root / "pruned_onnx/model.onnx", 1)
    size = {k: s["size_mb"] for k, (s, _) in int8_graphs.items()}
    table_mib = 30522 * 64 * 3 / 2**20  # 4 bytes -> 1 byte per weight
    assert size["float"] - size["per_row"] > 0.9 * table_mib and size["float"] - size["per_tensor"] > 0.9 * table_mib
    assert int8_graphs["per_tensor"][0]["op_counts"].get("QEmbedLayerNormalization") == 1
    assert int8_graphs["float"][0]["op_counts"].get("EmbedLayerNormalization") == 1
    assert "embeddings" not in int8_graphs["float"][0]["quantized_nodes_by_group"]
    for name, (_, path) in int8_graphs.items():
        s = cpu_session(path / "model.onnx", 1)
        for batch in _batches():
            assert np.abs(run_session(s, batch) - run_session(fp32, batch)).max() < 0.1, name


@pytest.mark.parametrize("graph", ["pruned_onnx", "plain"])  # fused (EmbedLayerNormalization) and unfused (Gather)
def test_per_row_rewrite_computes_what_the_float_graph_does_with_the_same_table(exported, tmp_path, graph):
    root, _, _ = exported
    src = root / graph / "model.onnx"
    replaced = int8_word_embeddings(src, tmp_path / "int8_rows.onnx")
    assert replaced["op_type"] == ("EmbedLayerNormalization" if graph == "pruned_onnx" else "Gather")
    check_onnx_file(tmp_path / "int8_rows.onnx")
    ref = cpu_session(_dequantized_table_copy(src, tmp_path / "ref.onnx"), 1)
    new = cpu_session(tmp_path / "int8_rows.onnx", 1)
    for batch in _batches():  # padded rows, both token types: mask index and segments agree
        assert np.abs(run_session(new, batch) - run_session(ref, batch)).max() < 1e-5


def test_per_row_error_is_far_below_per_tensor():
    g = np.random.default_rng(0)
    table = g.normal(0, 0.05, (2000, 64)) * g.uniform(0.2, 3.0, (2000, 1))  # rows of different scales
    table[0, 0] = 1.0  # one outlier sets a per-tensor scale for everyone
    row, tensor = embedding_error(table, "per_row"), embedding_error(table, "per_tensor")
    assert row["mean"] < 0.01 and tensor["mean"] > 3 * row["mean"] and row["max"] < tensor["max"]


def test_onnx_int8_quantizes_what_keep_float_leaves_out(exported, tmp_path):
    root, _, _ = exported
    quantize_onnx(root / "pruned_onnx", tmp_path / "int8", OrtQuantConfig(keep_float=["layernorm", "attention", "ffn"]))
    groups = quantized_groups(tmp_path / "int8/model.onnx")
    assert set(groups) == {"embeddings", "pooler", "classifier"}


# --- the accuracy check on validation (compress.backends.onnx_runtime_check) -----------------

def _float_and_quantized(path) -> tuple[set[str], set[str]]:
    """Names of the FP32 graph's candidate nodes left in float / quantized in an INT8 graph:
    a quantized node is renamed "<name>_quant" ("<name>_MatMul_quant" for a Gemm)."""
    ops = {n.name: n.op_type for n in onnx.load(str(path)).graph.node}
    floats = {n for n, op in ops.items() if op in ("Attention", "MatMul", "Gemm")}
    floats |= {n[:-len("_MatMul")] for n in floats if n.endswith("Gemm_MatMul")}
    quantized = {n[:-len("_quant")] for n in ops if n.endswith("_quant")}
    return floats, quantized | {n[:-len("_MatMul")] for n in quantized if n.endswith("Gemm_MatMul")}


def test_accuracy_check_reads_validation_and_keeps_a_graph_within_the_bound(exported, int8_graphs, tmp_path):
    root, _, prepared = exported
    s = quantize_onnx(root / "pruned_onnx", tmp_path / "int8", OrtQuantConfig(max_drop=0.5), root / "prepared")
    c = s["accuracy_check"]
    assert c["split"] == "validation" and c["rows"] == len(prepared.validation()) > 0
    assert c["sha256"] == prepared.sha256("validation") and c["metric_name"] == "accuracy"
    assert c["met"] and c["float_nodes"] == [] and c["tried"][0]["drop_upper_bound"] <= 0.5
    # nothing left in float by the check: the same graph as quantize_onnx without data
    assert s["sha256"] == int8_graphs["per_row"][0]["sha256"]
    assert "no prepared validation split" in int8_graphs["per_row"][0]["accuracy_check"]["skipped"]
    off = quantize_onnx(root / "pruned_onnx", tmp_path / "off", OrtQuantConfig(max_drop=None), root / "prepared")
    assert "max_drop is null" in off["accuracy_check"]["skipped"]


def test_accuracy_check_leaves_the_most_sensitive_nodes_in_float_until_within_the_bound(
        exported, tmp_path, monkeypatch):
    """A tiny random model's INT8 graph agrees with its parent, so the failing bounds come
    from a stand-in: the graph as quantized and with one node in float fail, two pass."""
    from compress.backends import onnx_runtime_check as rc

    root, _, _ = exported
    bounds = iter([0.5, 0.3, 0.004])
    monkeypatch.setattr(rc, "drop_upper_bound", lambda *a, **k: next(bounds))
    s = quantize_onnx(root / "pruned_onnx", tmp_path / "int8", OrtQuantConfig(), root / "prepared")
    c = s["accuracy_check"]
    ranked = list(c["ranking_kl"])
    before_floats = _float_and_quantized(root / "pruned_onnx/model.onnx")[0]
    # every node quantize_dynamic quantized is ranked (not the classifier: keep_float)
    assert set(ranked) == {n for n in before_floats if "/classifier/" not in n} and len(ranked) >= 8
    kl = list(c["ranking_kl"].values())
    assert kl == sorted(kl) and all(v >= 0 for v in kl)  # least divergence with it in float first
    assert c["met"] and c["float_nodes"] == ranked[:2]
    assert [t["float_nodes"] for t in c["tried"]] == [[], ranked[:1], ranked[:2]]
    floats, quantized = _float_and_quantized(tmp_path / "int8/model.onnx")
    assert set(ranked[:2]) <= floats and set(ranked[2:]) <= quantized and not set(ranked[:2]) & quantized
    assert s["nodes_kept_float"] > len(ranked[:2])  # keep_float's nodes and the check's


def test_accuracy_check_keeps_the_lowest_bound_when_nothing_passes(exported, tmp_path, monkeypatch):
    from compress.backends import onnx_runtime_check as rc

    root, _, _ = exported
    bounds = iter([0.5, 0.2, 0.4, 0.3])
    monkeypatch.setattr(rc, "drop_upper_bound", lambda *a, **k: next(bounds))
    c = quantize_onnx(root / "pruned_onnx", tmp_path / "int8", OrtQuantConfig(max_float_nodes=3),
                      root / "prepared")["accuracy_check"]
    ranked = list(c["ranking_kl"])
    assert not c["met"] and c["float_nodes"] == ranked[:1] and len(c["tried"]) == 4 and "floor" in c["why"]
    floats, _ = _float_and_quantized(tmp_path / "int8/model.onnx")
    assert ranked[0] in floats and not set(ranked[1:]) & floats


def test_revert_until_stops_at_the_first_graph_within_the_bound():
    from compress.backends.onnx_runtime_check import revert_until

    def checker(bounds):
        return lambda nodes: {"float_nodes": nodes, "drop_upper_bound": bounds[len(nodes)]}

    ranked = ["a", "b", "c", "d"]
    assert revert_until(ranked, checker([0.0]), 0.01, 4)[0] == []
    keep, tried = revert_until(ranked, checker([0.05, 0.02, 0.01, 0.0, 0.0]), 0.01, 4)
    assert keep == ["a", "b"] and len(tried) == 3  # 0.01 is within a max drop of 0.01
    keep, tried = revert_until(ranked, checker([0.05, 0.03, 0.02, 0.02, 0.04]), 0.01, 4)
    assert keep == ["a", "b"] and len(tried) == 5  # lowest bound, fewest float nodes on a tie
    assert revert_until(ranked, checker([0.05]), 0.01, 0) == ([], [{"float_nodes": [], "drop_upper_bound": 0.05}])


def test_mean_kl_is_zero_for_the_same_output_and_grows_with_the_difference():
    from compress.backends.onnx_runtime_check import mean_kl

    p = np.array([[2.0, 0.0, -1.0], [0.5, 0.5, 0.0]])
    assert mean_kl(p, p) == pytest.approx(0.0, abs=1e-12)
    assert 0 < mean_kl(p, p + [[0, 0.5, 0], [0, 0, 0]]) < mean_kl(p, p + [[0, 2.0, 0], [0, 0, 0]])


@pytest.mark.parametrize("data, message", [
    ({"keep_float": ["classifier"]}, "must include 'layernorm'"),
    ({"keep_float": ["embeddings", "layernorm"]}, "quantize_embeddings is true"),
    ({"keep_float": ["attention", "ffn", "pooler", "classifier", "layernorm"], "quantize_embeddings": False},
     "leaves nothing to quantize"),
    ({"embedding_scheme": "per_column"}, "embedding_scheme must be one of per_row, per_tensor"),
    ({"quantize_embeddings": 1}, "quantize_embeddings"),
    ({"max_drop": 1.5}, "max_drop must be in"),
    ({"confidence": 0.3}, "confidence must be in"),
    ({"max_float_nodes": -1}, "max_float_nodes must be >= 0"),
    ({"rank_rows": 0}, "rank_rows must be >= 1"),
    ({"max_dorp": 0.01}, "max_dorp"),
])
def test_onnx_int8_config_rejects_illegal_combinations(data, message):
    with pytest.raises(ConfigError, match=message):
        build(OrtQuantConfig, data, "onnx_int8")
    # the same groups with INT8 embeddings leave the embeddings to quantize
    build(OrtQuantConfig, {"keep_float": ["attention", "ffn", "pooler", "classifier", "layernorm"]}, "onnx_int8")


def test_node_groups_of_exported_names():
    assert node_group("/bert/encoder/layer.0/intermediate/dense/MatMul", "MatMul") == "ffn"
    assert node_group("/bert/encoder/layer.0/output/dense/MatMul", "MatMul") == "ffn"
    assert node_group("/bert/encoder/layer.0/attention/output/dense/MatMul", "MatMul") == "attention"
    assert node_group("Attention_1", "Attention") == "attention"
    assert node_group("/classifier/Gemm", "Gemm") == "classifier"
    assert node_group("/classifier/Gemm_MatMul_quant", "MatMulInteger") == "classifier"
    assert node_group("EmbedLayerNormalization_0", "EmbedLayerNormalization") == "embeddings"


def test_int8_and_fp32_onnx_measured_side_by_side(exported, int8_graphs):
    root, _, _ = exported
    int8 = int8_graphs["per_row"][1]
    cfg = MeasureConfig(targets=["cpu", "gpu"], points=[[1, 16]], warmup_queries=1, min_queries=2,
                        min_duration_s=0.0, isolate=False)
    records, details = measure_with_reference(
        [Artifact("int8", int8, "onnx", "int8", parent="fp32")],
        [Artifact("fp32", root / "pruned_onnx", "onnx", "fp32")], root / "prepared", cfg)
    cpu = next(r for r in records if r["target"] == "cpu")
    gpu = next(r for r in records if r["target"] == "gpu")
    assert cpu["status"] == "ok" and cpu["backend"] == "onnxruntime-cpu" and cpu["num_params"] > 0
    assert 0 <= cpu["agreement_with_parent"] <= 1 and details["speedup_vs_parent"]["int8.cpu.b1_s16"] > 0
    assert gpu["status"] == "skipped" and gpu["reason"]


def test_padded_and_long_batches_run_through_the_session(exported):
    root, _, _ = exported
    s = cpu_session(root / "pruned_onnx/model.onnx", 1)
    ids = np.full((2, 300), 2000, dtype=np.int64)
    mask = np.ones_like(ids)
    mask[1, 10:] = 0
    out = run_session(s, {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)})
    assert out.shape == (2, 2) and np.isfinite(out).all()


def test_bad_onnx_files_are_refused_with_the_reason(exported, tmp_path):
    root, _, _ = exported
    with pytest.raises(OnnxFileError, match="not found"):
        check_onnx_file(tmp_path / "missing.onnx")
    data = (root / "pruned_onnx/model.onnx").read_bytes()
    (tmp_path / "truncated.onnx").write_bytes(data[: len(data) // 3])
    with pytest.raises(OnnxFileError, match="truncated.onnx"):
        check_onnx_file(tmp_path / "truncated.onnx")
    # external data pointing outside the model folder
    model = onnx.load(str(root / "plain/model.onnx"))
    t = max(model.graph.initializer, key=lambda t: len(t.raw_data))
    t.data_location = onnx.TensorProto.EXTERNAL
    t.ClearField("raw_data")
    t.external_data.add(key="location", value="../../etc/passwd")
    (tmp_path / "evil").mkdir()
    onnx.save(model, str(tmp_path / "evil/model.onnx"))
    with pytest.raises(OnnxFileError, match="outside the model folder"):
        check_onnx_file(tmp_path / "evil/model.onnx")


# --- a tagger (conll2003): per-token logits ---------------------------------------------------


def test_tagger_exports_per_token_logits_and_quantizes(conll, tmp_path):  # noqa: F811
    """A BertForTokenClassification exports with (batch, sequence, tags) logits, both axes
    dynamic; parity is per real token; the fused graph and its INT8 run in the runner and
    agree with PyTorch / FP32 on the scored positions (each word's first piece)."""
    from compress.training.models import load_saved
    from compress.backends.onnx_export import parity_batches
    from compress.backends.onnx_runtime import OrtRunner
    from compress.data.tokens import collate, encode
    from compress.training.train import predict_logits

    root, _, prepared, _ = conll
    summary = export_onnx(root / "teacher", tmp_path / "onnx", FAST, prepared, plain_out_dir=tmp_path / "plain")
    for graph in ("onnx", "plain"):
        (out,) = onnx.load(str(tmp_path / graph / "model.onnx")).graph.output
        assert [d.dim_param or d.dim_value for d in out.type.tensor_type.shape.dim] == ["batch", "sequence", 9]
    tok = load_saved(root / "teacher")[1]
    real = sum(int(b["attention_mask"].sum()) for b in parity_batches(prepared, tok, FAST.parity_shapes))
    assert real < 1 * 8 + 3 * 24 + 2 * 40  # the parity batches carry padding, which is not compared
    for key in ("parity_raw", "parity"):
        assert summary[key]["max_abs_diff"] <= FAST.parity_atol and summary[key]["argmax_agreement"] == 1.0
        assert summary[key]["positions"] == real
    # no pooler in a tagger: the fusions still apply, every attention block fused
    assert summary["attention_fused"] == "2/2 layers" and "attention_fusion_warning" not in summary
    assert summary["fused_ops"]["EmbedLayerNormalization"] == 1

    runner = OrtRunner(Artifact("tagger_onnx", tmp_path / "onnx", "onnx", "fp32"), "cpu", 1)
    dev = encode(runner.tokenizer, prepared.split("dev"), 64)
    idx = list(range(len(dev)))
    batch = collate(dev, idx)
    fp32 = runner(batch)
    assert runner.num_labels == 9 and fp32.shape == (len(dev), batch["input_ids"].shape[1], 9)
    model = load_saved(root / "teacher")[0]
    reference = predict_logits(model, dev)  # PyTorch, one row per word
    assert np.abs(dev.scored(fp32, idx) - reference).max() <= FAST.parity_atol
    assert np.abs(reference).max() > 1.0  # a trained tagger: logits of a useful size

    q = quantize_onnx(tmp_path / "onnx", tmp_path / "int8", OrtQuantConfig())
    groups = q["quantized_nodes_by_group"]
    assert groups.get("embeddings") == 1 and groups.get("ffn") == 4 and groups.get("attention", 0) >= 2
    assert "classifier" not in groups and "pooler" not in groups  # the per-token classifier stays float
    int8 = OrtRunner(Artifact("tagger_onnx_int8", tmp_path / "int8", "onnx", "int8"), "cpu", 1)(batch)
    assert int8.shape == fp32.shape and np.isfinite(int8).all()
    a, b = dev.scored(int8, idx).argmax(-1), dev.scored(fp32, idx).argmax(-1)
    assert len(a) == 25 and (a == b).mean() >= 0.8
    # the classifier, MatMul + Add on every position, is quantized when keep_float allows it
    quantize_onnx(tmp_path / "onnx", tmp_path / "int8_all", OrtQuantConfig(keep_float=["layernorm"]))
    assert "classifier" in quantized_groups(tmp_path / "int8_all/model.onnx")


def test_predict_on_an_onnx_artifact_imports_no_torch_and_prints_no_warning(exported):
    """The ONNX Runtime backend needs neither torch nor transformers at inference: the
    tokenizer comes from tokenizers (compress.data.tokenizer), the format from manifest.json."""
    from conftest import predict_in_a_fresh_process

    root, _, _ = exported
    lines, heavy, stderr = predict_in_a_fresh_process(root / "pruned_onnx")
    assert heavy == set() and "Warning" not in stderr, stderr
    assert len(lines) == 2 and all(line.split("\t")[0] in ("negative", "positive") for line in lines)
