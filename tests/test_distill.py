"""Distillation: loss values by hand, student construction, a few steps lower the loss."""
import math

import numpy as np
import pytest
import torch

from compress.data.prepare import Prepared
from compress.training.distill import (DistillLossConfig, attention_mse, distill_loss_fn, hidden_mse, kd_loss,
                              make_student, teacher_logits)
from compress.data.tokens import encode
from compress.training.train import FinetuneConfig, finetune, predict_logits
from conftest import tiny_model


def test_kd_loss_matches_hand_computation():
    s = torch.tensor([[2.0, 0.0]])
    t = torch.tensor([[0.0, 2.0]])
    y = torch.tensor([1])
    T = 2.0
    ps = [math.exp(1) / (math.exp(1) + 1), 1 / (math.exp(1) + 1)]  # softmax(s / T)
    pt = ps[::-1]  # softmax(t / T)
    kl = sum(p * math.log(p / q) for p, q in zip(pt, ps))
    ce = -math.log(math.exp(0) / (math.exp(2) + math.exp(0)))
    assert kd_loss(s, t, y, T, 1.0).item() == pytest.approx(kl * T * T, rel=1e-5)
    assert kd_loss(s, t, y, T, 0.0).item() == pytest.approx(ce, rel=1e-5)
    assert kd_loss(s, t, y, T, 0.25).item() == pytest.approx(0.25 * kl * T * T + 0.75 * ce, rel=1e-5)
    # identical logits: no soft loss at all
    assert kd_loss(t, t, y, T, 1.0).item() == pytest.approx(0.0, abs=1e-7)


def test_hidden_and_attention_losses_ignore_padding():
    mask = torch.tensor([[1, 1, 0]])
    a = [torch.zeros(1, 3, 4), torch.zeros(1, 3, 4)]
    b = [torch.zeros(1, 3, 4), torch.zeros(1, 3, 4)]
    b[1][0, 2] = 100.0  # only the padded position differs
    assert hidden_mse(a, b, [0], mask).item() == 0.0
    b[1][0, 0] = 2.0  # a real token differs by 2 in all 4 dims: mean over 2 tokens x 4 dims
    assert hidden_mse(a, b, [0], mask).item() == pytest.approx(4 * 4 / 8)
    att_s = [torch.full((1, 2, 3, 3), 0.5)]
    att_t = [torch.full((1, 2, 3, 3), 0.5)]
    att_t[0][0, :, 2, :] = 9.0  # padded query row
    assert attention_mse(att_s, att_t, [0], mask).item() == 0.0


def test_student_keeps_chosen_teacher_layers():
    teacher, _ = tiny_model()
    assert teacher.config.num_hidden_layers == 2
    student = make_student(teacher, [1])
    assert student.config.num_hidden_layers == 1
    assert torch.equal(student.bert.encoder.layer[0].attention.self.query.weight,
                       teacher.bert.encoder.layer[1].attention.self.query.weight)
    assert torch.equal(student.classifier.weight, teacher.classifier.weight)
    narrow = make_student(teacher, [0, 1], intermediate_size=32)
    assert narrow.bert.encoder.layer[0].intermediate.dense.weight.shape == (32, 64)
    assert narrow.bert.encoder.layer[0].output.dense.weight.shape == (64, 32)
    x = {"input_ids": torch.tensor([[101, 2204, 102]])}
    assert narrow(**x).logits.shape == (1, 2)
    with pytest.raises(ValueError, match=r"student layers \[5\] do not exist"):
        make_student(teacher, [0, 5])


def test_a_few_distillation_steps_lower_the_loss(tmp_path, prepared_sst2):
    p = Prepared.open(prepared_sst2)
    teacher, tok = tiny_model(seed=3)
    train = encode(tok, p.split("train"), 32)
    dev = encode(tok, p.split("dev"), 32)
    # a teacher that is confident on the training labels
    finetune(teacher, train, dev, FinetuneConfig(epochs=6, batch_size=8, lr=5e-3, eval_every_steps=0),
             p.task, tmp_path / "t")
    cached = teacher_logits(teacher, train)
    # a student that does not start from the teacher's weights, so it has something to learn
    student = make_student(tiny_model(seed=11)[0], [0])
    cfg = DistillLossConfig(temperature=2.0, alpha_kd=1.0)
    loss = distill_loss_fn(train, cached, cfg)
    all_idx = list(range(len(train)))

    def total():
        student.eval()
        from compress.training.train import to_torch
        from compress.data.tokens import collate
        with torch.no_grad():
            return loss(student, to_torch(collate(train, all_idx)), all_idx).item()

    before = total()
    finetune(student, train, dev, FinetuneConfig(epochs=8, batch_size=8, lr=5e-3, eval_every_steps=0),
             p.task, tmp_path / "s", loss_fn=loss)
    assert total() < 0.5 * before
    agree = (predict_logits(student, train).argmax(-1) == cached.argmax(-1)).mean()
    assert agree > 0.9


def test_hidden_loss_needs_teacher():
    with pytest.raises(ValueError, match="need the teacher"):
        distill_loss_fn(None, np.zeros((1, 2)), DistillLossConfig(hidden_mse_weight=1.0))


def test_control_alongside_trains_the_models_sequential_training_does(tmp_path, prepared_sst2):
    """The control in a second process (2 threads split 1 + 1) gives bit for bit the student
    and control that training them one after the other with 1 thread gives: the schedule
    changes the wall time, not the models."""
    from compress.core.config import section
    from compress.core.io import sha256_file
    from compress.training.distill import CacheConfig, DistillConfig, cache_teacher_outputs, distill, schedule
    from compress.training.models import save_classifier

    prepared = Prepared.open(prepared_sst2)
    model, tok = tiny_model(seed=5)
    save_classifier(model, tok, tmp_path / "teacher", ["negative", "positive"])
    cache_teacher_outputs(tmp_path / "teacher", prepared, tmp_path / "cache", CacheConfig(max_length=32, batch_size=16))
    figures = {}
    for name, alongside, threads in (("alongside", True, 2), ("after", False, 1)):
        cfg = section({"distill": {"student_layers": [1], "control_alongside": alongside,
                                   "train": {"epochs": 2.0, "min_steps": 0, "batch_size": 8, "eval_every_steps": 0,
                                             "threads": threads}}}, "distill", DistillConfig)
        d = tmp_path / name
        s = distill(cfg, tmp_path / "teacher", tmp_path / "cache", prepared, d / "student", d / "curves",
                    d / "control", d / "control_curves", eval_max_length=32)
        assert s["student"]["threads"] == 1 and s["control"]["threads"] == 1
        assert s["control"]["steps"] == s["student"]["steps"] > 0
        figures[name] = (sha256_file(d / "student" / "model.safetensors"),
                         sha256_file(d / "control" / "model.safetensors"),
                         s["student"]["final_validation"], s["control"]["final_validation"],
                         (d / "control_curves" / "train.csv").read_text())
        assert not list(d.glob("*.tmp-*")), "no temporary output left behind"
    assert figures["alongside"] == figures["after"]
    assert figures["alongside"][0] != figures["alongside"][1]  # the two models did learn differently
    # the schedule: alongside only with a control, >= 2 threads and one process
    on = section({"distill": {"control_alongside": True, "train": {"threads": 2}}}, "distill", DistillConfig)
    assert schedule(on, train_control=True)[1] == 1 and schedule(on, train_control=True)[0].threads == 1
    assert schedule(on, train_control=False) == (on.train, 0)
    one = section({"distill": {"control_alongside": True, "train": {"threads": 1}}}, "distill", DistillConfig)
    assert schedule(one, train_control=True) == (one.train, 0)
    off = section({"distill": {}}, "distill", DistillConfig)  # the default: one after the other
    assert schedule(off, train_control=True) == (off.train, 0)
