"""PyTorch dynamic INT8: the float/INT8 split obeys the params, storage reloads without
pickle and bit-identically, the runner measures it."""
import json

import pytest
import torch

from compress.config import ConfigError, build
from compress.measure import MeasureConfig, measure
from compress.quantize import (QuantizeConfig, group_of, load_dynamic_int8, quantize, quantize_checkpoint,
                               quantized_linears, save_dynamic_int8)
from compress.runners import Artifact
from conftest import tiny_model


def _inputs(batch=3, seq=12, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1000, 5000, (batch, seq), generator=g)
    mask = torch.ones_like(ids)
    mask[0, seq // 2:] = 0  # one padded row
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": torch.zeros_like(ids)}


def test_module_groups():
    assert group_of("bert.encoder.layer.1.attention.self.query") == "attention"
    assert group_of("bert.encoder.layer.1.attention.output.dense") == "attention"
    assert group_of("bert.encoder.layer.1.attention.output.LayerNorm") == "layernorm"
    assert group_of("bert.encoder.layer.0.intermediate.dense") == "ffn"
    assert group_of("bert.encoder.layer.0.output.dense") == "ffn"
    assert group_of("bert.pooler.dense") == "pooler"
    assert group_of("classifier") == "classifier"
    assert group_of("bert.embeddings.word_embeddings") == "embeddings"


def test_default_keeps_classifier_float_and_quantizes_every_other_linear():
    model, _ = tiny_model()
    q = quantize(model.eval(), QuantizeConfig())
    names = quantized_linears(q)
    assert len(names) == 2 * 6 + 1  # per layer: q, k, v, attention out, ffn in, ffn out; + pooler
    assert "classifier" not in names and isinstance(q.classifier, torch.nn.Linear)
    assert isinstance(model.bert.pooler.dense, torch.nn.Linear)  # the float model is untouched


def test_keep_float_groups_are_honoured():
    model, _ = tiny_model()
    q = quantize(model.eval(), QuantizeConfig(keep_float=["embeddings", "layernorm", "ffn", "pooler"]))
    names = quantized_linears(q)
    assert names and all(group_of(n) in ("attention", "classifier") for n in names)
    assert "classifier" in names


@pytest.mark.parametrize("data, message", [
    ({"keep_float": ["layernorm", "classifier"]}, "must include 'embeddings'"),
    ({"keep_float": ["embeddings", "classifier"]}, "must include 'layernorm'"),
    ({"keep_float": ["embeddings", "layernorm", "biases"]}, "unknown group 'biases'"),
    ({"engine": "tpu"}, "engine must be"),
    ({"per_chanel": True}, "per_channel"),  # a typo gets the nearest key suggested
])
def test_config_rejects_illegal_settings(data, message):
    with pytest.raises(ConfigError, match=message):
        build(QuantizeConfig, data, "quantize")


def test_save_and_reload_is_bit_identical_without_pickle(tmp_path):
    model, tok = tiny_model()
    model.eval()
    model.bert.prune_heads({0: [1, 2], 1: [0]})  # uneven heads, as the pruned student has
    q = quantize(model, QuantizeConfig())
    save_dynamic_int8(q, tok, tmp_path / "q", "pytorch-dynamic")
    files = sorted(p.name for p in (tmp_path / "q").iterdir())
    assert "model.safetensors" in files and "quantization.json" in files
    assert not [f for f in files if f.endswith((".bin", ".pt", ".pth", ".pkl"))]
    q2, _, meta = load_dynamic_int8(tmp_path / "q")
    assert meta["quantized_modules"] == quantized_linears(q) == quantized_linears(q2)
    with torch.inference_mode():
        assert torch.equal(q(**_inputs()).logits, q2(**_inputs()).logits)
    assert q2.config.pruned_heads == {"0": [1, 2], "1": [0]} or q2.config.pruned_heads == {0: [1, 2], 1: [0]}


def test_int8_stays_close_to_float():
    model, _ = tiny_model()
    model.eval()
    q = quantize(model, QuantizeConfig())
    with torch.inference_mode():
        diff = (q(**_inputs()).logits - model(**_inputs()).logits).abs().max().item()
    assert diff < 0.1


def test_reload_rejects_a_mismatched_checkpoint(tmp_path):
    model, tok = tiny_model()
    save_dynamic_int8(quantize(model.eval(), QuantizeConfig()), tok, tmp_path / "q", "pytorch-dynamic")
    cfg = json.loads((tmp_path / "q/config.json").read_text())
    cfg["intermediate_size"] = 256  # the stored FFN weights no longer fit
    (tmp_path / "q/config.json").write_text(json.dumps(cfg))
    with pytest.raises(Exception, match="intermediate|size|shape"):
        load_dynamic_int8(tmp_path / "q")
    with pytest.raises(FileNotFoundError, match="no quantization.json"):
        load_dynamic_int8(tmp_path)


def test_quantize_checkpoint_and_measure_through_the_runner(tmp_path, tiny_model_dir, prepared_sst2):
    summary = quantize_checkpoint(tiny_model_dir, tmp_path / "int8", QuantizeConfig())
    assert summary["quantized_modules"] == 13 and summary["float_linears"] == ["classifier"]
    cfg = MeasureConfig(targets=["cpu", "gpu"], points=[[1, 16]], warmup_queries=1, min_queries=2,
                        min_duration_s=0.0, isolate=False)
    cpu, gpu = measure(Artifact("tiny_int8", tmp_path / "int8", "pytorch_int8", "int8"), prepared_sst2, cfg)
    assert cpu["status"] == "ok" and cpu["backend"] == "pytorch-cpu" and 0 <= cpu["accuracy"] <= 1
    assert gpu["status"] == "skipped" and "CPU only" in gpu["reason"]
    # the stored Linear weights are int8 tensors, one scale per output channel
    from safetensors.torch import load_file

    t = load_file(str(tmp_path / "int8/model.safetensors"))
    w = t["bert.encoder.layer.0.intermediate.dense.weight_int8"]
    assert w.dtype == torch.int8 and t["bert.encoder.layer.0.intermediate.dense.weight_scale"].numel() == w.shape[0]
