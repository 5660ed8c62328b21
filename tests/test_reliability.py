"""Reliability and safety (issue 6): bad params and data with errors that name the key,
file or line, nothing already built damaged by a failing stage, a full disk or an
unwritable output, CUDA out-of-memory per point, repeatable distillation, safe loading.

The SIGKILL cases (a stage killed mid-training and mid-export) run real `dvc repro` and
live in test_faults.py."""
import errno
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from compress.measure.benchmark import BenchmarkConfig
from compress.core.config import ConfigError, load_params, section
from compress.data.prepare import DataError, PrepareConfig, Prepared, prepare, sha256_file
from compress.training.distill import CacheConfig, DistillConfig, cache_teacher_outputs, distill
from compress.core.distributed import LaunchConfig
from compress.backends.inc import IncConfig
from compress.measure.harness import MeasureConfig, latency_points
from compress.backends.onnx_export import ExportConfig
from compress.backends.onnx_runtime import OrtQuantConfig
from compress.backends.openvino_ir import OpenVinoConfig
from compress.training.prune import PruneConfig
from compress.backends.torchao import QuantizeConfig
from compress.report.select import SelectPolicy
from compress.training.teacher import TeacherConfig
from compress.backends.tensorrt_engine import EngineConfig
from conftest import MRPC_NAMES, REPO, SST2_NAMES, SST2_ROWS, make_task, preset, tiny_model, write_tsv

SECTIONS = {"prepare": PrepareConfig, "launch": LaunchConfig, "teacher": TeacherConfig, "teacher_logits": CacheConfig,
            "distill": DistillConfig, "prune": PruneConfig, "quantize": QuantizeConfig, "inc": IncConfig,
            "export_onnx": ExportConfig, "onnx_int8": OrtQuantConfig, "openvino": OpenVinoConfig,
            "tensorrt": EngineConfig,
            "benchmark": BenchmarkConfig, "select": SelectPolicy, "measure": MeasureConfig}


def test_every_params_section_has_a_validated_config():
    params = load_params(REPO / "params.yaml")
    assert set(params) == set(SECTIONS)
    for name, cls in SECTIONS.items():
        section(params, name, cls)


# --- params.yaml: the message names the key ------------------------------------------------

def _override(params: dict, dotted: str, value) -> dict:
    params = json.loads(json.dumps(params))
    *path, last = dotted.split(".")
    node = params
    for k in path:
        node = node[k]
    node[last] = value
    return params


@pytest.mark.parametrize("key, value, message", [
    ("distill.student_layer", [0, 2], r"unknown key 'distill.student_layer'. Did you mean 'student_layers'\?"),
    ("prune.head_fracton", 0.3, r"Did you mean 'head_fraction'\?"),
    ("teacher.train.batch_size", "32", r"'teacher.train.batch_size' must be int, got '32'"),
    ("distill.loss.temperature", -2.0, r"distill.loss: temperature must be > 0, got -2.0"),
    ("prune.head_fraction", 1.0, r"head_fraction must be in \[0, 1\), got 1.0"),
    ("teacher.train.batch_size", 0, r"batch_size must be >= 1, got 0"),
    ("distill.train.batch_size", 0, r"batch_size must be >= 1, got 0"),
    ("measure.targets", ["cpu", "tpu"], r"unknown target 'tpu': choose from cpu, gpu"),
    ("select.target", "tpu", r"target must be one of cpu, gpu, got 'tpu'"),
    ("benchmark.targets", ["npu"], r"targets must be a non-empty list of cpu, gpu"),
    ("prepare.kind", "regression", r"unknown kind 'regression'"),
    ("launch.nproc_per_node", 0, r"launch: nproc_per_node must be >= 1, got 0"),
    ("launch.backend", "mpi", r"launch: backend must be one of auto, gloo, nccl, got 'mpi'"),
])
def test_bad_params_name_the_key(key, value, message):
    params = _override(load_params(REPO / "params.yaml"), key, value)
    name = key.split(".")[0]
    with pytest.raises(ConfigError, match=message):
        section(params, name, SECTIONS[name])


def _stage(cwd: Path, module: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1"}
    return subprocess.run([sys.executable, "-m", module], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=300)


def test_a_stage_with_bad_params_stops_before_touching_its_outputs(tmp_path):
    """The config is built before any work: exit 2, one line naming the key, and the
    artifact an earlier run built is byte for byte what it was."""
    params = _override(load_params(REPO / "params.yaml"), "prune.head_fraction", 1.5)
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    built = tmp_path / "models" / "student_pruned" / "model.safetensors"
    built.parent.mkdir(parents=True)
    built.write_bytes(b"weights of an earlier run")
    proc = _stage(tmp_path, "pipelines.prune")
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines()[-1] == "error: prune: head_fraction must be in [0, 1), got 1.5"
    assert built.read_bytes() == b"weights of an earlier run"
    assert sorted(p.name for p in built.parent.parent.iterdir()) == ["student_pruned"]


# --- data ------------------------------------------------------------------------------------

def test_a_split_with_one_class_is_refused_and_the_previous_output_kept(tmp_path, sst2_dir):
    out = tmp_path / "prepared"
    prepare(preset("sst2", str(sst2_dir)), out)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    write_tsv(sst2_dir / "train.tsv", ["sentence", "label"], [r for r in SST2_ROWS if r[1] == "1"] * 3)
    # 12 rows, one of them carved as validation
    with pytest.raises(DataError, match=r"split 'train' holds only the label 'positive' \(11 rows\)"):
        prepare(preset("sst2", str(sst2_dir)), out)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert [p.name for p in tmp_path.iterdir() if ".tmp-" in p.name] == []


def test_a_subsample_that_leaves_one_class_is_refused(tmp_path, sst2_dir):
    with pytest.raises(DataError, match=r"split 'dev' holds only the label .*max_\*_rows slice"):
        prepare(preset("sst2", str(sst2_dir), max_dev_rows=1), tmp_path / "p")


PEAK_SCRIPT = """
import sys
from compress.data.prepare import PrepareConfig, prepare
def hwm():
    for line in open('/proc/self/status'):
        if line.startswith('VmHWM:'):
            return int(line.split()[1]) / 1024
base = hwm()
# validation_disjoint_text off: every row here repeats (the disjoint carve would refuse the
# file) and its text index holds a hash per distinct text, not a byte per row
card = prepare(PrepareConfig(task='sst2', source=sys.argv[1], max_train_rows=None if sys.argv[3] == 'all' else
                             int(sys.argv[3]), validation_disjoint_text=False), sys.argv[2])
print(card['splits']['train']['rows'], base, hwm())
"""


@pytest.mark.parametrize("keep", ["all", "1000"])
def test_a_large_file_is_streamed_with_bounded_memory(tmp_path, keep):
    """~60 MB, 1.2 million rows: held in memory as Examples this would take several
    hundred MiB; streamed (all rows, or a reservoir sample) the peak barely moves."""
    src = tmp_path / "big"
    src.mkdir()
    line = "a gorgeous , witty , seductive movie that never lets go of you .\t1\n"
    other = "the movie is a disaster from start to finish , dull and lifeless .\t0\n"
    with open(src / "train.tsv", "w", encoding="utf-8") as f:
        f.write("sentence\tlabel\n")
        for _ in range(300_000):
            f.write(line + other + line + other)
    write_tsv(src / "dev.tsv", ["sentence", "label"], SST2_ROWS)
    assert (src / "train.tsv").stat().st_size > 60 * 2**20
    proc = subprocess.run([sys.executable, "-c", PEAK_SCRIPT, str(src), str(tmp_path / "out"), keep],
                          cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows, base, peak = proc.stdout.split()
    assert int(rows) == (1_198_000 if keep == "all" else 1000)  # 2,000 (max_validation_rows) carved as validation
    assert float(peak) - float(base) < 40, f"peak RSS grew by {float(peak) - float(base):.0f} MiB"


# --- faults: full disk, unwritable output, CUDA out of memory -----------------------------------

def test_a_full_disk_mid_write_is_a_clear_error_and_keeps_the_previous_output(tmp_path, sst2_dir, monkeypatch,
                                                                               capsys):
    from compress.data import prepare as data
    from pipelines.common import run

    out = tmp_path / "prepared"
    prepare(preset("sst2", str(sst2_dir)), out)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    written = []

    def fill_disk(ex, task):  # the disk fills up after a few rows
        written.append(ex)
        if len(written) > 5:
            raise OSError(errno.ENOSPC, "No space left on device", str(out) + ".tmp/train.jsonl")
        return json.dumps({"text_a": ex.text_a, "text_b": ex.text_b, "label": ex.label}) + "\n"

    monkeypatch.setattr(data, "json_line", fill_disk)
    monkeypatch.setattr("pipelines.common.load_params", lambda: {})
    with pytest.raises(SystemExit) as e:
        run(lambda params: prepare(preset("sst2", str(sst2_dir)), out))
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "error: cannot write" in err and "No space left on device; free some disk space" in err
    assert "Nothing already built was replaced" in err
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert [p.name for p in tmp_path.iterdir() if ".tmp-" in p.name or ".old-" in p.name] == []


def test_an_unwritable_output_is_a_clear_error_and_the_previous_output_stays(tmp_path, monkeypatch, capsys):
    """The final move into place fails (a read-only or foreign-owned directory; simulated,
    because these tests may run as root, for whom permissions do not apply)."""
    from compress.core import io
    from pipelines.common import run

    target = tmp_path / "models" / "student"
    with io.atomic_dir(target) as tmp:
        (tmp / "model.safetensors").write_bytes(b"v1")
    real_replace = os.replace

    def refuse(src, dst):
        if ".tmp-" in str(src):  # moving the finished output into place
            raise PermissionError(errno.EACCES, "Permission denied", str(dst))
        return real_replace(src, dst)

    monkeypatch.setattr(io.os, "replace", refuse)
    monkeypatch.setattr("pipelines.common.load_params", lambda: {})

    def stage(params):
        with io.atomic_dir(target) as tmp:
            (tmp / "model.safetensors").write_bytes(b"v2")

    with pytest.raises(SystemExit) as e:
        run(stage)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert f"error: cannot write {target}: Permission denied; make the output directory writable" in err
    assert (target / "model.safetensors").read_bytes() == b"v1"
    assert sorted(p.name for p in target.parent.iterdir()) == ["student"]


class _FakeGpuRunner:
    """Runs batches below 32 rows; a batch of 32 does not fit in device memory."""

    def __call__(self, batch):
        if batch["input_ids"].shape[0] >= 32:
            raise RuntimeError("CUDA out of memory. Tried to allocate 3.00 GiB (GPU 0; 1.00 GiB free)")
        return np.zeros((batch["input_ids"].shape[0], 2), dtype=np.float32)

    def synchronize(self):
        pass


def test_cuda_out_of_memory_is_recorded_per_point_and_the_rest_continues():
    cfg = MeasureConfig(points=[[1, 8], [32, 8], [4, 8]], warmup_queries=0, min_queries=2, min_duration_s=0.0)
    make = lambda b, s: {"input_ids": np.zeros((b, s), dtype=np.int64)}  # noqa: E731
    pts = latency_points(_FakeGpuRunner(), make, cfg, "gpu")
    assert [(p.batch_size, p.status) for p in pts] == [(1, "ok"), (32, "does_not_fit"), (4, "ok")]
    assert pts[1].reason.startswith("CUDA out of memory: CUDA out of memory. Tried to allocate 3.00 GiB")
    assert pts[1].latency_ms_p50 is None and pts[2].latency_ms_p50 >= 0
    with pytest.raises(RuntimeError, match="out of memory"):  # on the CPU it is a real failure
        latency_points(_FakeGpuRunner(), make, cfg, "cpu")


# --- repeatable results ------------------------------------------------------------------------

def test_same_params_and_seed_give_bitwise_identical_students(tmp_path, prepared_sst2):
    """A short CPU distillation (student and label-only control) run twice from the same
    teacher and cache: identical weight files and identical accuracy figures."""
    from compress.training.models import save_classifier

    teacher_dir = tmp_path / "teacher"
    model, tok = tiny_model(seed=5)
    save_classifier(model, tok, teacher_dir, ["negative", "positive"])
    prepared = Prepared.open(prepared_sst2)
    cache_teacher_outputs(teacher_dir, prepared, tmp_path / "cache", CacheConfig(max_length=32, batch_size=16))
    cfg = section({"distill": {"student_layers": [1], "train": {"epochs": 2.0, "batch_size": 8,
                                                                "eval_every_steps": 2, "threads": 2}}},
                  "distill", DistillConfig)
    runs = []
    for i in range(2):
        d = tmp_path / f"run{i}"
        summary = distill(cfg, teacher_dir, tmp_path / "cache", prepared, d / "student", d / "curves",
                          d / "control", d / "control_curves", eval_max_length=32)
        runs.append((sha256_file(d / "student" / "model.safetensors"), sha256_file(d / "control" / "model.safetensors"),
                     json.dumps(summary["student"]["final_validation"]), json.dumps(summary["control"]["final_validation"]),
                     (d / "curves" / "train.csv").read_text()))
    assert runs[0] == runs[1]


# --- safety ------------------------------------------------------------------------------------

SOURCES = [p for d in ("compress", "pipelines", "benchmarks") for p in (REPO / d).rglob("*.py")]


def _calls(path: Path):
    """(dotted callee name, {keyword: constant value or "<expr>"}) of every call in a file;
    the syntax tree, so docstrings that explain what is not done do not count."""
    import ast

    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call):
            name = ast.unparse(node.func)
            kw = {k.arg: (k.value.value if isinstance(k.value, ast.Constant) else "<expr>") for k in node.keywords}
            yield name, kw


def test_no_unsafe_loading_anywhere_in_the_source():
    assert len(SOURCES) > 20
    seen_trust = 0
    for path in SOURCES:
        for name, kw in _calls(path):
            where = f"{path.relative_to(REPO)}: {name}({kw})"
            if name == "torch.load":
                assert kw.get("weights_only") is True, where
            if "trust_remote_code" in kw:
                seen_trust += 1
                assert kw["trust_remote_code"] is False, where
            assert name not in ("pickle.load", "pickle.loads", "dill.load", "joblib.load",
                                "torch.export.load"), where
            if name in ("np.load", "numpy.load"):
                assert kw.get("allow_pickle") in (None, False), where
            if name in ("onnx.save", "onnx.save_model", "onnx.external_data_helper.convert_model_to_external_data"):
                assert kw.get("save_as_external_data") in (None, False), where
    assert seen_trust >= 1  # the Hub loader passes trust_remote_code=False explicitly


def test_hub_ids_can_be_pinned_to_a_revision():
    params = _override(load_params(REPO / "params.yaml"), "teacher.model", "bert-base-uncased")
    params = _override(params, "teacher.revision", "86b5e0934494bd15c9632b12f734a8a67f723594")
    assert section(params, "teacher", TeacherConfig).revision.startswith("86b5e09")
    params = _override(params, "prepare.source", "hub:glue/sst2")
    params = _override(params, "prepare.revision", "bcdcba79d07bc864c1c254ccfcedcce55bcc9a8c")
    assert section(params, "prepare", PrepareConfig).revision.startswith("bcdcba7")


# --- compress predict on hostile input ----------------------------------------------------------

def test_predict_truncates_a_100k_character_line(production, tmp_path, capsys):
    from compress.cli import main

    f = tmp_path / "in.txt"
    f.write_text("short and sweet\n" + "wonderful " * 10_000 + "\nthe end\n", encoding="utf-8")
    assert len(f.read_text().splitlines()[1]) == 100_000
    assert main(["predict", "--artifact", str(production), "--file", str(f), "--format", "jsonl"]) == 0
    out = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert [len(r["text"]) for r in out] == [15, 100_000, 7]  # echoed whole; the tokenizer truncated it
    assert all(abs(sum(r["probabilities"].values()) - 1) < 1e-4 for r in out)


@pytest.mark.parametrize("content, message", [
    (b"", "no input texts"),
    (b"\n\n", "no input texts"),
    (b"fine\nbad \xff byte\n", r"in.txt:2: not valid UTF-8"),
])
def test_predict_bad_files_name_the_problem(production, tmp_path, capsys, content, message):
    from compress.cli import main

    f = tmp_path / "in.txt"
    f.write_bytes(content)
    assert main(["predict", "--artifact", str(production), "--file", str(f)]) == 2
    assert re.search(message, capsys.readouterr().err)


def test_predict_on_a_pair_task_refuses_single_sentences(tmp_path, capsys):
    from compress.cli import main
    from compress.training.models import save_classifier
    from conftest import tiny_model

    model, tok = tiny_model()
    save_classifier(model, tok, tmp_path / "pair", task=make_task("mrpc", "pair_classification", ("0", "1"),
                                                                  MRPC_NAMES))
    assert main(["predict", "--artifact", str(tmp_path / "pair"), "one sentence only"]) == 2
    assert "argument:1: this task takes sentence pairs" in capsys.readouterr().err


def test_predict_streams_its_input():
    """An endless input yields its first results after one chunk: nothing is read whole."""
    import itertools

    from compress.data.prepare import Example
    from compress.predict import Loaded, predict_stream

    class Runner:
        num_labels = 2
        tokenizer = tiny_model()[1]

        def __call__(self, batch):
            return np.zeros((len(batch["input_ids"]), 2), dtype=np.float32)

    loaded = Loaded(runner=Runner(), task=make_task(names=SST2_NAMES), label_names=["negative", "positive"], meta=None)
    endless = (Example(f"text {i}", None, -1) for i in itertools.count())
    first = list(itertools.islice(predict_stream(loaded, endless), 5))
    assert [r["text"] for r in first] == [f"text {i}" for i in range(5)]


def test_every_stage_lists_the_code_it_imports():
    """dvc.yaml deps name every project module a stage's entry point imports, directly or
    through other project modules (lazy imports inside functions included): a change to
    one must rerun the stage, or dvc.lock would vouch for outputs the code no longer makes."""
    import ast

    import yaml

    def module_file(name: str):
        path = REPO / (name.replace(".", "/") + ".py")
        return path if path.is_file() else None

    def imports(path):
        pkg = list(path.relative_to(REPO).parts[:-1])  # e.g. ["compress", "tasks"]
        out = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # from .x import y / from ..x import y / from . import x
                    up = ".".join(pkg[:len(pkg) - node.level + 1])
                    base = f"{up}.{base}" if base else up
                for alias in node.names:
                    out |= {f"{base}.{alias.name}", base}
            elif isinstance(node, ast.Import):
                out |= {a.name for a in node.names}
        return {f for f in map(module_file, out) if f is not None}

    stages = yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]
    for name, stage in stages.items():
        entry = module_file(stage["cmd"].split("-m ", 1)[1].split()[0])
        seen, todo = set(), [entry]
        while todo:
            f = todo.pop()
            if f not in seen:
                seen.add(f)
                todo += imports(f)
        needed = {str(f.relative_to(REPO)) for f in seen if f.name != "__init__.py"}
        missing = sorted(needed - set(stage["deps"]))
        assert not missing, f"dvc.yaml stage {name} imports {missing} but does not list them in deps"


def test_stages_track_every_param_key_and_only_their_own_tasks_preset():
    """A section with task presets is listed key by key in dvc.yaml, its presets as
    `<section>.by_task.${prepare.task}`: every key still reruns the stage, and tuning one
    task's preset never reruns another task's pipeline. So every such section needs a
    preset for every task (DVC refuses a listed key that is missing)."""
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    stages = yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]
    tasks = set(params["prepare"]["by_task"])  # the datasets params declare
    assert {"sst2", "mrpc", "conll2003", "banking77", "ncbi_disease"} <= tasks
    for sec, body in params.items():
        if not isinstance(body, dict) or "by_task" not in body:
            continue
        assert set(body["by_task"]) == tasks, f"{sec}.by_task needs a preset per task ({{}}: none)"
        users = [name for name, st in stages.items() if any(str(p).split(".")[0] == sec for p in st.get("params", []))]
        assert users, sec
        for name in users:
            listed = set(map(str, stages[name]["params"]))
            assert sec not in listed, f"stage {name} lists all of {sec}: every task's presets would rerun it"
            want = {f"{sec}.{k}" for k in body if k != "by_task"} | {f"{sec}.by_task.${{prepare.task}}"}
            assert want <= listed, f"stage {name} does not track {sorted(want - listed)}"
