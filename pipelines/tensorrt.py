"""Stage `tensorrt`: TensorRT engines (FP16, INT8) from the plain ONNX exports, parity-checked
against ONNX Runtime FP32, measured on the gpu target beside the PyTorch parents.

Without a CUDA device or the tensorrt package the stage succeeds and records every engine
as `skipped` with the reason; `dvc repro` never fails for that."""
import functools
import time

from compress.core.config import section
from compress.data.prepare import Prepared
from compress.core.io import atomic_write_json
from compress.measure.harness import MeasureConfig
from compress.training.models import load_tokenizer
from compress.backends.onnx_export import parity_batches
from compress.report.schema import Record
from compress.backends.base import Artifact, skip_reason
from compress.backends.tensorrt_engine import EngineConfig, build_engines, training_batches

from .common import MODELS, PREPARED, run
from .derived import measure_and_report

PARENTS = ("student", "student_pruned")
PLAIN = MODELS / "onnx_plain"
OUT = MODELS / "trt"


def main(params: dict) -> None:
    t0 = time.perf_counter()
    cfg = section(params, "tensorrt", EngineConfig)
    mcfg = section(params, "measure", MeasureConfig)
    prepared = Prepared.open(PREPARED)
    OUT.mkdir(parents=True, exist_ok=True)
    shapes = [[b, s] for b, s in [[1, 8], [4, 32], [8, 128], [2, 256]]
              if cfg.min_shape[0] <= b <= cfg.max_shape[0] and cfg.min_shape[1] <= s <= cfg.max_shape[1]]
    engines = build_engines(
        {p: PLAIN / p / "model.onnx" for p in PARENTS}, OUT, cfg,
        functools.partial(training_batches, PREPARED),
        lambda onnx_path: parity_batches(prepared, load_tokenizer(onnx_path.parent), shapes))
    atomic_write_json(OUT / "engines.json", engines)
    records, built = [], []
    for e in engines:
        name = f"{e['artifact']}_trt_{e['precision']}"
        if e["status"] == "built":
            built.append(Artifact(name, OUT / f"{e['artifact']}-{e['precision']}", "tensorrt", e["precision"],
                                  parent=e["artifact"]))
            continue
        status = "skipped" if e["status"] == "skipped" else "failed"
        for target in mcfg.targets:
            reason = e["reason"] if target == "gpu" else skip_reason(Artifact(name, OUT, "tensorrt"), target)
            records.append(Record(artifact=name, target=target, status=status, reason=reason,
                                  format="tensorrt", precision=e["precision"], parent=e["artifact"]).to_dict())
    # Parents are measured only when there is an engine to compare them with.
    measure_and_report("tensorrt", built, [Artifact(p, MODELS / p) for p in PARENTS] if built else [],
                       mcfg, {"engines": engines}, t0, extra_records=records)


if __name__ == "__main__":
    run(main)
