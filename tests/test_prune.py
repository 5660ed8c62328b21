"""Head pruning: importance shapes, exact specs, physical removal, save/load, errors."""
import numpy as np
import pytest
import torch

from compress.data.prepare import Prepared

from compress.training.models import load_saved, save_classifier
from compress.training.prune import (PruneConfig, PruneSpecError, global_head_spec, heads_per_layer, importance_scores,
                            normalize_per_layer, prune_ffn, prune_heads, validate_spec)
from compress.data.tokens import encode
from conftest import tiny_model


def test_importance_shapes_and_normalisation(prepared_sst2):
    model, tok = tiny_model()
    enc = encode(tok, Prepared.open(prepared_sst2).split("train"), 32)
    labels = torch.from_numpy(enc.labels)
    head, ffn = importance_scores(model, enc, lambda logits, idx: torch.nn.functional.cross_entropy(
        logits, labels[idx]), PruneConfig(importance_rows=16, importance_batch_size=8))
    assert head.shape == (2, 4) and ffn.shape == (2, 128)
    assert (head >= 0).all() and head.sum() > 0 and ffn.sum() > 0
    norm = normalize_per_layer(head)
    assert np.allclose(np.linalg.norm(norm, axis=1), 1.0)


def test_global_spec_prunes_least_important_but_keeps_a_head_per_layer():
    imp = np.array([[0.1, 0.2, 0.3, 0.4],
                    [0.01, 0.02, 0.03, 0.04]])
    assert global_head_spec(imp, 0.25) == {1: [0, 1]}
    # 6 of 8 asked: layer 1 keeps its best head, the rest comes from layer 0
    assert global_head_spec(imp, 0.75) == {0: [0, 1, 2], 1: [0, 1, 2]}
    with pytest.raises(PruneSpecError, match="only 6 can go while every layer keeps one"):
        global_head_spec(imp, 0.9)
    assert global_head_spec(imp, 0.9, allow_empty_layers=True) == {0: [0, 1, 2], 1: [0, 1, 2, 3]}


@pytest.mark.parametrize("spec,msg", [
    ({5: [0]}, r"layer 5 does not exist"),
    ({0: [4]}, r"layer 0 has no heads \[4\]"),
    ({0: [1, 1]}, r"lists a head twice"),
    ({1: [0, 1, 2, 3]}, r"layer 1 would lose all 4 heads.*allow_empty_layers"),
])
def test_impossible_specs_are_refused(spec, msg):
    with pytest.raises(PruneSpecError, match=msg):
        validate_spec(spec, layers=2, heads=4, allow_empty_layers=False)


def test_known_spec_removes_exactly_those_heads_and_roundtrips(tmp_path):
    model, tok = tiny_model()
    spec = validate_spec({0: [1, 3], 1: [0]}, 2, 4, False)
    x = tok(["pruning keeps the model running", "short"], padding=True, return_tensors="pt")
    prune_heads(model, spec)
    assert heads_per_layer(model) == [2, 3]
    # physically smaller: q/k/v and the attention output lost 16 dims per removed head
    assert model.bert.encoder.layer[0].attention.self.query.weight.shape == (2 * 16, 64)
    assert model.bert.encoder.layer[0].attention.output.dense.weight.shape == (64, 2 * 16)
    model.eval()
    out = model(**x).logits
    assert out.shape == (2, 2) and torch.isfinite(out).all()
    save_classifier(model, tok, tmp_path / "pruned")
    again, _ = load_saved(tmp_path / "pruned")
    assert heads_per_layer(again) == [2, 3]
    assert torch.allclose(again(**x).logits, out, atol=1e-6)


def test_ffn_pruning_keeps_same_width_per_layer_and_reloads(tmp_path):
    model, tok = tiny_model()
    imp = np.random.default_rng(0).random((2, 128))
    assert prune_ffn(model, imp, 0.5) == 64
    assert model.bert.encoder.layer[1].intermediate.dense.weight.shape == (64, 64)
    # the kept neurons are the most important ones of each layer
    save_classifier(model, tok, tmp_path / "ffn")
    again, _ = load_saved(tmp_path / "ffn")
    assert again.config.intermediate_size == 64
    x = tok("still runs", return_tensors="pt")
    model.eval()
    assert torch.allclose(again(**x).logits, model(**x).logits, atol=1e-6)


def test_recovery_config_rejects_hidden_losses():
    from compress.core.config import ConfigError, build
    with pytest.raises(ConfigError, match="cached teacher logits only"):
        build(PruneConfig, {"loss": {"hidden_mse_weight": 1.0}}, "prune")
