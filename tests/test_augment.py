"""Transfer-set augmentation: every kind on tiny data, deterministic by seed, built from
training rows only; the teacher cache labels train + augmented rows; the label term skips
augmented rows; the control never sees them and gets the student's step budget."""
import json

import numpy as np
import pytest
import torch

from compress.training.augment import KINDS, UNLABELLED, AugmentConfig, augment
from compress.core.config import ConfigError
from compress.data.prepare import Example, Prepared, prepare
from compress.training.distill import (CacheConfig, DistillConfig, cache_teacher_outputs, distill, kd_loss,
                              load_transfer)
from compress.training.models import save_classifier
from compress.training.train import FinetuneConfig
from conftest import make_task, preset, tiny_model

PAIRS = [Example(f"the {w} was sold on monday for ten dollars .", f"on monday the {w} sold for ten dollars .", i % 2)
         for i, w in enumerate(["cat", "dog", "car", "plan", "deal", "test", "song", "game", "boat", "lamp"])]
SINGLES = [Example(f"a truly {w} and moving film about {w} people", None, i % 2)
           for i, w in enumerate(["warm", "cold", "odd", "kind", "dull", "fine"])]


@pytest.mark.parametrize("kind", KINDS)
def test_each_kind_on_pairs(kind):
    cfg = AugmentConfig(kinds=[kind], size=2.0, word_prob=0.3, seed=1)
    rows, counts = augment(PAIRS, cfg)
    assert len(rows) == 20 and counts == {kind: 20}
    originals = {(e.text_a, e.text_b) for e in PAIRS}
    a_side, b_side = {e.text_a for e in PAIRS}, {e.text_b for e in PAIRS}
    vocab = {w for e in PAIRS for w in f"{e.text_a} {e.text_b}".split()}
    for r in rows:
        assert (r.text_a, r.text_b) not in originals  # a new input, not a copy
        assert set(f"{r.text_a} {r.text_b}".split()) <= vocab  # words of the train split only
        if kind == "swap":
            assert r.text_a in b_side and r.text_b in a_side
            assert r.label == next(e.label for e in PAIRS if (e.text_b, e.text_a) == (r.text_a, r.text_b))
        else:
            assert r.label == UNLABELLED
        if kind == "cross_pair":
            assert r.text_a in a_side and r.text_b in b_side
        if kind in ("word_drop", "word_swap", "word_replace"):
            # one side perturbed, the other intact
            assert r.text_a in a_side or r.text_b in b_side
        if kind == "word_drop":
            assert len(r.text_a.split()) + len(r.text_b.split()) < max(
                len(e.text_a.split()) + len(e.text_b.split()) for e in PAIRS)
        if kind == "word_swap":
            src = next(e for e in PAIRS if r.text_a == e.text_a or r.text_b == e.text_b)
            assert sorted(f"{r.text_a} {r.text_b}".split()) == sorted(f"{src.text_a} {src.text_b}".split())


def test_word_kinds_on_single_sentences_and_pair_kinds_refused():
    rows, counts = augment(SINGLES, AugmentConfig(kinds=["word_drop", "word_replace"], size=1.0, seed=0))
    assert counts == {"word_drop": 3, "word_replace": 3}
    assert all(r.text_b is None and r.label == UNLABELLED for r in rows)
    with pytest.raises(ConfigError, match=r"augment.kinds \['swap'\] do not apply to task 'sst2' \(classification\): "
                                          "use word_drop, word_swap, word_replace"):
        AugmentConfig(kinds=["swap"], size=1.0).check_task(make_task("sst2", "classification", ["0", "1"]))
    with pytest.raises(ConfigError, match="takes no augmentation; set augment.size to 0"):
        AugmentConfig(kinds=["word_drop"], size=1.0).check_task(make_task("ner", "token_classification", ["O", "B-X"]))
    AugmentConfig(kinds=list(KINDS), size=1.0).check_task(make_task("mrpc", "pair_classification", ["0", "1"]))


def test_deterministic_by_seed():
    cfg = AugmentConfig(kinds=list(KINDS), size=3.0, seed=5)
    assert augment(PAIRS, cfg) == augment(PAIRS, cfg)
    other = augment(PAIRS, AugmentConfig(kinds=list(KINDS), size=3.0, seed=6))
    assert other[0] != augment(PAIRS, cfg)[0]


@pytest.mark.parametrize("data,msg", [
    ({"kinds": ["paraphrase"]}, "unknown augmentation kind 'paraphrase'"),
    ({"kinds": [], "size": 2.0}, "size > 0 needs at least one kind"),
    ({"kinds": ["swap"], "size": -1.0}, "size must be >= 0"),
    ({"kinds": ["swap", "swap"]}, "kinds repeat"),
    ({"word_prob": 1.0}, "word_prob must be in"),
])
def test_config_rejects(data, msg):
    with pytest.raises(ConfigError, match=msg):
        AugmentConfig(**data)


def test_label_term_skips_augmented_rows():
    s = torch.tensor([[2.0, -1.0], [0.5, 0.5], [-1.0, 1.0]])
    t = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.0, 2.0]])
    labels = torch.tensor([0, UNLABELLED, 1])
    got = kd_loss(s, t, labels, 2.0, 0.0)  # label term only
    ce = torch.nn.functional.cross_entropy(s, torch.tensor([0, 0, 1]), reduction="none")
    assert torch.allclose(got, (ce[0] + ce[2]) / 3)
    all_aug = kd_loss(s, t, torch.full((3,), UNLABELLED), 2.0, 0.5)
    assert torch.isfinite(all_aug) and torch.allclose(all_aug, 0.5 * kd_loss(s, t, labels, 2.0, 1.0))


@pytest.fixture(scope="module")
def mrpc_setup(tmp_path_factory):
    from conftest import write_tsv

    tmp = tmp_path_factory.mktemp("aug")
    header = ["Quality", "#1 ID", "#2 ID", "#1 String", "#2 String"]
    rows = [[str(e.label), str(i), str(i + 50), e.text_a, e.text_b] for i, e in enumerate(PAIRS)]
    write_tsv(tmp / "src" / "train.tsv", header, rows, bom=True)
    write_tsv(tmp / "src" / "dev.tsv", header, rows[:4], bom=True)
    prepare(preset("mrpc", str(tmp / "src")), tmp / "prepared")  # 8 train pairs: 2 carved as validation
    model, tok = tiny_model()
    save_classifier(model, tok, tmp / "teacher", ["not_equivalent", "equivalent"])
    return tmp, Prepared.open(tmp / "prepared")


def test_cache_labels_train_then_augmented_rows(mrpc_setup):
    tmp, prepared = mrpc_setup
    cfg = CacheConfig(max_length=32, augment=AugmentConfig(kinds=["swap", "cross_pair"], size=1.5, seed=0))
    cache_teacher_outputs(tmp / "teacher", prepared, tmp / "cache", cfg)
    rows, logits, meta = load_transfer(tmp / "cache", prepared)
    assert len(rows) == len(logits) == 8 + 12 and rows[:8] == prepared.split("train")
    assert meta["augmentation"]["rows_per_kind"] == {"swap": 6, "cross_pair": 6}
    assert set(meta["augmentation"]["teacher_positive_share"]) == {"swap", "cross_pair"}
    # unaugmented: the cache is the train split and meta.json has no augmentation block
    cache_teacher_outputs(tmp / "teacher", prepared, tmp / "plain", CacheConfig(max_length=32))
    rows0, logits0, meta0 = load_transfer(tmp / "plain", prepared)
    assert len(rows0) == 8 and "augmentation" not in meta0
    np.testing.assert_allclose(logits0, logits[:8], atol=1e-4)  # same rows; batches pad differently
    (tmp / "plain" / "augmented.jsonl").write_text((tmp / "cache" / "augmented.jsonl").read_text())
    with pytest.raises(Exception, match="8 cached logits for 20 transfer rows"):
        load_transfer(tmp / "plain", prepared)


def test_control_trains_on_gold_rows_with_the_students_step_budget(mrpc_setup):
    tmp, prepared = mrpc_setup
    cfg = CacheConfig(max_length=32, augment=AugmentConfig(kinds=["swap", "word_drop"], size=2.0, seed=0))
    cache_teacher_outputs(tmp / "teacher", prepared, tmp / "cache2", cfg)
    dcfg = DistillConfig(student_layers=[0], train=FinetuneConfig(epochs=1.0, batch_size=4, eval_every_steps=0))
    s = distill(dcfg, tmp / "teacher", tmp / "cache2", prepared, tmp / "student", tmp / "c1",
                tmp / "control", tmp / "c2", eval_max_length=32)
    assert s["transfer_rows"] == 24 and s["gold_rows"] == 8
    assert s["student"]["steps"] == 6  # ceil(24 / 4) steps: one epoch of the transfer set
    assert s["control"]["steps"] == 6 and s["control"]["train_rows"] == 8  # same budget, gold rows only
    assert json.loads((tmp / "student" / "config.json").read_text())["finetuning_task"] == "mrpc"
