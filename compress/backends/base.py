"""Runners and artifacts: how any backend's built model is loaded and run.

A runner takes a batch of int64 numpy arrays (input_ids, attention_mask, token_type_ids,
each (batch, seq)) and returns fp32 logits (batch, labels); for a tagger (batch, seq,
labels). Accuracy and latency are both measured through the runner, so they share loading
and pre-processing. The interface every backend implements:

    class SomeRunner:
        backend: str                       # e.g. "onnxruntime-cpu"
        tokenizer, num_labels, num_params  # set by __init__
        def __init__(self, artifact: Artifact, target: str, threads: int): ...
        def __call__(self, batch: dict[str, np.ndarray]) -> np.ndarray: ...
        def synchronize(self) -> None: ...        # wait for queued device work
        @staticmethod
        def unavailable(target: str) -> str | None  # why it cannot run here, else None

Which class runs a format on a target is its backend's descriptor
(compress.backends.registry); the module is imported only when an artifact of that format
is run, so this module imports no backend library. A (format, target) pair that cannot
exist (a TensorRT engine on the CPU) maps to the reason, recorded as `skipped`.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from compress.backends import registry
from compress.backends.registry import PRECISIONS

__all__ = ["Artifact", "PRECISIONS", "num_labels_of", "runner_class", "skip_reason", "load_runner"]


@dataclass(frozen=True)
class Artifact:
    """A built model on disk, as the measurement harness sees it."""
    name: str  # e.g. "teacher"
    path: Path  # directory with config, weights and tokenizer
    format: str = "pytorch"  # how it is stored and run: a registered backend format
    # one of PRECISIONS; fp16 (GPU) and bf16 (CPU with native bf16) on a pytorch artifact cast
    # the FP32 weights at load; bf16 on an openvino artifact is OpenVINO's inference precision
    precision: str = "fp32"
    parent: str | None = None  # the artifact this one was derived from (agreement is vs it)

    def __post_init__(self):
        if not registry.known(self.format):
            raise ValueError(f"artifact {self.name}: unknown format {self.format!r}, choose from "
                             f"{', '.join(registry.formats())}")
        if self.precision not in PRECISIONS:
            raise ValueError(f"artifact {self.name}: unknown precision {self.precision!r}, choose from {PRECISIONS}")

    def weight_files(self) -> list[Path]:
        globs = registry.get(self.format).weight_globs
        files = [f for pattern in globs for f in sorted(Path(self.path).glob(pattern))]
        if not files:
            raise FileNotFoundError(f"{self.path}: no model weights ({', '.join(globs)}) for format {self.format}")
        return files


def num_labels_of(directory: str | Path) -> int:
    """Classes (or tags) of the model an artifact directory's config.json describes: its
    id2label entries (2 when it names none, as transformers' configs default); what the
    runners of exported formats report without loading transformers."""
    import json

    cfg = Path(directory) / "config.json"
    if not cfg.is_file():
        from compress.core.errors import UserError

        raise UserError(f"{cfg} not found: an exported artifact carries its model's config.json")
    return len(json.loads(cfg.read_text(encoding="utf-8")).get("id2label") or {0: 0, 1: 1})


def runner_class(artifact: Artifact, target: str):
    """The runner class for this artifact on this target, or the reason (str) it cannot run
    anywhere like this: a skip, not an error."""
    spec = registry.get(artifact.format).runners.get(target)
    if spec is None:
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
    if spec.startswith("skip:"):
        return spec[len("skip:"):]
    return registry.resolve(spec)


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
