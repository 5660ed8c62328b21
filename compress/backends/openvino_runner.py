"""Run an OpenVINO IR (compress.backends.openvino_ir builds them): the runner the measurement,
`compress predict` and the parity check use, the compile settings it applies, and the
IR directory's metadata.

`OpenVinoRunner(artifact, target, threads)` compiles `model.xml` with the settings the
`openvino` stage recorded for the artifact's precision in openvino.json (`runtime`:
inference precision, CPU pinning), `threads` inference threads, one stream, the LATENCY
hint; fp32 runs in f32, bf16 in bf16, int8 with what its IR recorded for its float parts.
Refused: a precision the IR was not built for, and a directory missing model.xml,
model.bin or openvino.json.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from compress.core.config import check
from compress.core.errors import UserError
from compress.backends.registry import Backend, register

BACKEND = register(Backend(
    format="openvino",
    # Intel GPUs only on the gpu target: OpenVinoRunner.unavailable says
    runners={"cpu": "compress.backends.openvino_runner:OpenVinoRunner",
             "gpu": "compress.backends.openvino_runner:OpenVinoRunner"},
    weight_globs=("*.bin", "*.xml"),
    usage="openvino.Core().compile_model(path + '/model.xml', 'CPU', {'INFERENCE_PRECISION_HINT': 'bf16' if bf16 "
          "else 'f32'})  # or compress.backends.openvino_runner.OpenVinoRunner",
    color="#17becf",
    libraries=("openvino", "nncf"),
    marker="model.xml",
    precision_of="compress.backends.openvino_runner:ir_precision",
))

IR_XML = "model.xml"
IR_BIN = "model.bin"
META_FILE = "openvino.json"
HINTS = ("f32", "bf16")


class OpenVinoIrError(UserError):
    """An IR directory is missing or incomplete."""


# --- settings ------------------------------------------------------------------------------

def compile_config(hint: str, threads: int, pinning: bool, device: str = "CPU") -> dict:
    """OpenVINO properties: `hint` precision, `threads` threads, one stream, latency mode."""
    import openvino.properties as props
    import openvino.properties.hint as hints

    check(hint in HINTS, f"inference precision must be one of {', '.join(HINTS)}, got '{hint}'")
    cfg = {hints.inference_precision: {"f32": "f32", "bf16": "bf16"}[hint],
           hints.performance_mode: hints.PerformanceMode.LATENCY,
           props.num_streams: 1}
    if device == "CPU":
        cfg[props.inference_num_threads] = threads
        cfg[hints.enable_cpu_pinning] = pinning
    return cfg


def gpu_unavailable() -> str | None:
    try:
        import openvino as ov
    except ImportError as e:
        return f"the openvino package failed to import: {e}"
    if not any(d.startswith("GPU") for d in ov.Core().available_devices):
        return ("OpenVINO runs on Intel GPUs only; no OpenVINO GPU device here "
                "(NVIDIA/CUDA devices are not OpenVINO targets)")
    return None


def read_meta(ir_dir: str | Path) -> dict:
    ir_dir = Path(ir_dir)
    for name in (IR_XML, IR_BIN, META_FILE):
        if not (ir_dir / name).is_file():
            raise OpenVinoIrError(f"{ir_dir / name}: not found; run the openvino stage that builds it")
    return json.loads((ir_dir / META_FILE).read_text(encoding="utf-8"))


def ir_precision(ir_dir: str | Path) -> str:
    """The precision openvino.json records for an IR directory (fp32 without one)."""
    meta = Path(ir_dir) / META_FILE
    return json.loads(meta.read_text(encoding="utf-8")).get("precision", "fp32") if meta.is_file() else "fp32"


def feed(request_inputs: list[str], batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {k: np.ascontiguousarray(batch[k], dtype=np.int64) for k in request_inputs}


# --- parity ------------------------------------------------------------------------------

def parity_check(ir_dir: str | Path, precision: str, onnx_path: str | Path,
                 batches: list[dict[str, np.ndarray]], threads: int) -> dict:
    """The IR run as `precision` by the runner vs ONNX Runtime FP32 on onnx_path
    (compress.backends.parity.compare), with the runner's backend."""
    from tqdm.auto import tqdm

    from compress.backends.onnx_export import cpu_session, run_session
    from compress.backends.parity import compare
    from compress.backends.base import Artifact

    ir_dir = Path(ir_dir)
    runner = OpenVinoRunner(Artifact(ir_dir.name, ir_dir, "openvino", precision), "cpu", threads)
    session = cpu_session(onnx_path, threads)
    bar = tqdm(batches, desc=f"{ir_dir.name}/{precision} parity", unit="batch", leave=False)
    return {**compare(lambda b: run_session(session, b), runner, bar), "backend": runner.backend}


# --- runner ------------------------------------------------------------------------------

class OpenVinoRunner:
    """An OpenVINO IR on the CPU (or an Intel GPU), at the precision the artifact names:
    fp32 -> f32 inference precision, bf16 -> bf16, int8 -> the IR's recorded choice."""
    backend = "openvino"

    def __init__(self, artifact, target: str, threads: int):
        import openvino as ov

        from compress.backends.base import num_labels_of
        from compress.data.tokenizer import load_fast_tokenizer  # tokenizers only: no torch on this path

        path = Path(artifact.path)
        meta = read_meta(path)
        precision = artifact.precision
        if precision not in ("fp32", "bf16", "int8"):
            raise UserError(f"{artifact.name}: OpenVINO artifacts run as fp32, bf16 or int8, not {precision}")
        if precision == "int8" and meta.get("precision") != "int8":
            raise UserError(f"{path / IR_XML}: an FP32 IR cannot run as int8; build the INT8 IR")
        if precision != "int8" and meta.get("precision") == "int8":
            raise UserError(f"{path / IR_XML}: an INT8 IR runs as int8 only, not {precision}")
        settings = meta.get("runtime", {}).get(precision) or {
            "inference_precision": {"fp32": "f32", "bf16": "bf16"}.get(precision, "f32"), "cpu_pinning": False}
        device = "CPU" if target == "cpu" else "GPU"
        core = ov.Core()
        self.compiled = core.compile_model(
            core.read_model(str(path / IR_XML)), device,
            compile_config(settings["inference_precision"], threads, settings.get("cpu_pinning", False), device))
        self.request = self.compiled.create_infer_request()
        self.inputs = [i.any_name for i in self.compiled.inputs]
        self.output = self.compiled.output(0)
        self.settings = settings
        self.backend = f"openvino-{target}-{settings['inference_precision']}"
        self.tokenizer = load_fast_tokenizer(path)
        self.num_labels = num_labels_of(path)
        self.num_params = int(meta.get("num_params", 0))

    @staticmethod
    def unavailable(target: str) -> str | None:
        if target == "gpu":
            return gpu_unavailable()
        try:
            import openvino  # noqa: F401
        except ImportError as e:
            return f"the openvino package failed to import: {e}"
        return None

    def __call__(self, batch: dict[str, np.ndarray]) -> np.ndarray:
        out = self.request.infer(feed(self.inputs, batch))[self.output]
        return np.array(out, dtype=np.float32)  # a copy: the request reuses its output buffer

    def synchronize(self) -> None:
        pass  # infer() is synchronous
