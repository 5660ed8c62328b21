"""Backends that run an artifact: one small class per (format, device).

A runner takes a batch of int64 numpy arrays (input_ids, attention_mask, token_type_ids,
each (batch, seq)) and returns fp32 logits (batch, labels). Accuracy and latency are both
measured through the runner, so they share loading and pre-processing.

The runner interface (every backend module implements it):

    class SomeRunner:
        backend: str                       # e.g. "onnxruntime-cpu"
        tokenizer, num_labels, num_params  # set by __init__
        def __init__(self, artifact: Artifact, target: str, threads: int): ...
        def __call__(self, batch: dict[str, np.ndarray]) -> np.ndarray: ...
        def synchronize(self) -> None: ...        # wait for queued device work
        @staticmethod
        def unavailable(target: str) -> str | None  # why it cannot run here, else None

`RUNNERS` maps (format, target) to "module:Class"; backend modules are imported only when
an artifact of theirs is measured, so stages that never touch ONNX or TensorRT do not
import (or depend on) those packages. A (format, target) pair that cannot exist, such as a
TensorRT engine on the CPU, maps to the reason instead, and is recorded as `skipped`.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from compress.training.models import count_parameters, load_saved

FORMATS = ("pytorch", "pytorch_int8", "pytorch_inc", "pytorch_cudagraph", "onnx", "openvino", "tensorrt")
PRECISIONS = ("fp32", "fp16", "bf16", "int8")


@dataclass(frozen=True)
class Artifact:
    """A built model on disk, as the measurement harness sees it."""
    name: str  # e.g. "teacher"
    path: Path  # directory with config, weights and tokenizer
    format: str = "pytorch"  # how it is stored and run: one of FORMATS
    # one of PRECISIONS; fp16 (GPU) and bf16 (CPU with native bf16) on a pytorch artifact cast
    # the FP32 weights at load; bf16 on an openvino artifact is OpenVINO's inference precision
    precision: str = "fp32"
    parent: str | None = None  # the artifact this one was derived from (agreement is vs it)

    def __post_init__(self):
        if self.format not in FORMATS:
            raise ValueError(f"artifact {self.name}: unknown format {self.format!r}, choose from {FORMATS}")
        if self.precision not in PRECISIONS:
            raise ValueError(f"artifact {self.name}: unknown precision {self.precision!r}, choose from {PRECISIONS}")

    def weight_files(self) -> list[Path]:
        files = (sorted(self.path.glob("*.safetensors")) + sorted(self.path.glob("*.onnx"))
                 + sorted(self.path.glob("*.engine")) + sorted(self.path.glob("*.bin"))
                 + sorted(self.path.glob("*.xml")))
        if not files:
            raise FileNotFoundError(f"{self.path}: no model weights (*.safetensors, *.onnx, *.engine or "
                                    "OpenVINO *.bin/*.xml)")
        return files


def artifact_dir(name: str, models_dir: Path) -> Path:
    """Where a stage wrote an artifact, by the pipeline's naming convention."""
    models_dir = Path(models_dir)
    if "_trt_" in name:
        parent, precision = name.rsplit("_trt_", 1)
        return models_dir / "trt" / f"{parent}-{precision}"
    # a precision or runtime variant of a float artifact (cast at load, replayed from CUDA
    # graphs): the same files
    for suffix in ("_cudagraph_fp32", "_cudagraph", "_fp16", "_bf16"):
        if name.endswith(suffix) and not (models_dir / name).is_dir():
            return models_dir / name[: -len(suffix)]
    return models_dir / name


def cuda_unavailable() -> str | None:
    """None when PyTorch can use a CUDA device, else why not."""
    if torch.version.cuda is None:
        return f"torch {torch.__version__} is a CPU-only build (no CUDA)"
    if not torch.cuda.is_available():
        return "no CUDA device visible"
    return None


def load_torch_model(artifact: Artifact, device: torch.device):
    """(model in eval mode on `device` at the artifact's precision, tokenizer, parameter
    count of the saved weights): what every PyTorch runner starts from."""
    model, tokenizer = load_saved(artifact.path)
    num_params = count_parameters(model)
    if artifact.precision == "fp16":
        model = model.half()
    elif artifact.precision == "bf16":
        model = model.to(torch.bfloat16)
    return model.to(device).eval(), tokenizer, num_params


class TorchRunner:
    """PyTorch eager, FP32 on either device; FP16 (cast at load) on the GPU only; BF16 (cast
    at load) on CPUs with native bf16 (AMX-BF16 / AVX512-BF16), where oneDNN runs the
    matmuls on the matrix engines. Without native bf16 the CPU would emulate it, slower
    than FP32: runner_class skips that case with the reason."""
    backend = "pytorch"

    def __init__(self, artifact: Artifact, target: str, threads: int):
        torch.set_num_threads(threads)
        self.device = torch.device(DEVICES[target])
        self.model, self.tokenizer, self.num_params = load_torch_model(artifact, self.device)
        self.num_labels = self.model.config.num_labels
        self.backend = f"pytorch-{target}"

    @staticmethod
    def unavailable(target: str) -> str | None:
        return cuda_unavailable() if target == "gpu" else None

    @torch.inference_mode()
    def __call__(self, batch: dict[str, np.ndarray]) -> np.ndarray:
        inputs = {k: torch.from_numpy(v).to(self.device, non_blocking=True) for k, v in batch.items()}
        logits = self.model(**inputs).logits
        return logits.float().cpu().numpy()  # .cpu() synchronises a CUDA stream

    def synchronize(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize()


RUNNERS: dict[tuple[str, str], str] = {
    ("pytorch", "cpu"): "compress.backends.base:TorchRunner",
    ("pytorch", "gpu"): "compress.backends.base:TorchRunner",
    ("pytorch_int8", "cpu"): "compress.backends.torchao:TorchInt8Runner",
    ("pytorch_int8", "gpu"): "skip:PyTorch dynamic INT8 kernels (fbgemm/onednn) run on the CPU only",
    ("pytorch_inc", "cpu"): "compress.backends.inc_artifact:IncInt8Runner",
    ("pytorch_inc", "gpu"): "skip:Neural Compressor's PT2E INT8 graph runs on the CPU only",
    # the float weights replayed from captured CUDA graphs (compress/backends/cudagraph.py)
    ("pytorch_cudagraph", "cpu"): "skip:CUDA graphs replay on NVIDIA GPUs only",
    ("pytorch_cudagraph", "gpu"): "compress.backends.cudagraph:CudaGraphRunner",
    ("onnx", "cpu"): "compress.backends.onnx_runtime:OrtRunner",
    ("onnx", "gpu"): "compress.backends.onnx_runtime:OrtRunner",
    ("openvino", "cpu"): "compress.backends.openvino_runner:OpenVinoRunner",
    ("openvino", "gpu"): "compress.backends.openvino_runner:OpenVinoRunner",  # Intel GPUs only: its unavailable() says
    ("tensorrt", "cpu"): "skip:TensorRT engines run on NVIDIA GPUs only",
    ("tensorrt", "gpu"): "compress.backends.tensorrt_runner:TrtRunner",
}
DEVICES = {"cpu": "cpu", "gpu": "cuda"}


def runner_class(artifact: Artifact, target: str):
    """The runner class for this artifact on this target, or the reason (str) it cannot run
    anywhere like this: a skip, not an error."""
    key = (artifact.format, target)
    if key not in RUNNERS:
        raise ValueError(f"no runner for format '{artifact.format}' on target '{target}'")
    if artifact.precision == "fp16" and (artifact.format, target) == ("pytorch", "cpu"):
        return "FP16 PyTorch inference is measured on the GPU only (CPU FP16 kernels are not a deployment path)"
    if artifact.precision == "bf16":
        if target == "gpu" and artifact.format == "pytorch":
            return "BF16 PyTorch inference is measured on the CPU's matrix engines; the GPU rows use FP16"
        if target == "cpu":
            from compress.core.env import bf16_unavailable

            reason = bf16_unavailable()
            if reason:
                return reason
    spec = RUNNERS[key]
    if spec.startswith("skip:"):
        return spec[len("skip:"):]
    module, cls = spec.split(":")
    return getattr(importlib.import_module(module), cls)


def skip_reason(artifact: Artifact, target: str) -> str | None:
    """Why this artifact cannot be measured on this target here, or None."""
    cls = runner_class(artifact, target)
    if isinstance(cls, str):
        return cls
    return cls.unavailable(target)


def load_runner(artifact: Artifact, target: str, threads: int):
    cls = runner_class(artifact, target)
    if isinstance(cls, str):
        raise ValueError(f"{artifact.name} cannot run on {target}: {cls}")
    return cls(artifact, target, threads)
