"""benchmarks/optimum_peer.py: the project's INT8 ONNX against Optimum's own route, on a tiny BERT."""
from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

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


peer = _load_script()


@pytest.fixture
def student_dir(tmp_path) -> Path:
    from compress.models import save_classifier

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
    rc = peer.main(["--model", str(student_dir), "--project-onnx", str(project), "--data", str(prepared_sst2),
                    "--threads", "1", "--seq", "32", "--min-queries", "6", "--min-duration-s", "0",
                    "--rounds", "2", "--warmup", "1", "--json", str(out), "--work-dir", str(work),
                    "--readme", str(readme)])
    assert rc == 0
    block = readme.read_text()
    assert "old" not in block and "| | project INT8 | Optimum INT8 |" in block and block.endswith("tail\n")
    printed = capsys.readouterr().out
    assert "project INT8" in printed and "Optimum INT8" in printed and "optimum p50 / project p50" in printed

    res = json.loads(out.read_text())
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
