"""Stage `export_onnx`: ONNX FP32 of the student and the pruned student, parity-checked
against PyTorch (the stage fails above `parity_atol`), fused by ONNX Runtime, measured
beside the PyTorch parents in the same run. The plain (unfused) exports go to
models/onnx_plain/ for TensorRT."""
import time

from compress.core.config import section
from compress.data.prepare import Prepared
from compress.measure.harness import MeasureConfig
from compress.backends.onnx_export import ExportConfig, export_onnx
from compress.backends.base import Artifact

from .common import MODELS, PREPARED, run
from .derived import measure_and_report

PARENTS = ("student", "student_pruned")
PLAIN = MODELS / "onnx_plain"


def main(params: dict) -> None:
    t0 = time.perf_counter()
    cfg = section(params, "export_onnx", ExportConfig)
    mcfg = section(params, "measure", MeasureConfig)
    prepared = Prepared.open(PREPARED)
    PLAIN.mkdir(parents=True, exist_ok=True)
    exports = {}
    for p in PARENTS:
        exports[p] = export_onnx(MODELS / p, MODELS / f"{p}_onnx", cfg, prepared, plain_out_dir=PLAIN / p)
        e = exports[p]
        print(f"{p}: attention fused {e['attention_fused']}, parity max |diff| raw "
              f"{e['parity_raw']['max_abs_diff']:.2e}, fused {e['parity']['max_abs_diff']:.2e}")
    measure_and_report(
        "export_onnx", [Artifact(f"{p}_onnx", MODELS / f"{p}_onnx", "onnx", "fp32", parent=p) for p in PARENTS],
        [Artifact(p, MODELS / p) for p in PARENTS], mcfg, {"exports": exports}, t0)


if __name__ == "__main__":
    run(main)
