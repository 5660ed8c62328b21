"""Fine-tuning: learns, is repeatable with a seed, writes curves for dvc plots."""
import csv

import torch

from compress.data.prepare import Prepared
from compress.training.teacher import TeacherConfig, build_teacher
from compress.data.tokens import encode, length_grouped_batches
from compress.training.train import FinetuneConfig, finetune, predict_logits
from conftest import SST2_NAMES, make_task, tiny_model

SST2 = make_task("sst2", "classification", ("0", "1"), SST2_NAMES)

import random


def _data(prepared_sst2):
    p = Prepared.open(prepared_sst2)
    _, tok = tiny_model()
    return p, encode(tok, p.split("train"), 32), encode(tok, p.split("dev"), 32)


def _loss(model, enc):
    logits = torch.from_numpy(predict_logits(model, enc))
    return torch.nn.functional.cross_entropy(logits, torch.from_numpy(enc.labels)).item()


def test_finetune_lowers_loss_and_logs_curves(tmp_path, prepared_sst2):
    p, train, dev = _data(prepared_sst2)
    model, _ = tiny_model(seed=1)
    before = _loss(model, train)
    cfg = FinetuneConfig(epochs=8, batch_size=8, lr=5e-3, warmup_ratio=0.1, eval_every_steps=4, seed=3)
    summary = finetune(model, train, dev, cfg, SST2, tmp_path / "curves")
    assert _loss(model, train) < before * 0.7
    assert summary["steps"] == 32 and summary["final_validation"]["accuracy"] >= 0.75
    rows = list(csv.DictReader(open(tmp_path / "curves" / "eval.csv")))
    assert [int(r["step"]) for r in rows] == [4, 8, 12, 16, 20, 24, 28, 32]
    train_rows = list(csv.DictReader(open(tmp_path / "curves" / "train.csv")))
    assert train_rows[-1]["step"] == "32" and float(train_rows[-1]["lr"]) == 0.0


def test_same_seed_gives_bitwise_identical_weights(tmp_path, prepared_sst2):
    p, train, dev = _data(prepared_sst2)
    cfg = FinetuneConfig(epochs=2, batch_size=8, lr=1e-3, eval_every_steps=0, seed=7)
    states = []
    for run in range(2):
        model, _ = tiny_model(seed=1)
        finetune(model, train, dev, cfg, SST2, tmp_path / f"c{run}")
        states.append(model.state_dict())
    assert all(torch.equal(states[0][k], states[1][k]) for k in states[0])


def test_length_grouped_batches_cover_every_row_once():
    lengths = [random.Random(0).randint(3, 60) for _ in range(1000)]
    batches = length_grouped_batches(lengths, 32, random.Random(1))
    flat = sorted(i for b in batches for i in b)
    assert flat == list(range(1000))
    # inside a batch lengths are close: far less padding than random batching
    waste = sum(max(lengths[i] for i in b) * len(b) - sum(lengths[i] for i in b) for b in batches)
    assert waste < 0.1 * sum(lengths)


def test_build_teacher_without_finetuning_saves_and_reports(tmp_path, prepared_sst2):
    cfg = TeacherConfig(model="random:tiny", finetune=False)
    summary = build_teacher(cfg, Prepared.open(prepared_sst2), tmp_path / "teacher", tmp_path / "curves")
    assert (tmp_path / "teacher" / "model.safetensors").is_file()
    assert "skipped" in summary["training"] and "accuracy" in summary["training"]["final_validation"]
    assert (tmp_path / "curves" / "train.csv").is_file() and (tmp_path / "curves" / "eval.csv").is_file()


def test_frozen_parameters_stay_bitwise_unchanged(tmp_path, prepared_sst2):
    """distill.freeze_word_embeddings: a parameter with requires_grad=False is neither
    updated nor decayed; the rest still trains."""
    p = Prepared.open(prepared_sst2)
    model, tok = tiny_model(seed=2)
    emb = model.bert.embeddings.word_embeddings.weight
    emb.requires_grad_(False)
    before_emb, before_cls = emb.detach().clone(), model.classifier.weight.detach().clone()
    train, dev = encode(tok, p.split("train"), 32), encode(tok, p.split("dev"), 32)
    finetune(model, train, dev, FinetuneConfig(epochs=1, batch_size=8, lr=1e-2, weight_decay=0.1,
                                               eval_every_steps=0), SST2, tmp_path / "c")
    assert torch.equal(emb, before_emb)
    assert not torch.equal(model.classifier.weight, before_cls)


def test_step_based_schedule_runs_exactly_max_steps_across_epochs(tmp_path, prepared_sst2):
    p, train, dev = _data(prepared_sst2)  # 28 rows (4 of 32 carved as validation): 4 steps an epoch at batch 8
    model, _ = tiny_model(seed=1)
    cfg = FinetuneConfig(epochs=None, max_steps=10, batch_size=8, lr=1e-3, warmup_ratio=0.2,
                         eval_every_steps=0, seed=3)
    summary = finetune(model, train, dev, cfg, SST2, tmp_path / "curves")
    assert summary["steps"] == 10 and summary["epochs"] == 2.5
    assert summary["sequences_seen"] == 72  # two epochs of 28, then two full batches of the third
    last = list(csv.DictReader(open(tmp_path / "curves" / "train.csv")))[-1]
    assert last["step"] == "10" and float(last["lr"]) == 0.0  # linear decay reaches zero at max_steps


def test_bf16_autocast_falls_back_to_fp32_without_native_bf16(tmp_path, prepared_sst2, monkeypatch):
    """On a CPU without AMX-BF16/AVX512-BF16 autocast would emulate bf16 (~25x slower than
    fp32 on an AVX2 EPYC): training runs in fp32, bit for bit as with autocast off, and
    the summary says why."""
    p, train, dev = _data(prepared_sst2)
    monkeypatch.setenv("COMPRESS_CPU_FLAGS", "avx2 fma")  # act as an AVX2-only CPU
    weights, summaries = [], []
    for bf16 in (True, False):
        model, _ = tiny_model(seed=1)
        cfg = FinetuneConfig(epochs=1, batch_size=8, lr=1e-3, eval_every_steps=0, seed=7, bf16_autocast=bf16)
        summaries.append(finetune(model, train, dev, cfg, SST2, tmp_path / f"c{bf16}"))
        weights.append(model.state_dict())
    assert summaries[0]["bf16_autocast"].startswith("off: this CPU has no native bf16")
    assert "bf16_autocast" not in summaries[1]
    assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])
    monkeypatch.setenv("COMPRESS_CPU_FLAGS", "avx512_bf16")  # a native-bf16 CPU keeps autocast
    model, _ = tiny_model(seed=1)
    cfg = FinetuneConfig(epochs=1, batch_size=8, lr=1e-3, eval_every_steps=0, seed=7)
    assert "bf16_autocast" not in finetune(model, train, dev, cfg, SST2, tmp_path / "native")


def test_teacher_seeds_alongside_give_the_teachers_one_at_a_time_gives(tmp_path, prepared_sst2):
    """teacher.seeds_alongside: three seeds, two at a time on 2 threads (1 + 1, the third
    alone on 1), against one after the other on 1 thread: the same figures per seed, the
    same seed kept (seed 4, trained in the second process), bit for bit the same teacher; no
    hand-over folder left behind."""
    from compress.core.config import build
    from compress.core.io import sha256_file
    from compress.training.teacher import seed_groups

    prepared = Prepared.open(prepared_sst2)
    train = {"epochs": None, "max_steps": 20, "min_steps": 0, "batch_size": 8, "lr": 5e-3, "eval_every_steps": 0}
    out = {}
    for name, alongside, threads in (("alongside", True, 2), ("sequential", False, 1)):
        cfg = build(TeacherConfig, {"model": "random:tiny", "seeds": [3, 4, 5], "seeds_alongside": alongside,
                                    "seed_choice_fraction": 0.25, "train": {**train, "threads": threads}}, "teacher")
        assert seed_groups(cfg) == (([[3, 4], [5]], 1) if alongside else ([[3], [4], [5]], 1))
        s = build_teacher(cfg, prepared, tmp_path / name / "teacher", tmp_path / name / "curves", eval_max_length=32)
        assert [r["threads"] for r in s["seeds"]] == [1, 1, 1]
        assert s["seed_schedule"].startswith("two at a time" if alongside else "one after the other")
        out[name] = ([(r["seed"], r["seed_choice"], r["validation"]) for r in s["seeds"]], s["chosen_seed"],
                     sha256_file(tmp_path / name / "teacher" / "model.safetensors"),
                     (tmp_path / name / "curves" / "train.csv").read_text())
        assert sorted(p.name for p in (tmp_path / name).iterdir()) == ["curves", "teacher"]
    assert out["alongside"] == out["sequential"]
    # seed 4 wins on the seed-choice rows: the kept teacher came back from the second process
    assert out["alongside"][1] == 4 and [r[1]["accuracy"] for r in out["alongside"][0]] == [0.5, 1.0, 1.0]
    # one seed, or one thread, or torchrun: one after the other on every thread
    assert seed_groups(build(TeacherConfig, {"train": {"threads": 2}}, "teacher")) == ([[42]], 2)
