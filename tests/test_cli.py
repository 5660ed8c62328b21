"""The `compress` command: help, data validation, measurement and report rendering."""
import json
import subprocess
import sys

import pytest

from compress.core.errors import UserError

from compress.cli import main


def test_help_lists_commands():
    out = subprocess.run([sys.executable, "-m", "compress.cli", "--help"], capture_output=True, text=True)
    assert out.returncode == 0
    for cmd in ("env", "validate-data", "measure", "report"):
        assert cmd in out.stdout


def test_validate_data_reports_rows_and_errors(sst2_dir, capsys):
    assert main(["validate-data", str(sst2_dir), "--task", "sst2"]) == 0
    assert "train: 32 rows OK" in capsys.readouterr().out
    (sst2_dir / "dev.tsv").write_text("sentence\tlabel\nfine\t3\n", encoding="utf-8")
    assert main(["validate-data", str(sst2_dir)]) == 2
    assert "dev.tsv:2: label '3'" in capsys.readouterr().err


def test_measure_any_model_directory(tiny_model_dir, prepared_sst2, tmp_path, capsys):
    out = tmp_path / "m.json"
    assert main(["measure", str(tiny_model_dir), "--data", str(prepared_sst2), "--targets", "cpu",
                 "--points", "1x16", "--threads", "1", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    (rec,) = report["records"]
    assert rec["artifact"] == "tiny" and rec["threads"] == 1 and rec["points"][0]["seq_len"] == 16
    assert "| tiny | cpu | ok |" in capsys.readouterr().out


def test_artifact_format_is_read_from_the_directory(tiny_model_dir, tmp_path):
    from compress.cli import artifact_at
    from compress.backends.torchao import QuantizeConfig, quantize_checkpoint

    assert (artifact_at(tiny_model_dir).format, artifact_at(tiny_model_dir).precision) == ("pytorch", "fp32")
    quantize_checkpoint(tiny_model_dir, tmp_path / "q", QuantizeConfig())
    assert (artifact_at(tmp_path / "q").format, artifact_at(tmp_path / "q").precision) == ("pytorch_int8", "int8")
    with pytest.raises(UserError, match="no such artifact directory"):
        artifact_at(tmp_path / "missing")


def test_a_bad_artifact_path_is_refused_before_any_heavy_import(tmp_path):
    """`compress predict` on a path that does not exist says so without importing torch."""
    import subprocess
    import sys

    code = ("import sys\nfrom compress.cli import main\nrc = main(['predict', '--artifact', sys.argv[1], 'x'])\n"
            "print(rc, 'torch' in sys.modules, 'transformers' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "nonexistent")], capture_output=True,
                         text=True, timeout=120)
    assert out.stdout.split() == ["2", "False", "False"], out.stderr[-2000:]
    assert "nonexistent: no such artifact directory" in out.stderr
