"""optimum-intel's model as a runner of the project's harness, and the backend descriptor
of its format.

Importing this module registers the format ``optimum_intel_openvino``
(compress.backends.registry) under this module's name, ``benchmarks.peer.runner``: the
name `registry.plugin_modules()` hands a spawned measurement child, which imports it again
(the repository root is on sys.path there: the parent's path travels with the spawn). Only
the openvino check imports it, through
`benchmarks.peer.openvino_route.peer_runner_registered`, which also unregisters the format
when the check ends; importing benchmarks/optimum_peer.py registers nothing.

In:  an Artifact(name, IR directory written by benchmarks.peer.openvino_build, format
``optimum_intel_openvino``, precision), target "cpu", threads. Out: fp32 logits (batch, labels).
Refused: any target but the CPU (the descriptor's gpu entry is a skip), optimum-intel not
installed (`unavailable` says so).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from compress.backends.registry import Backend, register

from .common import INSTALL_HINT
from .openvino_build import import_optimum_intel
from .openvino_runtime import OV_PEER_FORMAT, ir_constant_count, peer_ov_config, peer_runtime

BACKEND = register(Backend(
    format=OV_PEER_FORMAT,
    runners={"cpu": f"{__name__}:OptimumIntelRunner",  # benchmarks.peer.runner:OptimumIntelRunner
             "gpu": "skip:optimum-intel's peer route is measured on the CPU only"},
    weight_globs=("*.bin", "*.xml"),
    usage="optimum.intel.OVModelForSequenceClassification.from_pretrained(path, device='CPU', ov_config={...})  "
          "# or benchmarks.peer.runner.OptimumIntelRunner",
    color="#bcbd22",
    libraries=("optimum", "optimum-intel", "openvino"),
))


class OptimumIntelRunner:
    """optimum-intel's OVModelForSequenceClassification as a runner of compress.backends.base: the
    harness (compress.measure.harness) feeds it the project's collated int64 batches and reads fp32
    logits (batch, labels), exactly as it does the project's OpenVinoRunner."""
    backend = "optimum-intel-openvino-cpu"

    def __init__(self, artifact, target: str, threads: int):
        reason = self.unavailable(target)
        if reason:
            raise RuntimeError(reason)
        from compress.training.models import load_tokenizer

        OVModelForSequenceClassification = import_optimum_intel()[0]
        self.runtime = peer_runtime(Path(artifact.path), artifact.precision)
        self.ov_config = peer_ov_config(threads, self.runtime)
        self.model = OVModelForSequenceClassification.from_pretrained(
            str(artifact.path), ov_config=dict(self.ov_config), device="CPU", compile=True, local_files_only=True)
        self.model.compile()
        self.inputs = [n for n in ("input_ids", "attention_mask", "token_type_ids") if n in self.model.input_names]
        self.tokenizer = load_tokenizer(artifact.path)
        self.num_labels = int(self.model.config.num_labels)
        self.num_params = ir_constant_count(self.model.model)

    @staticmethod
    def unavailable(target: str) -> str | None:
        if target != "cpu":
            return "optimum-intel's peer route is measured on the CPU only"
        try:
            import optimum.intel.openvino  # noqa: F401
        except ImportError as e:
            return f"optimum-intel is not installed ({e}); {INSTALL_HINT}"
        return None

    def __call__(self, batch: dict[str, np.ndarray]) -> np.ndarray:
        out = self.model(**{n: np.ascontiguousarray(batch[n], dtype=np.int64) for n in self.inputs})
        return np.asarray(out.logits, dtype=np.float32)

    def synchronize(self) -> None:
        return None
