"""Stages killed with SIGKILL mid-run (training, export) leave nothing that `dvc repro` or
a later stage takes as valid, and the next `dvc repro` reruns them and succeeds; the rerun
export gives the same output hashes in dvc.lock (issue 6). Real `dvc repro` of the
backbone on a tiny params override (tests/e2e.py), as in test_pipeline_e2e."""
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from e2e import copy_repo, dvc, env, tiny_params

pytestmark = pytest.mark.slow  # one `dvc repro` of the stages up to the export, two of the export alone

STAGES_TO_EXPORT = ["prepare", "teacher", "teacher_logits", "distill", "prune", "export_onnx"]


def _kill_when(repo: Path, args: list[str], fault_point, what: str, timeout: float = 600) -> None:
    """Start `dvc repro ARGS`, SIGKILL its whole process group (DVC and the stage's Python)
    as soon as fault_point() is true."""
    proc = subprocess.Popen(["dvc", "repro", *args], cwd=repo, env=env(), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, start_new_session=True)
    deadline = time.monotonic() + timeout
    try:
        while not fault_point():
            if proc.poll() is not None:
                pytest.fail(f"dvc repro {' '.join(args)} ended (rc {proc.returncode}) before {what}:\n"
                            f"{proc.stderr.read().decode()[-2000:]}")
            if time.monotonic() > deadline:
                pytest.fail(f"no {what} within {timeout} s")
            time.sleep(0.02)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL


def _lines(path: Path) -> int:
    try:
        return len(path.read_text().splitlines())
    except OSError:
        return 0


def _leftovers(repo: Path) -> list[str]:
    return sorted(str(p.relative_to(repo)) for d in ("models", "data", "reports")
                  for p in (repo / d).rglob("*") if ".tmp-" in p.name or ".old-" in p.name)


def _status(repo: Path) -> dict:
    return json.loads(dvc(repo, "status", "--json").stdout)


def _cached_outs(repo: Path) -> dict:
    """md5 of every cached output (models, data) per stage in dvc.lock; reports are left
    out: they hold timings."""
    lock = yaml.safe_load((repo / "dvc.lock").read_text())["stages"]
    return {o["path"]: o["md5"] for name, st in lock.items() for o in st.get("outs", [])
            if not o["path"].startswith("reports")}


def test_killed_stages_leave_nothing_valid_and_rerun_cleanly(tmp_path):
    params = tiny_params("sst2")
    params["teacher"]["train"]["epochs"] = 16.0  # 128 steps: long enough to be killed mid-training
    params["teacher"]["train"]["log_every_steps"] = 1  # a curve row per step: the kill comes after 3
    # what is measured does not matter here: one small point on the CPU
    params["measure"] = {**params["measure"], "targets": ["cpu"], "points": [[1, 16]], "eval_max_rows": 16}
    repo = copy_repo(tmp_path / "repo", params)

    # 1. SIGKILL while the teacher trains: its curves are being written to a temporary folder.
    plots = repo / "reports" / "plots"
    _kill_when(repo, ["teacher"],
               lambda: any(_lines(d / "train.csv") > 3 for d in plots.glob("teacher.tmp-*")), "teacher training")
    assert not (repo / "models" / "teacher").exists()
    assert not (plots / "teacher").exists() and not (repo / "reports" / "teacher.json").exists()
    assert "teacher" in _status(repo)  # dvc knows the stage did not complete
    assert _leftovers(repo)  # the killed run's temporary folder is still there...
    # The teacher back to 8 steps: the rerun below (every stage up to the export) needs no
    # long training.
    cfg = yaml.safe_load((repo / "params.yaml").read_text())
    cfg["teacher"]["train"]["epochs"] = 1.0
    (repo / "params.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))

    # 2. The next repro reruns it (and everything up to the export) and succeeds.
    dvc(repo, "repro", "export_onnx")
    assert _leftovers(repo) == []  # ...and the rerun removed it
    assert (repo / "models" / "teacher" / "model.safetensors").is_file()
    assert not set(_status(repo)) & set(STAGES_TO_EXPORT)
    first = _cached_outs(repo)

    # 3. SIGKILL while the ONNX export writes its model folder.
    _kill_when(repo, ["-f", "-s", "export_onnx"],
               lambda: any((repo / "models").glob("student_onnx.tmp-*")), "the ONNX export writing")
    assert not (repo / "models" / "student_onnx" / "model.onnx").exists()
    assert "export_onnx" in _status(repo)
    later = subprocess.run(["dvc", "repro", "-s", "onnx_int8"], cwd=repo, env=env(), capture_output=True, text=True,
                           timeout=600)
    assert later.returncode != 0  # a later stage refuses to start from the missing export

    # 4. The next repro reruns the export and succeeds; the stale temporaries are gone, and
    #    the rerun export is byte for byte the first one (a rerun CPU stage gives the same
    #    output hashes; test_reliability trains twice and compares the weights, and
    #    benchmarks/tiny_repro.py + lock_diff.py compare every stage's outputs between commits).
    dvc(repo, "repro", "export_onnx")
    assert (repo / "models" / "student_onnx" / "model.onnx").is_file() and _leftovers(repo) == []
    assert not set(_status(repo)) & set(STAGES_TO_EXPORT)
    assert _cached_outs(repo) == first
