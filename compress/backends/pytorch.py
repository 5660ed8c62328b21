"""The PyTorch eager backend: a saved Hugging Face BERT (safetensors weights, config.json,
tokenizer files), run FP32 on either device, FP16 (cast at load) on the GPU, BF16 (cast at
load) on CPUs with native bf16.

In:  an Artifact of format `pytorch`, a target, a thread count.
Out: fp32 logits for int64 input batches (the runner interface of compress.backends.base).
Refused: FP16 on the CPU and BF16 on the GPU (base.runner_class gives the reason), CUDA on a
machine without it (`cuda_unavailable`).
"""
from __future__ import annotations

import numpy as np
import torch

from compress.backends.base import Artifact
from compress.backends.registry import Backend, register
from compress.training.models import count_parameters, load_saved

DEVICES = {"cpu": "cpu", "gpu": "cuda"}

BACKEND = register(Backend(
    format="pytorch",
    runners={"cpu": "compress.backends.pytorch:TorchRunner", "gpu": "compress.backends.pytorch:TorchRunner"},
    weight_globs=("*.safetensors",),
    usage="compress.training.models.load_saved(path)  # BertFor{Sequence,Token}Classification + tokenizer",
    color="#1f77b4",
    libraries=("torch", "transformers", "tokenizers", "numpy"),
))


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
    """PyTorch eager, FP32 on either device; FP16 on the GPU only; BF16 on CPUs with native
    bf16 (AMX-BF16 / AVX512-BF16), where oneDNN runs the matmuls on the matrix engines."""
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
