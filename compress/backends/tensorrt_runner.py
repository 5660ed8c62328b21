"""Run a TensorRT engine (compress.backends.tensorrt_engine builds them): availability, the engine
directory's metadata, the runner the measurement and `compress predict` use, and the
parity check against ONNX Runtime that gates each build.

`TrtRunner(artifact, "gpu", threads)` loads `model.engine` with the shapes engine.json
recorded; it refuses a machine without CUDA or TensorRT 10+ (`tensorrt_unavailable` says
why), a directory without engine.json, and a sequence longer than the engine's max shape.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Iterable
import numpy as np
import torch

from compress.core.errors import UserError
from compress.training.models import load_tokenizer
from compress.backends.base import Artifact
from compress.backends.pytorch import cuda_unavailable
from compress.data.tokens import unpad
from compress.backends.registry import Backend, register

BACKEND = register(Backend(
    format="tensorrt",
    runners={"cpu": "skip:TensorRT engines run on NVIDIA GPUs only", "gpu": "compress.backends.tensorrt_runner:TrtRunner"},
    weight_globs=("*.engine",),
    usage="compress.backends.tensorrt_runner.TrtRunner  # same TensorRT version and GPU as the build",
    color="#9467bd",
    libraries=("tensorrt",),
    marker="model.engine",
    precision_of="compress.backends.tensorrt_runner:engine_precision",
    default_precision="fp16",
))

ENGINE_FILE = "model.engine"
META_FILE = "engine.json"


class EngineBuildError(RuntimeError):
    """TensorRT could not parse or build a graph (the message carries TensorRT's errors)."""


# --- availability ------------------------------------------------------------------------

def _trt_major(version: str) -> int:
    try:
        return int(version.split(".")[0])
    except ValueError:
        return 0


def tensorrt_unavailable() -> str | None:
    """None when TensorRT engines can be built and run here, else why not."""
    try:
        import tensorrt as trt
    except ModuleNotFoundError as e:
        if e.name == "tensorrt":
            return "the tensorrt Python package is not installed: pip install tensorrt (NVIDIA GPU machines only)"
        return f"the tensorrt Python package failed to import: {e}"
    except (ImportError, OSError) as e:  # e.g. libnvinfer could not be loaded
        return f"the tensorrt Python package failed to import: {type(e).__name__}: {e}"
    if _trt_major(trt.__version__) < 10:
        return (f"tensorrt {trt.__version__} is too old: engines here use the TensorRT 10+ API "
                "(pip install 'tensorrt>=10')")
    return cuda_unavailable()


_LOGGER = None


def _trt_logger():
    """One process-wide TensorRT logger: prints warnings and errors, and keeps the errors so
    that a failed parse or build can name them in its exception."""
    global _LOGGER
    if _LOGGER is None:
        import tensorrt as trt

        sev = trt.ILogger.Severity

        class _Logger(trt.ILogger):
            def __init__(self):
                trt.ILogger.__init__(self)
                self.errors: list[str] = []

            def log(self, severity, msg):
                if severity in (sev.INTERNAL_ERROR, sev.ERROR):
                    self.errors.append(msg)
                if severity in (sev.INTERNAL_ERROR, sev.ERROR, sev.WARNING):
                    print(f"[TensorRT] {getattr(severity, 'name', severity)}: {msg}", file=sys.stderr)

        _LOGGER = _Logger()
    return _LOGGER


# --- files ---------------------------------------------------------------------------------

def resolve_onnx(path: str | Path) -> Path:
    """The .onnx file itself, or the single .onnx file in a directory."""
    path = Path(path)
    if path.is_dir():
        found = sorted(path.glob("*.onnx"))
        if len(found) != 1:
            raise UserError(f"{path}: expected exactly one .onnx file, found "
                            f"{[f.name for f in found] or 'none'}; run the ONNX export stage first")
        return found[0]
    if not path.is_file():
        raise UserError(f"{path}: ONNX file not found; run the ONNX export stage first")
    return path


# --- run ---------------------------------------------------------------------------------

def load_engine_meta(engine_dir: str | Path) -> dict:
    path = Path(engine_dir) / META_FILE
    if not path.is_file():
        raise UserError(f"{path} not found: {engine_dir} is not a built TensorRT engine; run the stage that builds it")
    return json.loads(path.read_text(encoding="utf-8"))


def engine_precision(engine_dir: str | Path) -> str:
    """The precision engine.json records (fp16 when it names none)."""
    return load_engine_meta(engine_dir).get("precision", "fp16")


def _torch_dtype(trt, dtype) -> torch.dtype:
    table = {trt.DataType.FLOAT: torch.float32, trt.DataType.HALF: torch.float16,
             trt.DataType.INT32: torch.int32, trt.DataType.INT8: torch.int8, trt.DataType.BOOL: torch.bool}
    for name, torch_type in (("INT64", torch.int64), ("BF16", torch.bfloat16)):
        if hasattr(trt.DataType, name):
            table[getattr(trt.DataType, name)] = torch_type
    if dtype not in table:
        raise EngineBuildError(f"TensorRT I/O type {dtype} has no torch equivalent here")
    return table[dtype]


class TrtRunner:
    """A TensorRT engine on the GPU (the runner interface of compress.backends.base).

    The output is a classifier's (batch, labels) or a tagger's (batch, seq, tags), told
    apart by the engine's output rank. Batches larger than the engine's max batch are run
    in chunks; a batch shorter or smaller than its min shape is padded (padding tokens with
    mask 0, extra rows copied from the first) and the padding dropped from the logits. A
    sequence longer than the max shape is an error: rebuild with a larger
    tensorrt.max_shape."""
    backend = "tensorrt"

    def __init__(self, artifact: Artifact, target: str, threads: int):
        reason = self.unavailable(target)
        if reason is not None:
            raise RuntimeError(f"{artifact.name}: cannot run a TensorRT engine: {reason}")
        import tensorrt as trt

        torch.set_num_threads(threads)
        path = Path(artifact.path)
        meta = load_engine_meta(path)
        self.tokenizer = load_tokenizer(path)
        self.num_params = int(meta["num_params"])
        self._min, self._max = list(meta["shapes"]["min"]), list(meta["shapes"]["max"])
        self.device = torch.device("cuda")
        torch.cuda.init()  # TensorRT runs in the CUDA context torch uses
        self._runtime = trt.Runtime(_trt_logger())
        engine = self._runtime.deserialize_cuda_engine((path / ENGINE_FILE).read_bytes())
        if engine is None:
            raise RuntimeError(
                f"{path / ENGINE_FILE}: TensorRT {trt.__version__} on {torch.cuda.get_device_name()} cannot load "
                f"this engine (built with TensorRT {meta.get('tensorrt_version')} on {meta.get('gpu')}); engines "
                "are specific to the TensorRT version and GPU: rebuild it")
        self._engine = engine
        self._context = engine.create_execution_context()
        if self._context is None:
            raise RuntimeError(f"{path / ENGINE_FILE}: could not create an execution context (GPU memory?)")
        names = [engine.get_tensor_name(i) for i in range(engine.num_io_tensors)]
        self._inputs = [n for n in names if engine.get_tensor_mode(n) == trt.TensorIOMode.INPUT]
        outputs = [n for n in names if engine.get_tensor_mode(n) == trt.TensorIOMode.OUTPUT]
        if len(outputs) != 1:
            raise RuntimeError(f"{path / ENGINE_FILE}: expected one output (logits), found {outputs}")
        self._output = outputs[0]
        self._dtypes = {n: _torch_dtype(trt, engine.get_tensor_dtype(n)) for n in names}
        out_shape = engine.get_tensor_shape(self._output)
        if len(out_shape) not in (2, 3):
            raise RuntimeError(f"{path / ENGINE_FILE}: output {self._output} has shape {tuple(out_shape)}; expected "
                               "(batch, labels) or a tagger's (batch, seq, tags)")
        self._out_rank = len(out_shape)  # 2: (batch, labels); 3: a tagger's (batch, seq, tags)
        labels = out_shape[len(out_shape) - 1]
        if labels <= 0:
            labels = meta.get("num_labels") or len(json.loads((path / "config.json").read_text())["id2label"])
        self.num_labels = int(labels)
        self._pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        # A stream of our own: TensorRT warns that the legacy default stream costs extra syncs.
        self._stream = torch.cuda.Stream()

    @staticmethod
    def unavailable(target: str) -> str | None:
        if target != "gpu":
            return "TensorRT engines run on NVIDIA GPUs only"
        return tensorrt_unavailable()

    def __call__(self, batch: dict[str, np.ndarray]) -> np.ndarray:
        n, seq = batch["input_ids"].shape
        if seq > self._max[1]:
            raise ValueError(f"sequence length {seq} exceeds this engine's max_shape seq {self._max[1]} "
                             "(rebuild with a larger tensorrt.max_shape)")
        if n == 0:
            return np.zeros((0, seq)[: self._out_rank - 1] + (self.num_labels,), dtype=np.float32)
        step = self._max[0]
        if n <= step:
            return self._run(batch)
        return np.concatenate([self._run({k: v[i:i + step] for k, v in batch.items()})
                               for i in range(0, n, step)])

    def _fit(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Pad up to the profile's min shape: masked padding tokens, copies of row 0."""
        n, seq = batch["input_ids"].shape
        out = {}
        for name in self._inputs:
            if name not in batch:
                raise KeyError(f"the engine needs input '{name}'; the batch has {sorted(batch)}")
            a = np.asarray(batch[name])
            if seq < self._min[1]:
                fill = self._pad_id if name == "input_ids" else 0
                a = np.concatenate([a, np.full((n, self._min[1] - seq), fill, dtype=a.dtype)], axis=1)
            if n < self._min[0]:
                a = np.concatenate([a, np.repeat(a[:1], self._min[0] - n, axis=0)], axis=0)
            out[name] = np.ascontiguousarray(a)
        return out

    def _run(self, batch: dict[str, np.ndarray]) -> np.ndarray:
        n, seq = batch["input_ids"].shape
        # drop what _fit added to reach the profile's min shape: copied rows, padded positions
        return unpad(self._execute(self._fit(batch)), n, seq)

    @torch.inference_mode()
    def _execute(self, batch: dict[str, np.ndarray]) -> np.ndarray:
        """The engine's output for a batch within its profile, on the CPU. The output
        buffer takes the shape the context derives from the input shapes: (batch, labels),
        or (batch, seq, tags) for a tagger."""
        with torch.cuda.stream(self._stream):
            buffers = {}  # kept alive until the copy back below has synchronised the stream
            for name in self._inputs:
                t = torch.from_numpy(batch[name]).to(self.device, dtype=self._dtypes[name], non_blocking=True)
                if not self._context.set_input_shape(name, tuple(t.shape)):
                    raise ValueError(f"input {name} shape {tuple(t.shape)} is outside the engine's profile "
                                     f"(min {self._min}, max {self._max})")
                self._context.set_tensor_address(name, t.data_ptr())
                buffers[name] = t
            out = torch.empty(tuple(self._context.get_tensor_shape(self._output)),
                              dtype=self._dtypes[self._output], device=self.device)
            self._context.set_tensor_address(self._output, out.data_ptr())
            if not self._context.execute_async_v3(self._stream.cuda_stream):
                raise RuntimeError("TensorRT execute_async_v3 failed (see the TensorRT log above)")
            logits = out.float().cpu().numpy()  # .cpu() waits for this stream
        return logits

    def synchronize(self) -> None:
        self._stream.synchronize()


# --- parity against ONNX Runtime ---------------------------------------------------------

def parity_check(engine_dir: str | Path, onnx_path: str | Path, batches: Iterable[dict[str, np.ndarray]],
                 atol: float) -> dict:
    """The engine's logits against ONNX Runtime CPU FP32 on the FP32 export
    (compress.backends.parity.compare, gated at `atol`)."""
    import onnxruntime as ort

    from compress.backends.parity import compare

    engine_dir = Path(engine_dir)
    meta = load_engine_meta(engine_dir)
    runner = TrtRunner(Artifact(name=engine_dir.name, path=engine_dir, format="tensorrt",
                                precision=meta["precision"]), "gpu", threads=1)
    session = ort.InferenceSession(str(resolve_onnx(onnx_path)), providers=["CPUExecutionProvider"])
    names = {i.name for i in session.get_inputs()}

    def reference(batch):
        return session.run(None, {k: np.asarray(v, dtype=np.int64) for k, v in batch.items() if k in names})[0]

    return compare(reference, runner, batches, atol)
