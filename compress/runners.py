"""Backends that run an artifact: one small class per (format, device).

A runner takes a batch of int64 numpy arrays (input_ids, attention_mask, token_type_ids,
each (batch, seq)) and returns fp32 logits (batch, labels). Accuracy and latency are both
measured through the runner, so they share loading and pre-processing.
Later stages add runners (ONNX Runtime, TensorRT) next to these.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from .models import count_parameters, load_saved


@dataclass(frozen=True)
class Artifact:
    """A built model on disk, as the measurement harness sees it."""
    name: str  # e.g. "teacher"
    path: Path  # directory with config, weights and tokenizer
    format: str = "pytorch"  # how it is stored and run
    precision: str = "fp32"

    def weight_files(self) -> list[Path]:
        files = sorted(self.path.glob("*.safetensors")) + sorted(self.path.glob("*.onnx"))
        if not files:
            raise FileNotFoundError(f"{self.path}: no model weights (*.safetensors or *.onnx)")
        return files


class TorchRunner:
    backend = "pytorch"

    def __init__(self, artifact: Artifact, device: str, threads: int):
        torch.set_num_threads(threads)
        self.device = torch.device(device)
        model, self.tokenizer = load_saved(artifact.path)
        self.num_params = count_parameters(model)
        self.model = model.to(self.device).eval()
        self.num_labels = model.config.num_labels

    @torch.inference_mode()
    def __call__(self, batch: dict[str, np.ndarray]) -> np.ndarray:
        inputs = {k: torch.from_numpy(v).to(self.device, non_blocking=True) for k, v in batch.items()}
        logits = self.model(**inputs).logits
        return logits.float().cpu().numpy()  # .cpu() synchronises a CUDA stream

    def synchronize(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize()


RUNNERS = {("pytorch", "cpu"): TorchRunner, ("pytorch", "gpu"): TorchRunner}
DEVICES = {"cpu": "cpu", "gpu": "cuda"}


def load_runner(artifact: Artifact, target: str, threads: int):
    key = (artifact.format, target)
    if key not in RUNNERS:
        raise ValueError(f"no runner for format '{artifact.format}' on target '{target}'")
    return RUNNERS[key](artifact, DEVICES[target], threads)
