"""End to end: `dvc repro` of the backbone in a temporary copy of the repository, with a
tiny params override (a slice of the real SST-2 data), then the DVC read-outs users run."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from conftest import REPO, SHARED_DATA

pytestmark = pytest.mark.slow

TINY_MEASURE = {"points": [[1, 128], [32, 128]], "warmup_queries": 1, "min_queries": 3,
                "min_duration_s": 0.0, "eval_max_rows": 64}


def _copy_repo(dst: Path, params_update: dict) -> Path:
    for name in ("compress", "pipelines"):
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
    env = _env()
    for cmd in (["git", "init", "-q"], ["dvc", "init", "-q"], ["dvc", "config", "core.analytics", "false"]):
        subprocess.run(cmd, cwd=dst, check=True, env=env)
    return dst


def _env() -> dict:
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"  # `python` = this venv
    env["HF_HUB_OFFLINE"] = "1"
    env["GIT_AUTHOR_NAME"] = env["GIT_COMMITTER_NAME"] = "test"
    env["GIT_AUTHOR_EMAIL"] = env["GIT_COMMITTER_EMAIL"] = "test@example.com"
    return env


def _dvc(cwd: Path, *args: str, timeout: int = 900) -> subprocess.CompletedProcess:
    proc = subprocess.run(["dvc", *args], cwd=cwd, env=_env(), capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"dvc {' '.join(args)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


def test_backbone_repro_offline(tmp_path):
    repo = _copy_repo(tmp_path / "repo", {
        "prepare": {"source": str(SHARED_DATA / "sst2"), "max_train_rows": 256, "max_dev_rows": 64},
        "teacher": {"train": {"epochs": 1.0, "eval_every_steps": 4}},
        "measure": TINY_MEASURE,
    })
    _dvc(repo, "repro")

    teacher = json.loads((repo / "reports/teacher.json").read_text())
    cpu = next(r for r in teacher["records"] if r["target"] == "cpu")
    gpu = next(r for r in teacher["records"] if r["target"] == "gpu")
    assert cpu["status"] == "ok" and 0 < cpu["accuracy"] <= 1 and cpu["eval_rows"] == 64
    assert cpu["latency_ms_p50"] > 0 and cpu["throughput_seq_per_s"] > 0 and cpu["peak_mem_mb"] > 0
    assert gpu["status"] in ("ok", "skipped") and (gpu["status"] == "ok" or gpu["reason"])
    assert teacher["details"]["training"]["steps"] == 8
    assert (repo / "models/teacher/model.safetensors").is_file()
    assert (repo / "reports/teacher.md").read_text().startswith("# Report: teacher")
    card = json.loads((repo / "data/prepared/card.json").read_text())
    assert card["splits"]["train"]["rows"] == 256
    comparison = json.loads((repo / "reports/comparison.json").read_text())
    assert {(r["artifact"], r["target"]) for r in comparison["records"]} == {("teacher", "cpu"), ("teacher", "gpu")}

    # Nothing changed: the second run does nothing, fast.
    t = time.perf_counter()
    again = _dvc(repo, "repro")
    assert time.perf_counter() - t < 10
    assert "Running stage" not in again.stdout

    metrics = _dvc(repo, "metrics", "show", "--json").stdout
    shown = json.loads(metrics)[""]["data"]["reports/teacher.json"]["data"]
    assert shown["summary"]["teacher"]["cpu"]["accuracy"] == cpu["accuracy"]
    _dvc(repo, "plots", "show", "-o", str(tmp_path / "plots"))
    assert (tmp_path / "plots" / "index.html").is_file()

    # Changing only the measurement params invalidates the teacher (which measures), never prepare.
    params = yaml.safe_load((repo / "params.yaml").read_text())
    params["measure"]["min_queries"] = 4
    (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    status = _dvc(repo, "status", "--json").stdout
    assert set(json.loads(status)) == {"teacher"}


def test_bert_base_geometry_flows_through_prepare_and_teacher(tmp_path):
    repo = _copy_repo(tmp_path / "repo", {
        "prepare": {"source": str(SHARED_DATA / "sst2"), "max_train_rows": 32, "max_dev_rows": 32},
        "teacher": {"model": "random:bert-base", "train": {"epochs": 1.0, "batch_size": 16}},
        "measure": {**TINY_MEASURE, "min_queries": 2, "targets": ["cpu"]},
    })
    _dvc(repo, "repro", "teacher")
    teacher = json.loads((repo / "reports/teacher.json").read_text())
    (cpu,) = teacher["records"]
    assert cpu["status"] == "ok" and cpu["num_params"] > 100_000_000  # 12x768: ~109M
    assert teacher["details"]["source"]["random_init"] is True
    assert cpu["latency_ms_p50"] > 0 and cpu["throughput_seq_per_s"] > 0
