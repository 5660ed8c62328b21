"""benchmarks/optimum_peer.py: the project's student against Optimum's own routes (optimum-onnx +
ORTQuantizer; optimum-intel's OpenVINO export + OVQuantizer), on a tiny BERT."""
from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import REPO, tiny_model

SCRIPT = REPO / "benchmarks" / "optimum_peer.py"


def _load_script():
    spec = importlib.util.spec_from_file_location("optimum_peer", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _optimum_missing() -> str | None:
    try:
        from optimum.exporters.onnx import main_export  # noqa: F401
        from optimum.onnxruntime import ORTQuantizer  # noqa: F401
        from optimum.onnxruntime.configuration import AutoQuantizationConfig  # noqa: F401
    except ImportError as e:
        return f'optimum / optimum-onnx not installed ({e}); pip install -e ".[peer]"'
    return None


def _optimum_intel_missing() -> str | None:
    try:
        import nncf  # noqa: F401
        import openvino  # noqa: F401
        from optimum.intel import OVModelForSequenceClassification, OVQuantizer  # noqa: F401
    except ImportError as e:
        return f'optimum-intel[openvino] not installed ({e}); pip install -e ".[peer]"'
    return None


def _project_openvino_missing() -> str | None:
    """The project's OpenVINO stage (compress/backends/openvino_ir.py) builds the IRs the check measures."""
    try:
        from compress.backends.openvino_ir import OpenVinoConfig, build_openvino  # noqa: F401
        from compress.backends.openvino_runner import OpenVinoRunner  # noqa: F401
    except ImportError as e:
        return f"the project's OpenVINO module is not available ({e})"
    return None


peer = _load_script()


@pytest.fixture
def student_dir(tmp_path) -> Path:
    from compress.training.models import save_classifier

    model, tokenizer = tiny_model()
    out = tmp_path / "student"
    save_classifier(model, tokenizer, out, ["negative", "positive"])
    return out


def _project_int8(model_dir: Path, out_dir: Path) -> Path:
    """A stand-in for the project's INT8 ONNX: TorchScript export (opset 17, dynamic batch and
    sequence) + onnxruntime dynamic quantization."""
    import torch
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from transformers import BertForSequenceClassification

    model = BertForSequenceClassification.from_pretrained(model_dir).eval()
    out_dir.mkdir(parents=True, exist_ok=True)
    fp32, int8 = out_dir / "model_fp32.onnx", out_dir / "model.onnx"
    ids = torch.ones(2, 16, dtype=torch.long)
    names = ["input_ids", "attention_mask", "token_type_ids"]
    axes = {n: {0: "batch", 1: "sequence"} for n in names} | {"logits": {0: "batch"}}
    with torch.no_grad():
        torch.onnx.export(model, (ids, torch.ones_like(ids), torch.zeros_like(ids)), str(fp32),
                          input_names=names, output_names=["logits"], dynamic_axes=axes,
                          opset_version=17, dynamo=False)
    quantize_dynamic(str(fp32), str(int8), weight_type=QuantType.QInt8)
    fp32.unlink()
    return int8


def test_help_needs_no_optimum(capsys):
    with pytest.raises(SystemExit) as e:
        peer.parse_args(["--help"])
    assert e.value.code == 0
    assert "peer" in capsys.readouterr().out


@pytest.mark.parametrize("bf16_missing", [False, True])
def test_peer_default_runtime_follows_the_project_rule(monkeypatch, bf16_missing):
    """Without a recorded runtime the peer rows run as the project's IRs would: fp32 at f32,
    bf16 at bf16, an INT8 graph's float parts at bf16 only where the CPU has it."""
    import compress.core.env as env
    from benchmarks.peer.openvino_runtime import default_runtime

    monkeypatch.setattr(env, "bf16_unavailable", lambda: "no native bf16" if bf16_missing else None)
    assert default_runtime("fp32") == {"inference_precision": "f32", "cpu_pinning": False}
    assert default_runtime("bf16")["inference_precision"] == "bf16"
    assert default_runtime("int8")["inference_precision"] == ("f32" if bf16_missing else "bf16")


def test_missing_project_onnx_names_the_path(tmp_path, student_dir, prepared_sst2, capsys):
    missing = tmp_path / "nowhere" / "model.onnx"
    rc = peer.main(["--model", str(student_dir), "--project-onnx", str(missing), "--data", str(prepared_sst2)])
    assert rc == 2
    err = capsys.readouterr().err
    assert str(missing) in err and "--project-onnx" in err and "not found" in err


def test_missing_optimum_says_how_to_install(tmp_path, student_dir, prepared_sst2, capsys, monkeypatch):
    onnx_file = tmp_path / "model.onnx"
    onnx_file.write_bytes(b"")  # never read: the missing extra is reported first
    monkeypatch.setitem(sys.modules, "optimum.exporters.onnx", None)  # makes the import fail
    rc = peer.main(["--model", str(student_dir), "--project-onnx", str(onnx_file), "--data", str(prepared_sst2)])
    assert rc == 2
    assert 'pip install -e ".[peer]"' in capsys.readouterr().err


@pytest.mark.skipif(_optimum_missing() is not None, reason=str(_optimum_missing()))
def test_peer_run_on_tiny_bert(tmp_path, student_dir, prepared_sst2, capsys):
    project = _project_int8(student_dir, tmp_path / "student_onnx_int8")
    out = tmp_path / "peer.json"
    work = tmp_path / "work"
    readme = tmp_path / "README.md"
    readme.write_text("# x\n<!-- peer:start -->\nold\n<!-- peer:end -->\ntail\n")
    rc = peer.main(["--model", str(student_dir), "--checks", "onnx", "--project-onnx", str(project),
                    "--data", str(prepared_sst2),
                    "--threads", "1", "--seq", "32", "--min-queries", "6", "--min-duration-s", "0",
                    "--rounds", "2", "--warmup", "1", "--json", str(out), "--work-dir", str(work),
                    "--readme", str(readme)])
    assert rc == 0
    block = readme.read_text()
    assert "old" not in block and "| | project INT8 | Optimum INT8 |" in block and block.endswith("tail\n")
    printed = capsys.readouterr().out
    assert "project INT8" in printed and "Optimum INT8" in printed and "optimum p50 / project p50" in printed

    res = json.loads(out.read_text())
    assert res["checks"] == ["onnx"] and "openvino" not in res
    assert set(res["routes"]) == {"project", "optimum"}
    assert res["dev_rows"] == 8
    for name, route in res["routes"].items():
        assert 0.0 <= route["accuracy"] <= 1.0, name
        lat = route["latency"]
        assert lat["latency_ms_p50"] > 0 and lat["latency_ms_p99"] >= lat["latency_ms_p50"], name
        assert lat["batch_size"] == 1 and lat["seq_len"] == 32 and lat["queries"] >= 6, name
        assert len(lat["round_p50_ms"]) == 2, name
        assert route["size_mb"] > 0, name
        assert set(route["graph_inputs"]) <= {"input_ids", "attention_mask", "token_type_ids"}, name
    cmp = res["comparison"]
    assert 0.0 <= cmp["prediction_agreement"] <= 1.0
    assert cmp["p50_ratio_optimum_over_project"] > 0
    assert cmp["disagreements"] == round((1 - cmp["prediction_agreement"]) * 8)
    q = res["optimum_route"]["quantization"]
    assert q["call"] == "AutoQuantizationConfig.avx512_vnni(is_static=False, per_channel=False)"
    assert q["is_static"] is False and q["per_channel"] is False
    env = res["environment"]
    assert env["threads"] == 1 and env["onnxruntime"] and env["optimum"]
    # --work-dir keeps Optimum's artifacts.
    assert (work / "optimum_onnx_int8" / "model_quantized.onnx").is_file()
    assert (work / "optimum_onnx" / "model.onnx").is_file()


# --- the openvino check ------------------------------------------------------------------

OV_FAST = ["--threads", "1", "--seq", "32", "--batch", "4", "--ov-min-queries", "4", "--ov-min-duration-s", "0",
           "--warmup", "1", "--calibration-rows", "8"]
PEER_ROWS = ("optimum_intel_ov", "optimum_intel_ov_bf16", "optimum_intel_ov_int8")
PROJECT_ROWS = ("student_ov", "student_ov_bf16", "student_ov_int8")


def test_onnx_check_needs_project_onnx(student_dir, prepared_sst2, capsys):
    rc = peer.main(["--model", str(student_dir), "--checks", "onnx", "--data", str(prepared_sst2)])
    assert rc == 2
    err = capsys.readouterr().err
    assert "--project-onnx is required" in err and "--checks openvino" in err


def test_project_ov_must_be_a_directory(tmp_path, student_dir, prepared_sst2, capsys):
    not_a_dir = tmp_path / "model.xml"
    not_a_dir.write_text("<net/>")
    rc = peer.main(["--model", str(student_dir), "--checks", "openvino", "--project-ov", str(not_a_dir),
                    "--data", str(prepared_sst2)])
    assert rc == 2
    err = capsys.readouterr().err
    assert "--project-ov" in err and str(not_a_dir) in err and "not a directory" in err


def test_missing_optimum_intel_says_how_to_install(student_dir, prepared_sst2, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "optimum.intel", None)  # makes the import fail
    rc = peer.main(["--model", str(student_dir), "--checks", "openvino", "--data", str(prepared_sst2)])
    assert rc == 2
    err = capsys.readouterr().err
    assert "optimum-intel" in err and 'pip install -e ".[peer]"' in err


@pytest.mark.skipif(_optimum_intel_missing() is not None, reason=str(_optimum_intel_missing()))
def test_optimum_intel_runner_matches_pytorch(tmp_path, student_dir, prepared_sst2):
    """optimum-intel's export of the student, run by the peer runner at f32, gives the project's
    PyTorch logits; its static INT8 stays close; threads and precision are pinned. The harness
    finds the peer format only while it is registered, also in a spawned child, and forgets it
    after."""
    import compress.backends.base as runners
    from compress.backends import registry
    from compress.data.prepare import Prepared
    from compress.measure.harness import MeasureConfig, measure
    from compress.training.models import load_tokenizer
    from compress.backends.base import Artifact, load_runner
    from compress.data.tokens import collate, encode

    tokenizer = load_tokenizer(student_dir)
    prepared = Prepared.open(prepared_sst2)
    calibration = peer.calibration_rows(prepared, tokenizer, 8, 32)
    assert len(calibration) == 8 and calibration[0]["input_ids"].shape == (1, 32)
    built = peer.build_optimum_intel(student_dir, tmp_path / "work", tokenizer, calibration)
    for d in (built["fp32_dir"], built["int8_dir"]):
        assert (d / "openvino_model.xml").is_file() and (d / "openvino_model.bin").is_file()
        assert (d / "tokenizer_config.json").is_file() and (d / "config.json").is_file()
    q = built["quantization"]
    assert q["num_samples"] == 8 and q["nncf_preset"] == "mixed" and q["model_type"] == "transformer"
    assert q["calibration"] == {"split": "train", "rows": 8, "seed": 0, "padding": "max_length", "seq_len": 32}

    dev = prepared.split("dev")
    batches = [collate(encode(tokenizer, dev, 64), list(range(len(dev)))),  # padded to the longest row
               collate(encode(tokenizer, dev, 32), [0, 1, 2], pad_to=32)]
    with peer.peer_runner_registered():
        from benchmarks.peer.runner import OptimumIntelRunner

        fp32_art = peer.peer_artifact("optimum_intel_ov", built["fp32_dir"], "fp32")
        int8_art = peer.peer_artifact("optimum_intel_ov_int8", built["int8_dir"], "int8", "optimum_intel_ov")
        assert runners.runner_class(fp32_art, "cpu") is OptimumIntelRunner
        assert runners.skip_reason(fp32_art, "gpu") == "optimum-intel's peer route is measured on the CPU only"
        assert "benchmarks.peer.runner" in registry.plugin_modules()
        # isolate=True: a spawned child re-imports benchmarks.peer.runner before it looks the format up
        cfg = MeasureConfig(targets=["cpu"], points=[[1, 16]], warmup_queries=1, min_queries=2, min_duration_s=0.0,
                            max_duration_s=1.0, threads=1, isolate=True, gpu_fp16=False)
        rec = measure(fp32_art, prepared_sst2, cfg)[0]
        assert rec["status"] == "ok", rec
        assert rec["backend"] == "optimum-intel-openvino-cpu" and rec["format"] == peer.OV_PEER_FORMAT
        assert rec["eval_rows"] == 8 and rec["size_mb"] > 0
    assert not registry.known(peer.OV_PEER_FORMAT)
    assert "benchmarks.peer.runner" not in registry.plugin_modules()
    with pytest.raises(ValueError, match="unknown format 'optimum_intel_openvino'"):
        peer.peer_artifact("optimum_intel_ov", built["fp32_dir"], "fp32")

    reference = load_runner(Artifact("student", student_dir), "cpu", 1)
    fp32 = OptimumIntelRunner(fp32_art, "cpu", 1)
    int8 = OptimumIntelRunner(int8_art, "cpu", 1)
    assert fp32.num_labels == 2 and fp32.num_params > 0 and fp32.tokenizer.vocab_size == tokenizer.vocab_size
    assert OptimumIntelRunner.unavailable("cpu") is None and "CPU only" in OptimumIntelRunner.unavailable("gpu")
    props = peer.compiled_properties(peer.find_compiled_model(fp32))
    assert props["INFERENCE_PRECISION_HINT"] == "f32" and props["INFERENCE_NUM_THREADS"] == 1
    assert props["NUM_STREAMS"] == 1 and props["PERFORMANCE_HINT"] == "LATENCY"
    for batch in batches:
        want = reference(batch)
        got = fp32(batch)
        assert got.dtype == np.float32 and got.shape == want.shape
        assert np.abs(got - want).max() < 1e-4
        scale = float(np.abs(want).max())
        assert np.abs(int8(batch) - want).max() < 0.1 * scale + 1e-3


def _peer_in_a_fresh_interpreter(modules: list[str]) -> tuple:
    """In a spawned child: what the measurement harness does before it looks a format up."""
    from compress.backends import registry

    registry.load_plugins(modules)
    backend = registry.get("optimum_intel_openvino")
    return backend.module, backend.runners["cpu"], registry.known("optimum_intel_openvino")


def test_peer_format_is_registered_only_while_the_check_runs():
    """Importing the script registers nothing; inside the context the peer format resolves to
    OptimumIntelRunner and a spawned interpreter registers it again from the module name it
    was registered under (needs no optimum-intel: the runner imports it only when built)."""
    import multiprocessing

    from compress.backends import registry
    from compress.backends.base import runner_class

    assert not registry.known(peer.OV_PEER_FORMAT)
    with peer.peer_runner_registered() as backend:
        assert backend.module == "benchmarks.peer.runner"
        assert backend.runners == {"cpu": "benchmarks.peer.runner:OptimumIntelRunner",
                                   "gpu": "skip:optimum-intel's peer route is measured on the CPU only"}
        art = peer.peer_artifact("optimum_intel_ov", REPO, "fp32")
        assert runner_class(art, "cpu").__name__ == "OptimumIntelRunner"
        assert runner_class(art, "gpu") == "optimum-intel's peer route is measured on the CPU only"
        modules = registry.plugin_modules()
        assert "benchmarks.peer.runner" in modules
        with multiprocessing.get_context("spawn").Pool(1) as pool:
            got = pool.apply(_peer_in_a_fresh_interpreter, (modules,))
        assert got == ("benchmarks.peer.runner", "benchmarks.peer.runner:OptimumIntelRunner", True)
    assert not registry.known(peer.OV_PEER_FORMAT) and "benchmarks.peer.runner" not in registry.plugin_modules()
    with peer.peer_runner_registered():  # a second check in the same process registers it again
        assert registry.known(peer.OV_PEER_FORMAT)
    assert not registry.known(peer.OV_PEER_FORMAT)


def _check_ov_result(res: dict, printed: str, rounds: int) -> dict:
    ov = res["openvino"]
    for name in PEER_ROWS:
        assert f"| optimum-intel {name} |" in printed, name
    for name in PROJECT_ROWS:
        assert f"| project {name} |" in printed, name
    assert "OpenVINO peer check" in printed
    routes = ov["routes"]
    assert set(routes) == set(PEER_ROWS) | set(PROJECT_ROWS)
    for name in PEER_ROWS:
        route = routes[name]
        if name.endswith("_bf16") and route["status"] == "skipped":  # a CPU without native bf16
            assert "bf16" in route["reason"]
            continue
        assert route["status"] == "ok", route
        assert 0.0 <= route["accuracy"] <= 1.0 and route["size_mb"] > 0 and route["eval_rows"] == 8
        assert route["latency"]["batch_size"] == 1 and route["latency"]["seq_len"] == 32
        assert route["latency"]["latency_ms_p50"] > 0 and len(route["latency"]["round_p50_ms"]) == rounds
        assert route["throughput"]["batch_size"] == 4 and route["throughput"]["throughput_seq_per_s"] > 0
        assert route["inference"]["INFERENCE_NUM_THREADS"] == 1
        assert route["inference"]["INFERENCE_PRECISION_HINT"] == route["runtime"]["inference_precision"]
        assert route["backend"] == "optimum-intel-openvino-cpu"
    assert routes["optimum_intel_ov"]["inference"]["INFERENCE_PRECISION_HINT"] == "f32"
    assert routes["optimum_intel_ov_int8"]["size_mb"] < routes["optimum_intel_ov"]["size_mb"]
    assert ov["measure"]["harness"] == "compress.measure.harness.measure" and ov["measure"]["threads"] == 1
    assert res["environment"]["optimum-intel"] and res["environment"]["openvino"]
    return ov


@pytest.mark.skipif(_optimum_intel_missing() is not None, reason=str(_optimum_intel_missing()))
def test_openvino_check_says_when_project_artifacts_are_missing(tmp_path, student_dir, prepared_sst2, capsys,
                                                                monkeypatch):
    """No dvc repro yet: the peer is still built and measured, the project's rows say why not.
    On a CPU without native bf16 (forced here) the bf16 row is skipped with the reason and the
    INT8 graph's float ops run at f32, the project's rule."""
    monkeypatch.setenv("COMPRESS_CPU_FLAGS", "avx2,avx512f,avx512_vnni")
    out, readme = tmp_path / "peer.json", tmp_path / "README.md"
    readme.write_text("# x\n<!-- peer:start -->\nold\n<!-- peer:end -->\ntail\n")
    nowhere = tmp_path / "models"
    rc = peer.main(["--model", str(student_dir), "--checks", "openvino", "--data", str(prepared_sst2),
                    "--project-ov", str(nowhere / "student_ov"), "--project-ov-int8", str(nowhere / "student_ov_int8"),
                    *OV_FAST, "--rounds", "2", "--json", str(out), "--readme", str(readme)])
    assert rc == 0
    captured = capsys.readouterr()
    res = json.loads(out.read_text())
    assert res["checks"] == ["openvino"] and "routes" not in res  # no onnx check ran
    ov = _check_ov_result(res, captured.out, rounds=2)
    bf16 = ov["routes"]["optimum_intel_ov_bf16"]
    assert bf16["status"] == "skipped" and "native bf16" in bf16["reason"]
    assert ov["routes"]["optimum_intel_ov_int8"]["inference"]["INFERENCE_PRECISION_HINT"] == "f32"
    assert ov["project_measured"] is False
    for name in PROJECT_ROWS:
        route = ov["routes"][name]
        assert route["status"] == "missing" and "not found" in route["reason"] and "openvino stage" in route["reason"]
    assert str(nowhere / "student_ov") in ov["routes"]["student_ov"]["reason"]
    assert all(p["status"] == "incomplete" for p in ov["pairs"])
    assert "project side NOT measured" in captured.out and "not measured (missing)" in captured.err
    block = readme.read_text()
    assert "old" not in block and "| optimum-intel optimum_intel_ov_int8 |" in block


@pytest.mark.skipif(_optimum_intel_missing() is not None, reason=str(_optimum_intel_missing()))
@pytest.mark.skipif(_project_openvino_missing() is not None, reason=str(_project_openvino_missing()))
def test_openvino_check_against_project_ir(tmp_path, student_dir, prepared_sst2, capsys):
    """The project's FP32/INT8 IRs (built by compress.backends.openvino_ir from a plain ONNX export) and
    optimum-intel's, side by side in one run, every peer row at the project row's precision."""
    import shutil

    import torch
    from transformers import BertForSequenceClassification

    from compress.backends.openvino_ir import OpenVinoConfig, build_openvino

    onnx_dir = tmp_path / "student_onnx"
    onnx_dir.mkdir()
    for f in student_dir.iterdir():
        if f.suffix != ".safetensors":
            shutil.copy2(f, onnx_dir / f.name)
    model = BertForSequenceClassification.from_pretrained(student_dir).eval()
    ids = torch.ones(2, 16, dtype=torch.long)
    names = ["input_ids", "attention_mask", "token_type_ids"]
    axes = {n: {0: "batch", 1: "sequence"} for n in names} | {"logits": {0: "batch"}}
    with torch.no_grad():
        torch.onnx.export(model, (ids, torch.ones_like(ids), torch.zeros_like(ids)), str(onnx_dir / "model.onnx"),
                          input_names=names, output_names=["logits"], dynamic_axes=axes, opset_version=17,
                          dynamo=False)
    models = tmp_path / "models"
    build_openvino(onnx_dir, models / "student_ov", models / "student_ov_int8", prepared_sst2,
                   OpenVinoConfig(calibration_rows=8, validation_rows=8, threads=1, accuracy_control="never"), [])

    out = tmp_path / "peer.json"
    rc = peer.main(["--model", str(student_dir), "--checks", "openvino", "--data", str(prepared_sst2),
                    "--project-ov", str(models / "student_ov"), "--project-ov-int8", str(models / "student_ov_int8"),
                    *OV_FAST, "--rounds", "1", "--json", str(out)])
    assert rc == 0
    res = json.loads(out.read_text())
    ov = _check_ov_result(res, capsys.readouterr().out, rounds=1)
    assert ov["project_measured"] is True
    routes = ov["routes"]
    for (precision, project, optimum) in peer.OV_PAIRS:
        a, b = routes[project], routes[optimum]
        if precision == "bf16" and b["status"] == "skipped":
            assert a["status"] == "skipped"
            continue
        assert a["status"] == "ok", a
        # the same precision on both sides, as each compiled model reports it
        assert a["inference"]["INFERENCE_PRECISION_HINT"] == b["inference"]["INFERENCE_PRECISION_HINT"]
        assert a["inference"]["INFERENCE_NUM_THREADS"] == b["inference"]["INFERENCE_NUM_THREADS"] == 1
        pair = next(p for p in ov["pairs"] if p["precision"] == precision)
        assert pair["status"] == "ok" and 0.0 <= pair["prediction_agreement"] <= 1.0
        assert pair["p50_ratio_optimum_intel_over_project"] > 0
        assert pair["throughput_ratio_project_over_optimum_intel"] > 0
    # same graph, same precision: FP32 predictions agree row for row
    assert next(p for p in ov["pairs"] if p["precision"] == "fp32")["prediction_agreement"] == 1.0
