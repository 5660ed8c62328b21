"""Stage `openvino`: OpenVINO IRs of the plain ONNX exports of the student and the pruned
student (FP32, the same IR run as BF16, and NNCF INT8 calibrated on training rows only),
parity-checked against ONNX Runtime FP32 on validation batches (the stage fails when the FP32 IR
is off by more than `parity_atol`), measured beside the fused ONNX FP32 parents."""
import time

from compress.core.config import section
from compress.data.prepare import Prepared
from compress.measure.harness import MeasureConfig
from compress.training.models import load_tokenizer
from compress.backends.onnx_export import parity_batches
from compress.backends.openvino_ir import OpenVinoConfig, build_openvino
from compress.backends.base import Artifact

from .common import MODELS, PREPARED, run
from .derived import measure_and_report

PARENTS = ("student", "student_pruned")
PLAIN = MODELS / "onnx_plain"


def main(params: dict) -> None:
    t0 = time.perf_counter()
    cfg = section(params, "openvino", OpenVinoConfig)
    mcfg = section(params, "measure", MeasureConfig)
    prepared = Prepared.open(PREPARED)
    built, artifacts, parents = {}, [], []
    for p in PARENTS:
        batches = parity_batches(prepared, load_tokenizer(PLAIN / p), cfg.parity_shapes)
        built[p] = build_openvino(PLAIN / p, MODELS / f"{p}_ov", MODELS / f"{p}_ov_int8", PREPARED, cfg, batches)
        q = built[p]["int8"]
        print(f"{p}: FP32 IR parity max |diff| {built[p]['fp32']['parity']['fp32']['max_abs_diff']:.2e}; INT8 "
              f"{q['approach']} ({q['validation']['relative_drop']:.4f} relative drop on training validation "
              f"rows), {q['size_mb']} MiB, embeddings {q['embedding_route']}")
        parent = f"{p}_onnx"
        parents.append(Artifact(parent, MODELS / parent, "onnx", "fp32"))
        artifacts += [Artifact(f"{p}_ov", MODELS / f"{p}_ov", "openvino", "fp32", parent=parent),
                      Artifact(f"{p}_ov_bf16", MODELS / f"{p}_ov", "openvino", "bf16", parent=parent),
                      Artifact(f"{p}_ov_int8", MODELS / f"{p}_ov_int8", "openvino", "int8", parent=parent)]
    summary = {
        "built": built,
        "parity": {p: {**b["fp32"].get("parity", {}), **b["int8"].get("parity", {})} for p, b in built.items()},
        "quantization": {p: {k: b["int8"].get(k) for k in ("approach", "validation", "ptq_validation",
                                                           "embedding_route", "inference_precision", "float_parts",
                                                           "calibration")}
                         for p, b in built.items()},
        "sizes_mb": {f"{p}_ov{suffix}": b[k]["size_mb"] for p, b in built.items()
                     for k, suffix in (("fp32", ""), ("int8", "_int8"))},
    }
    measure_and_report("openvino", artifacts, parents, mcfg, summary, t0)


if __name__ == "__main__":
    run(main)
