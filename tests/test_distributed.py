"""Data parallelism (issue 13): the training stages under torchrun with 2 gloo ranks on
the CPU against one process at the same global batch; a rank killed mid-training; the
launch config's refusals. The stages run as users run them: `python -m pipelines.<stage>`
in a working directory with params.yaml, prepared data and a tiny teacher."""
from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import yaml

from conftest import REPO, SHARED_DATA, preset

pytestmark = pytest.mark.slow

TINY_MEASURE = {"points": [[1, 16]], "warmup_queries": 1, "min_queries": 2, "min_duration_s": 0.0,
                "eval_max_rows": 32, "targets": ["cpu"]}


def _workdir(root: Path, nproc: int, epochs: float = 2.0) -> Path:
    """params.yaml for `nproc` ranks plus the shared prepared data and tiny teacher."""
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    params["launch"]["nproc_per_node"] = nproc
    # no dropout (a rank draws its own masks) and fp32 (bf16 rounding depends on the shapes
    # a rank multiplies): what remains between 1 and 2 ranks is fp32 summation order
    train = {"epochs": epochs, "min_steps": 0, "batch_size": 16, "bf16_autocast": False, "eval_every_steps": 4,
             "log_every_steps": 1}
    params["distill"].update({"student_layers": [1], "freeze_word_embeddings": False})
    params["distill"]["train"].update(train)
    params["distill"]["by_task"] = {}
    params["teacher_logits"].update({"batch_size": 24, "by_task": {}})
    params["measure"] = {**params["measure"], **TINY_MEASURE}
    root.mkdir(parents=True)
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    return root


@pytest.fixture(scope="module")
def shared_inputs(tmp_path_factory) -> Path:
    """Prepared SST-2 slice (128 train rows) and a 2-layer teacher without dropout."""
    from transformers import BertConfig, BertForSequenceClassification

    from compress.data.prepare import Prepared, prepare
    from compress.training.models import load_classifier, save_classifier

    root = tmp_path_factory.mktemp("ddp_inputs")
    prepare(preset("sst2", str(SHARED_DATA / "sst2"), max_train_rows=128,
                          max_dev_rows=64), root / "data" / "prepared")
    _, tokenizer, _ = load_classifier("random:tiny", 2, seed=0)
    cfg = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=64, num_hidden_layers=2,
                     num_attention_heads=4, intermediate_size=128, hidden_dropout_prob=0.0,
                     attention_probs_dropout_prob=0.0, num_labels=2)
    import torch
    torch.manual_seed(0)
    save_classifier(BertForSequenceClassification(cfg), tokenizer, root / "models" / "teacher",
                    task=Prepared.open(root / "data" / "prepared").task)
    return root


def _stage(cwd: Path, stage: str, timeout: int = 600, **popen) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1"}
    return subprocess.run([sys.executable, "-m", f"pipelines.{stage}"], cwd=cwd, env=env, timeout=timeout,
                          capture_output=True, text=True, **popen)


def _link_inputs(work: Path, inputs: Path) -> None:
    (work / "data").mkdir()
    (work / "data" / "prepared").symlink_to(inputs / "data" / "prepared")
    (work / "models").mkdir()
    (work / "models" / "teacher").symlink_to(inputs / "models" / "teacher")


def _curve(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


@pytest.fixture(scope="module")
def runs(shared_inputs, tmp_path_factory) -> dict[int, Path]:
    """teacher_logits then distill, with 1 process and with 2 ranks."""
    out = {}
    for nproc in (1, 2):
        work = _workdir(tmp_path_factory.mktemp(f"ranks{nproc}") / "w", nproc)
        _link_inputs(work, shared_inputs)
        for stage in ("teacher_logits", "distill"):
            proc = _stage(work, stage)
            assert proc.returncode == 0, f"{stage} with {nproc} process(es) failed:\n{proc.stderr[-4000:]}"
            if nproc == 2:
                assert "launch: 2 ranks" in proc.stdout
        out[nproc] = work
    return out


def test_two_rank_teacher_logits_cache_equals_one_process(runs):
    one, two = (np.load(runs[n] / "data/teacher_logits/logits.npy") for n in (1, 2))
    assert one.shape == two.shape == (128, 2)
    # each row is computed in the same batch (same padding) as by one process
    np.testing.assert_allclose(two, one, rtol=0, atol=1e-6)
    assert (two.argmax(-1) == one.argmax(-1)).all()
    assert (runs[1] / "data/teacher_logits/meta.json").read_text() == \
        (runs[2] / "data/teacher_logits/meta.json").read_text()


def test_two_rank_distillation_matches_one_process(runs):
    import json

    reports = {n: json.loads((runs[n] / "reports/distill.json").read_text())["details"] for n in (1, 2)}
    # same global batch: same optimizer steps (128 rows / 16 = 8 a epoch, 2 epochs)
    assert reports[1]["student"]["steps"] == reports[2]["student"]["steps"] == 16
    assert reports[2]["student"]["ranks"] == 2 and "ranks" not in reports[1]["student"]
    for curves in ("distill", "distill_control"):
        one, two = (_curve(runs[n] / f"reports/plots/{curves}/train.csv") for n in (1, 2))
        assert [r["step"] for r in one] == [r["step"] for r in two] == [str(s) for s in range(1, 17)]
        diffs = [abs(float(a["loss"]) - float(b["loss"])) for a, b in zip(one, two)]
        # fp32 with the rows of a batch split over two processes: only summation order differs
        assert max(diffs) <= 1e-3, diffs
        assert [a["lr"] for a in one] == [b["lr"] for b in two]  # the same schedule
    # the students predict the same dev labels
    from compress.data.prepare import Prepared
    from compress.training.models import load_saved
    from compress.data.tokens import encode
    from compress.training.train import predict_logits

    preds = {}
    for n in (1, 2):
        model, tok = load_saved(runs[n] / "models/student")
        dev = encode(tok, Prepared.open(runs[n] / "data/prepared").split("dev"), 128)
        preds[n] = predict_logits(model, dev)
    assert (preds[1].argmax(-1) == preds[2].argmax(-1)).all()
    np.testing.assert_allclose(preds[2], preds[1], atol=1e-3)
    # only rank 0 wrote: no leftovers of the other rank's throwaway outputs
    assert not list(runs[2].rglob("*.tmp-*")) and not list(runs[2].rglob("rank1-*"))


def _rank_pids(parent: int) -> dict[int, int]:
    import psutil

    out = {}
    for child in psutil.Process(parent).children(recursive=True):
        try:
            env = child.environ()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        if "RANK" in env and "LOCAL_RANK" in env:
            out[int(env["RANK"])] = child.pid
    return out


def test_killed_rank_fails_the_stage_cleanly(shared_inputs, tmp_path):
    work = _workdir(tmp_path / "w", 2, epochs=400.0)  # long enough to be killed mid-training
    _link_inputs(work, shared_inputs)
    assert _stage(work, "teacher_logits").returncode == 0
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "pipelines.distill"], cwd=work, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    try:
        # training has started once rank 0's curves hold a logged step
        while not any(len(_curve(p)) >= 3 for p in (work / "reports/plots").glob("distill.tmp-*/train.csv")):
            assert proc.poll() is None, f"distill ended before training:\n{proc.stderr.read()[-3000:]}"
            assert time.monotonic() < deadline, "training did not start"
            time.sleep(0.1)
        os.kill(_rank_pids(proc.pid)[1], signal.SIGKILL)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 2, err[-3000:]
    assert "error: rank 1 of 2 was killed by signal SIGKILL" in err
    # nothing half-written: no models, no curves, no report, no temporaries
    assert not (work / "models/student").exists() and not (work / "models/student_control").exists()
    assert not (work / "reports/distill.json").exists()
    assert not list(work.rglob("*.tmp-*")), list(work.rglob("*.tmp-*"))
    assert not (work / "reports/plots/distill").exists()


def test_launch_config_refusals():
    from compress.core.config import ConfigError, build
    from compress.core.distributed import LaunchConfig
    from compress.core.errors import UserError

    with pytest.raises(ConfigError, match="nccl"):
        if __import__("torch").cuda.is_available():
            pytest.skip("this machine has CUDA: nccl is legal here")
        build(LaunchConfig, {"nproc_per_node": 2, "backend": "nccl"}, "launch")
    with pytest.raises(ConfigError, match="rdzv_endpoint"):
        build(LaunchConfig, {"nnodes": 2}, "launch")
    with pytest.raises(ConfigError, match="launch.*unknown|nproc"):
        build(LaunchConfig, {"nprocs": 2}, "launch")
    with pytest.raises(UserError, match="distill.train.batch_size"):
        LaunchConfig(nproc_per_node=4, nnodes=2, rdzv_endpoint="node0:29400").check_batch(4, "distill.train.batch_size")
    LaunchConfig(nproc_per_node=2).check_batch(2, "x")  # one row per rank is enough
    assert LaunchConfig(nproc_per_node=2).resolved_backend() in ("gloo", "nccl")


def test_too_many_ranks_refused_before_any_process_starts(shared_inputs, tmp_path):
    work = _workdir(tmp_path / "w", 2)
    params = yaml.safe_load((work / "params.yaml").read_text())
    params["launch"]["nproc_per_node"] = 32
    (work / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    _link_inputs(work, shared_inputs)
    proc = _stage(work, "distill", timeout=120)
    assert proc.returncode == 2 and "exceed distill.train.batch_size = 16" in proc.stderr
    assert "launch:" not in proc.stdout  # refused before torchrun started anything


def test_queued_experiments_run_in_parallel_with_a_relative_source(tmp_path):
    """`dvc exp run --queue` twice, `dvc queue start --jobs 2`: both experiments finish in
    their .dvc/tmp/exps copies with the default-style relative source (../shared/...)."""
    import json

    from conftest import SST2_ROWS, write_tsv
    from e2e import copy_repo, dvc, env as repo_env

    data = tmp_path / "shared" / "data" / "sst2"
    write_tsv(data / "train.tsv", ["sentence", "label"], SST2_ROWS * 4)
    write_tsv(data / "dev.tsv", ["sentence", "label"], SST2_ROWS)
    repo = copy_repo(tmp_path / "repo", {
        "prepare": {"source": "../shared/data/sst2", "validation_disjoint_text": False},  # rows repeat
        # min_steps 0: the base recipe's floor (1,500 steps, for small real datasets) would
        # train each experiment's teacher 750 epochs of these 32 rows
        "teacher": {"model": "random:tiny", "train": {"epochs": 1.0, "min_steps": 0, "batch_size": 16,
                                                     "eval_every_steps": 0}},
        "measure": TINY_MEASURE,
    })
    env = repo_env()
    run = lambda *cmd: subprocess.run(cmd, cwd=repo, env=env, check=True, capture_output=True, text=True)
    run(sys.executable, "-m", "compress.cli", "link-sources")
    run("git", "add", "-A")
    run("git", "commit", "-qm", "tiny")
    for lr in ("1e-4", "3e-4"):
        dvc(repo, "exp", "run", "--queue", "-S", f"teacher.train.lr={lr}", "teacher")
    dvc(repo, "queue", "start", "--jobs", "2")
    deadline = time.monotonic() + 600
    try:
        while True:
            status = dvc(repo, "queue", "status").stdout
            if "Queued" not in status and "Running" not in status:
                break
            assert time.monotonic() < deadline, f"the queue did not finish:\n{status}"
            time.sleep(2)
    finally:
        subprocess.run(["dvc", "queue", "stop", "--kill"], cwd=repo, env=env, capture_output=True)
    assert status.count("Success") == 2, status
    rows = json.loads(dvc(repo, "exp", "show", "--json").stdout)
    exps = [e for r in rows for e in (r.get("experiments") or [])]
    assert len(exps) == 2
    lrs, accs = set(), []
    for e in exps:
        data_ = e["revs"][0]["data"]
        lrs.add(data_["params"]["params.yaml"]["data"]["teacher"]["train"]["lr"])
        teacher = data_["metrics"]["reports/teacher.json"]["data"]
        accs.append(teacher["summary"]["teacher"]["cpu"]["accuracy"])
        assert teacher["details"]["training"]["steps"] == 2  # one epoch of 32 rows at batch 16
    assert lrs == {1e-4, 3e-4} and all(0 <= a <= 1 for a in accs)
