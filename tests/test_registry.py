"""The backend registry: a backend registered from outside compress/ (tests/fake_backend.py)
is measured, found by path, compared, selected, promoted and served by `compress predict`
with no edit anywhere else; built-in descriptors are complete; manifests say what a
directory is."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, SST2_NAMES, make_task, tiny_model

FAST = dict(points=[[1, 16], [1, 128], [32, 128]], warmup_queries=1, min_queries=3, min_duration_s=0.0,
            max_duration_s=1.0, real_length_rows=8)


def test_every_builtin_descriptor_is_complete_and_recognises_nothing_by_name():
    from compress.backends import registry

    for b in registry.backends():
        assert b.module == registry.BUILTIN[b.format], b.format  # registered by the module the table names
        assert set(b.runners) == {"cpu", "gpu"} and b.usage and b.color.startswith("#") and b.weight_globs
    markers = [b.marker for b in registry.backends() if b.marker]
    assert len(markers) == len(set(markers))  # one format per marker file


def test_unknown_format_and_bad_descriptor_are_refused(tmp_path):
    from compress.backends import registry
    from compress.backends.base import Artifact

    with pytest.raises(ValueError, match="unknown format 'nope'.*pytorch"):
        Artifact("x", tmp_path, "nope")
    with pytest.raises(ValueError, match="'module:Class' or 'skip:<reason>'"):
        registry.Backend("bad", {"cpu": "NoModule"}, ("*.x",), "usage", "#000")
    with pytest.raises(ValueError, match="already registered by compress.backends.onnx_runtime"):
        registry.get("onnx")
        registry.register(registry.Backend("onnx", {"cpu": "m:C"}, ("*.onnx",), "u", "#000"))
    with pytest.raises(ValueError, match="built-in"):
        registry.unregister("onnx")
    (tmp_path / "manifest.json").write_text("[1]")
    with pytest.raises(ValueError, match="manifest.json: a manifest must be a JSON object"):
        registry.recognise(tmp_path)


def test_manifests_name_format_precision_and_parent(tmp_path):
    """A saved model and its torchao INT8 child say what they are; the child's manifest
    replaces the one it would otherwise inherit from the float directory."""
    from compress.backends import registry
    from compress.backends.torchao import QuantizeConfig, quantize_checkpoint
    from compress.training.models import save_classifier

    model, tok = tiny_model()
    save_classifier(model, tok, tmp_path / "float", list(SST2_NAMES))
    quantize_checkpoint(tmp_path / "float", tmp_path / "q", QuantizeConfig())
    assert registry.read_manifest(tmp_path / "float")["format"] == "pytorch"
    q = registry.read_manifest(tmp_path / "q")
    assert (q["format"], q["precision"], q["parent"]) == ("pytorch_int8", "int8", str(tmp_path / "float"))
    assert registry.recognise(tmp_path / "q") == ("pytorch_int8", "int8")
    (tmp_path / "q" / "manifest.json").unlink()  # an older directory: its marker file still says
    assert registry.recognise(tmp_path / "q") == ("pytorch_int8", "int8")


@pytest.fixture
def fake_registered():
    from compress.backends import registry

    import fake_backend  # registers "fake_numpy" at import, as a backend module does

    yield fake_backend
    registry.unregister(fake_backend.FORMAT)
    sys.modules.pop("fake_backend", None)


def test_a_registered_backend_is_measured_compared_selected_and_served(fake_registered, prepared_sst2, tmp_path):
    from compress.backends import registry
    from compress.backends.base import Artifact
    from compress.measure.benchmark import artifacts_from_reports
    from compress.measure.harness import MeasureConfig, measure
    from compress.predict import load, predict
    from compress.data.prepare import Example
    from compress.report import comparison as C
    from compress.report.html import render_html
    from compress.report.schema import make_report
    from compress.report.select import SelectPolicy, promote, select
    from compress.training.models import save_classifier

    task = make_task(names=SST2_NAMES)
    teacher, tok = tiny_model()
    save_classifier(teacher, tok, tmp_path / "models" / "teacher", task=task)
    # the fake artifact: the teacher cut to one layer (smaller, so the size cap picks it), in
    # the fake backend's format, as its (imaginary) stage would write it
    small, _ = tiny_model()
    small.bert.encoder.layer = small.bert.encoder.layer[:1]
    small.config.num_hidden_layers = 1
    fake_dir = tmp_path / "models" / "fake"
    save_classifier(small, tok, fake_dir, task=task)
    registry.write_manifest(fake_dir, "fake_numpy", "fp32", parent=str(tmp_path / "models" / "teacher"))

    # measured: in a spawned child (isolate=True), which imports the plugin module again
    mcfg = MeasureConfig(targets=["cpu", "gpu"], isolate=True, gpu_fp16=False, **FAST)
    fake = Artifact("fake", fake_dir, "fake_numpy", parent="teacher")
    teacher_records = measure(Artifact("teacher", tmp_path / "models" / "teacher"), prepared_sst2,
                              MeasureConfig(targets=["cpu"], isolate=False, gpu_fp16=False, **FAST))
    fake_records = measure(fake, prepared_sst2, mcfg)
    cpu, gpu = fake_records
    assert cpu["status"] == "ok" and cpu["backend"] == "fake-cpu" and cpu["path"] == str(fake_dir)
    assert gpu["status"] == "skipped" and gpu["reason"] == "the fake backend runs on the CPU only"
    env = {"cpu_model": "test CPU", "libraries": {}}
    reports = [make_report("teacher", teacher_records, env), make_report("fake", fake_records, env)]

    # found by the path its record carries, as the benchmark stage finds every artifact
    entries = artifacts_from_reports(reports)
    assert [(a.name, a.format, a.path) for a, _ in entries] == [
        ("teacher", "pytorch", tmp_path / "models" / "teacher"), ("fake", "fake_numpy", fake_dir)]

    # compared (the stage figures: one spawned measurement is the point here, not a benchmark
    # run) and drawn in the backend's colour
    comp = C.build(reports, None)
    assert "fake" in C.render_markdown(comp) and "#abcdef" in render_html(comp)

    # selected (the size cap leaves only the one-layer fake) and promoted with its usage line
    size = {r["artifact"]: r["size_mb"] for r in comp["records"] if r["status"] == "ok"}
    assert size["fake"] < size["teacher"]
    sel = select(comp, SelectPolicy(accuracy_floor_vs_teacher=0.01, max_size_mb=(size["fake"] + size["teacher"]) / 2))
    assert sel["chosen"] == "fake", json.dumps(sel, default=str)[:3000]
    prod = tmp_path / "models" / "production"
    meta = promote(sel, env, prod)
    assert meta["format"] == "fake_numpy" and "fake_backend.FakeRunner" in (prod / "MODEL_CARD.md").read_text()

    # served, in this process and by `compress predict` in a fresh one (the manifest names the module)
    loaded = load(prod)
    assert loaded.runner.backend == "fake-cpu"
    (out,) = predict(loaded, [Example("a warm and funny film", None, 0)])
    assert out["label"] in SST2_NAMES
    proc = subprocess.run([sys.executable, "-m", "compress.cli", "predict", "--artifact", str(prod), "what a film"],
                          capture_output=True, text=True, cwd=REPO, timeout=300,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), str(REPO)])})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split("\t")[0] in SST2_NAMES

