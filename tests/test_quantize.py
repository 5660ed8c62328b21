"""PyTorch dynamic INT8 (torchao): the float/INT8 split obeys the params, the word
embeddings are INT8 per row (or FP32 on request), storage reloads without pickle and
bit-identically, tampered files are refused, the runner measures it."""
import json
import pickle

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from compress.core.config import ConfigError, build
from compress.measure.harness import MeasureConfig, measure
from compress.backends.torchao import (Int8Embedding, QuantizeConfig, count_int8_parameters, dequantize_rows, group_of,
                               int8_unavailable, load_dynamic_int8, quantize, quantize_checkpoint, quantize_rows,
                               quantized_linears, save_dynamic_int8)
from compress.backends.base import Artifact
from conftest import tiny_model

FLOAT_EMB = QuantizeConfig(keep_float=["embeddings", "layernorm", "classifier"], quantize_embeddings=False)


def _inputs(batch=3, seq=12, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1000, 5000, (batch, seq), generator=g)
    mask = torch.ones_like(ids)
    mask[0, seq // 2:] = 0  # one padded row
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": torch.zeros_like(ids)}


def _logits(model, **kw):
    with torch.inference_mode():
        return model(**_inputs(**kw)).logits


@pytest.fixture(scope="module")
def pruned():
    model, tok = tiny_model()
    model.eval()
    model.bert.prune_heads({0: [1, 2], 1: [0]})  # uneven heads, as the pruned student has
    return model, tok


@pytest.fixture(scope="module")
def saved(pruned, tmp_path_factory):
    """The pruned tiny model quantized with INT8 and with FP32 word embeddings, each saved once."""
    model, tok = pruned
    root = tmp_path_factory.mktemp("torchao")
    out = {}
    for name, cfg in (("int8_emb", QuantizeConfig()), ("float_emb", FLOAT_EMB)):
        q = quantize(model, cfg)
        save_dynamic_int8(q, tok, root / name, "pytorch-dynamic")
        out[name] = (q, root / name)
    return out


def test_module_groups():
    assert group_of("bert.encoder.layer.1.attention.self.query") == "attention"
    assert group_of("bert.encoder.layer.1.attention.output.dense") == "attention"
    assert group_of("bert.encoder.layer.1.attention.output.LayerNorm") == "layernorm"
    assert group_of("bert.encoder.layer.0.intermediate.dense") == "ffn"
    assert group_of("bert.encoder.layer.0.output.dense") == "ffn"
    assert group_of("bert.pooler.dense") == "pooler"
    assert group_of("classifier") == "classifier"
    assert group_of("bert.embeddings.word_embeddings") == "embeddings"


def test_default_quantizes_every_linear_but_the_classifier_and_the_word_embeddings(saved, pruned):
    from torchao.quantization import Int8Tensor

    q = saved["int8_emb"][0]
    names = quantized_linears(q)
    assert len(names) == 2 * 6 + 1  # per layer: q, k, v, attention out, ffn in, ffn out; + pooler
    assert "classifier" not in names and not isinstance(q.classifier.weight, Int8Tensor)
    assert isinstance(q.bert.pooler.dense.weight, Int8Tensor)
    assert q.bert.pooler.dense.weight.act_quant_kwargs is not None  # dynamic INT8 activations
    assert isinstance(q.bert.embeddings.word_embeddings, Int8Embedding)
    model = pruned[0]  # the float model is untouched
    assert not quantized_linears(model) and isinstance(model.bert.embeddings.word_embeddings, torch.nn.Embedding)


def test_keep_float_groups_are_honoured():
    model, _ = tiny_model()
    q = quantize(model.eval(), QuantizeConfig(keep_float=["layernorm", "ffn", "pooler"], per_channel=False))
    names = quantized_linears(q)
    assert names and all(group_of(n) in ("attention", "classifier") for n in names)
    assert "classifier" in names and q.classifier.weight.scale.numel() == 1  # per tensor


@pytest.mark.parametrize("data, message", [
    ({"keep_float": ["classifier"]}, "must include 'layernorm'"),
    ({"keep_float": ["embeddings", "layernorm"]}, "quantize_embeddings is true"),
    ({"keep_float": ["layernorm", "biases"]}, "unknown group 'biases'"),
    ({"engine": "x86"}, "engine"),  # torch.ao's engine setting is gone
    ({"quantize_embeddings": "yes"}, "quantize_embeddings"),
    ({"per_chanel": True}, "per_channel"),  # a typo gets the nearest key suggested
])
def test_config_rejects_illegal_settings(data, message):
    with pytest.raises(ConfigError, match=message):
        build(QuantizeConfig, data, "quantize")


def test_config_accepts_float_embeddings_listed_or_not():
    assert not build(QuantizeConfig, {"quantize_embeddings": False}, "quantize").quantize_embeddings
    assert build(QuantizeConfig, {"keep_float": ["embeddings", "layernorm"], "quantize_embeddings": False},
                 "quantize").keep_float == ["embeddings", "layernorm"]


def test_no_linear_left_to_quantize_is_an_error():
    with pytest.raises(ConfigError, match="leaves no Linear"):
        build(QuantizeConfig, {"keep_float": ["layernorm", "attention", "ffn", "pooler", "classifier"]}, "quantize")


@pytest.mark.parametrize("variant", ["int8_emb", "float_emb"])
def test_save_and_reload_is_bit_identical_without_pickle(saved, pruned, variant, monkeypatch):
    q, path = saved[variant]
    assert sorted(p.name for p in path.iterdir()) == sorted(
        ["config.json", "manifest.json", "model.safetensors", "quantization.json", "special_tokens_map.json",
         "tokenizer.json", "tokenizer_config.json", "vocab.txt"])  # safetensors + json (+ the vocabulary), no pickle
    with monkeypatch.context() as m:  # loading never unpickles anything
        m.setattr(pickle, "loads", lambda *a, **k: pytest.fail("pickle.loads called"))
        m.setattr(pickle, "load", lambda *a, **k: pytest.fail("pickle.load called"))
        m.setattr(torch, "load", lambda *a, **k: pytest.fail("torch.load called"))
        q2, _, meta = load_dynamic_int8(path)
    assert meta["library"] == "torchao" and meta["format"] == "pytorch_int8"
    assert meta["quantized_modules"] == quantized_linears(q) == quantized_linears(q2)
    for kw in ({}, {"batch": 1, "seq": 40, "seed": 1}):
        assert torch.equal(_logits(q, **kw), _logits(q2, **kw))
    assert q2.config.pruned_heads in ({"0": [1, 2], "1": [0]}, {0: [1, 2], 1: [0]})
    assert count_int8_parameters(q2) == sum(p.numel() for p in pruned[0].parameters())


def test_word_embeddings_int8_on_and_off(saved, pruned):
    model = pruned[0]
    (q_on, on), (q_off, off) = saved["int8_emb"], saved["float_emb"]
    size = {p: (p / "model.safetensors").stat().st_size for p in (on, off)}
    vocab, hidden = model.bert.embeddings.word_embeddings.weight.shape
    assert size[off] - size[on] > 0.7 * vocab * hidden * 3  # 4 bytes -> 1 byte per weight
    t_on, t_off = load_file(str(on / "model.safetensors")), load_file(str(off / "model.safetensors"))
    key = "bert.embeddings.word_embeddings"
    assert t_on[f"{key}.weight_int8"].dtype == torch.int8 and t_on[f"{key}.weight_scale"].shape == (vocab, 1)
    assert f"{key}.weight" not in t_on and t_off[f"{key}.weight"].dtype == torch.float32
    assert json.loads((on / "quantization.json").read_text())["word_embeddings"] == "int8-symmetric-per-row"
    assert json.loads((off / "quantization.json").read_text())["word_embeddings"] == "float32"
    ref = _logits(model)
    for q in (q_on, q_off):
        assert (_logits(q) - ref).abs().max() < 0.1
    assert not torch.equal(_logits(q_on), _logits(q_off))  # the table really differs


def test_per_row_int8_rows():
    w = torch.tensor([[0.5, -1.0, 0.25], [0.0, 0.0, 0.0], [3.0, 1.5, -0.75]])
    q, s = quantize_rows(w)
    assert q.dtype == torch.int8 and s.shape == (3, 1) and q.abs().max() == 127
    assert torch.allclose(dequantize_rows(q, s), w, atol=1e-2 * w.abs().max())
    assert torch.equal(q[1], torch.zeros(3, dtype=torch.int8))  # an all-zero row stays zero
    emb = torch.nn.Embedding(10, 4)
    qe = Int8Embedding.from_float(emb)
    ids = torch.tensor([[1, 9, 1], [0, 3, 2]])
    assert torch.equal(qe(ids), dequantize_rows(qe.weight_int8, qe.weight_scale)[ids])  # gather == dequantize


def _resave(path, change):
    """Rewrite model.safetensors with change(tensors) and a matching sha256 in quantization.json."""
    from compress.core.io import sha256_file

    t = load_file(str(path / "model.safetensors"))
    change(t)
    save_file(t, str(path / "model.safetensors"), metadata={"format": "pt"})
    meta = json.loads((path / "quantization.json").read_text())
    meta["sha256"]["model.safetensors"] = sha256_file(path / "model.safetensors")
    (path / "quantization.json").write_text(json.dumps(meta))


def test_load_refuses_tampered_files_naming_them(saved, tmp_path):
    import shutil

    src = saved["int8_emb"][1]
    fresh = lambda name: shutil.copytree(src, tmp_path / name)  # noqa: E731
    # a byte changed behind quantization.json's back
    d = fresh("flipped")
    data = bytearray((d / "model.safetensors").read_bytes())
    data[-100] ^= 0x01
    (d / "model.safetensors").write_bytes(bytes(data))
    with pytest.raises(ValueError, match=r"flipped/model\.safetensors: sha256 does not match"):
        load_dynamic_int8(d)
    # int8 weights stored as float (hash updated too): refused by dtype, naming file and tensor
    d = fresh("dtype")
    key = "bert.encoder.layer.0.intermediate.dense.weight_int8"
    _resave(d, lambda t: t.__setitem__(key, t[key].float()))
    with pytest.raises(ValueError, match=rf"dtype/model\.safetensors: {key} is torch.float32, expected torch.int8"):
        load_dynamic_int8(d)
    # scales altered consistently: the probe catches the different model
    d = fresh("scale")
    key = "bert.encoder.layer.0.intermediate.dense.weight_scale"
    _resave(d, lambda t: t.__setitem__(key, t[key] * 3))
    with pytest.raises(ValueError, match="probe logits differ"):
        load_dynamic_int8(d)
    # a quantized weight missing
    d = fresh("missing")
    _resave(d, lambda t: t.pop("bert.pooler.dense.weight_scale"))
    with pytest.raises(ValueError, match=r"missing/model\.safetensors: no INT8 weight for module bert\.pooler\.dense"):
        load_dynamic_int8(d)
    # an artifact of the former torch.ao route
    d = fresh("torch_ao")
    (d / "quantization.json").write_text(json.dumps({"route": "pytorch-dynamic", "format": "pytorch_int8",
                                                      "engine": "x86", "quantized_modules": []}))
    with pytest.raises(ValueError, match="torch.ao route.*re-run the quantize stage"):
        load_dynamic_int8(d)


def test_reload_rejects_a_mismatched_checkpoint(saved, tmp_path):
    import shutil

    d = shutil.copytree(saved["float_emb"][1], tmp_path / "q")
    cfg = json.loads((d / "config.json").read_text())
    cfg["intermediate_size"] = 256  # the stored FFN weights no longer fit
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match="intermediate.*shape"):
        load_dynamic_int8(d)
    with pytest.raises(FileNotFoundError, match="no quantization.json"):
        load_dynamic_int8(tmp_path)


def test_quantize_checkpoint_and_measure_through_the_runner(tmp_path, tiny_model_dir, prepared_sst2, monkeypatch):
    monkeypatch.setenv("COMPRESS_CPU_FLAGS", "avx2,avx512_vnni")  # measured here whatever this CPU has (tiny model)
    summary = quantize_checkpoint(tiny_model_dir, tmp_path / "int8", QuantizeConfig())
    assert summary["quantized_modules"] == 13 and summary["float_linears"] == ["classifier"]
    assert summary["word_embeddings"] == "int8-symmetric-per-row" and summary["library"] == "torchao"
    cfg = MeasureConfig(targets=["cpu", "gpu"], points=[[1, 16]], warmup_queries=1, min_queries=2,
                        min_duration_s=0.0, isolate=False)
    cpu, gpu = measure(Artifact("tiny_int8", tmp_path / "int8", "pytorch_int8", "int8"), prepared_sst2, cfg)
    assert cpu["status"] == "ok" and cpu["backend"] == "pytorch-cpu" and 0 <= cpu["accuracy"] <= 1
    assert gpu["status"] == "skipped" and "CPU only" in gpu["reason"]
    # the stored Linear weights are int8 tensors, one scale per output channel
    t = load_file(str(tmp_path / "int8/model.safetensors"))
    w = t["bert.encoder.layer.0.intermediate.dense.weight_int8"]
    assert w.dtype == torch.int8 and t["bert.encoder.layer.0.intermediate.dense.weight_scale"].numel() == w.shape[0]
    assert cpu["size_mb"] < 0.5 * np.prod(t["bert.embeddings.word_embeddings.weight_int8"].shape) * 4 / 2**20


def test_int8_runner_is_skipped_with_the_reason_on_cpus_without_int8_dot_products(tmp_path, tiny_model_dir,
                                                                                  prepared_sst2, monkeypatch):
    assert int8_unavailable({"avx2": True, "avx512f": True}).startswith("this CPU has no INT8 dot-product")
    for flag in ("amx_int8", "avx512_vnni", "avx_vnni"):
        assert int8_unavailable({"avx2": True, flag: True}) is None
    quantize_checkpoint(tiny_model_dir, tmp_path / "int8", QuantizeConfig())
    monkeypatch.setenv("COMPRESS_CPU_FLAGS", "avx2,fma")  # an AVX2-only CPU
    cfg = MeasureConfig(targets=["cpu"], points=[[1, 16]], warmup_queries=1, min_queries=2, isolate=False)
    (cpu,) = measure(Artifact("tiny_int8", tmp_path / "int8", "pytorch_int8", "int8"), prepared_sst2, cfg)
    assert cpu["status"] == "skipped" and "no INT8 dot-product instructions" in cpu["reason"]
    assert cpu["accuracy"] is None and cpu["points"] == []


# --- a tagger (BertForTokenClassification: logits per token, no pooler) ---------------------



def test_tagger_quantizes_reloads_and_runs_through_the_runner(conll, tmp_path):
    from compress.training.models import load_saved
    from compress.backends.base import load_runner
    from compress.data.tokens import collate, encode

    root, _, prepared, _ = conll
    summary = quantize_checkpoint(root / "teacher", tmp_path / "int8", QuantizeConfig())
    assert summary["quantized_modules"] == 2 * 6 and summary["float_linears"] == ["classifier"]  # no pooler
    runner = load_runner(Artifact("tagger_int8", tmp_path / "int8", "pytorch_int8", "int8", parent="teacher"),
                         "cpu", 1)
    assert type(runner.model).__name__ == "BertForTokenClassification" and runner.num_labels == 9
    model, tok = load_saved(root / "teacher")
    dev = encode(tok, prepared.split("dev"), 64)
    idx = list(range(len(dev)))
    batch = collate(dev, idx)
    got = runner(batch)
    assert got.dtype == np.float32 and got.shape == (len(idx), batch["input_ids"].shape[1], 9)
    with torch.inference_mode():
        want = model.eval()(**{k: torch.from_numpy(v) for k, v in batch.items()}).logits.numpy()
    pred, ref = dev.scored(got, idx).argmax(-1), dev.scored(want, idx).argmax(-1)
    assert len(pred) == len(dev.labels) == 25  # one scored position per word
    assert (pred == ref).mean() >= 0.8


def test_tagger_built_in_code_reloads_as_a_tagger(tmp_path):
    from transformers import BertForTokenClassification

    from compress.training.models import load_classifier

    model, tok, _ = load_classifier("random:tiny", 9, kind="token")
    assert model.config.architectures is None  # nothing names the head yet
    q = quantize(model.eval(), QuantizeConfig())
    save_dynamic_int8(q, tok, tmp_path / "q", "pytorch-dynamic")
    q2, _, _ = load_dynamic_int8(tmp_path / "q")  # the probe logits (2, 12, 9) are checked inside
    assert isinstance(q2, BertForTokenClassification) and model.config.architectures is None
    assert torch.equal(_logits(q), _logits(q2)) and _logits(q2).shape == (3, 12, 9)
    # only `pooler` left to quantize: a tagger has none, and the error says so
    with pytest.raises(ValueError, match=r"leaves no Linear layer to quantize \(this model has no pooler\)"):
        quantize(model, QuantizeConfig(keep_float=["layernorm", "attention", "ffn", "classifier"]))
