"""What the end-to-end tests share: a temporary copy of the repository (code, dvc.yaml, and
params.yaml with a tiny override), and `dvc` run in it as users run it."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from conftest import REPO, SHARED_DATA

# isolate false: stages measure in their own process. A fresh child per artifact and target
# (the default, for honest peak memory) costs an import of torch, transformers and every
# runtime each time, minutes over a whole tiny pipeline; test_measure covers the child.
TINY_MEASURE = {"points": [[1, 128], [32, 128]], "warmup_queries": 1, "min_queries": 3,
                "min_duration_s": 0.0, "eval_max_rows": 64, "isolate": False}


BENCH_EXCLUDE = ["student_control", "student_pruned", "student_int8_torch", "student_pruned_int8_torch",
                 "student_int8_inc", "student_pruned_onnx", "student_pruned_onnx_int8", "student_ov",
                 "student_pruned_ov", "student_pruned_ov_int8", "student_pruned_bf16", "student_pruned_ov_bf16"]


def tiny_params(task: str, train_rows: int = 256) -> dict:
    """Every stage on a slice of the real data, one short epoch each."""
    return {
        "prepare": {"task": task, "source": str(SHARED_DATA / task), "max_train_rows": train_rows,
                    "max_dev_rows": 64, "max_validation_rows": 64},
        # The task presets (by_task) win over the section: shrink them too, or the MRPC
        # recipe's 575 teacher steps and 4x augmentation run on the tiny slice.
        # min_steps 0: the base recipe's floor of steps (for small real datasets) would turn
        # the tiny slice's one epoch into 1,500 steps
        "teacher": {"train": {"epochs": 1.0, "min_steps": 0, "eval_every_steps": 4},
                    "by_task": {"mrpc": {"max_length": 128, "train": {"epochs": 1.0, "max_steps": None}}}},
        "teacher_logits": {"by_task": {"mrpc": {"max_length": 128, "augment": {
            "kinds": ["swap", "cross_pair", "word_drop"], "size": 0.5}}}},
        "distill": {"train": {"epochs": 1.0, "min_steps": 0, "eval_every_steps": 4},
                    "by_task": {"mrpc": {"train": {"epochs": 1.0, "max_steps": None}},
                                "sst2": {"train": {"epochs": 1.0}}}},
        "prune": {"importance_rows": 64, "recover": True, "recovery": {"epochs": 1.0, "eval_every_steps": 4}},
        # a 1-epoch student on 64 dev rows may miss the 1% goal: keep the best trial then
        "inc": {"calibration_rows": 32, "max_trials": 2, "on_miss": "best"},
        "tensorrt": {"calibration_rows": 16},
        "openvino": {"calibration_rows": 32, "validation_rows": 32},
        "measure": TINY_MEASURE,
        # a few artifacts of each kind (the others keep their stage's figures, marked †): the
        # benchmark measures each in a fresh process, most of a tiny run's time otherwise
        "benchmark": {"seq_lens": [16, 128], "batch_sizes": [1, 32], "reference": "random:tiny",
                      "warmup_queries": 1, "min_queries": 3, "min_duration_s": 0.0, "dev_stream_repeats": 1,
                      "real_length_rows": 16, "exclude": BENCH_EXCLUDE},
    }


def copy_repo(dst: Path, params_update: dict) -> Path:
    """The code, dvc.yaml, params.yaml (sections updated key by key) and the committed inputs
    stages read (the GPU check's result, a dep of `compare`) in a new git + DVC repo."""
    for name in ("compress", "pipelines", "reports/gpu"):
        shutil.copytree(REPO / name, dst / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "dvc.yaml", dst / "dvc.yaml")
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    for sec, values in params_update.items():
        for k, v in values.items():
            if isinstance(v, dict):
                params[sec][k].update(v)
            else:
                params[sec][k] = v
    (dst / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    run_env = env()
    for cmd in (["git", "init", "-q"], ["dvc", "init", "-q"], ["dvc", "config", "core.analytics", "false"]):
        subprocess.run(cmd, cwd=dst, check=True, env=run_env)
    return dst


def env() -> dict:
    """The environment stages see: this venv's `python` first, offline, a git identity."""
    out = dict(os.environ)
    out["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{out['PATH']}"  # `python` = this venv
    out["HF_HUB_OFFLINE"] = "1"
    out["GIT_AUTHOR_NAME"] = out["GIT_COMMITTER_NAME"] = "test"
    out["GIT_AUTHOR_EMAIL"] = out["GIT_COMMITTER_EMAIL"] = "test@example.com"
    return out


def dvc(cwd: Path, *args: str, timeout: int = 900) -> subprocess.CompletedProcess:
    proc = subprocess.run(["dvc", *args], cwd=cwd, env=env(), capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"dvc {' '.join(args)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc
