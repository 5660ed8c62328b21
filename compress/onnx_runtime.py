"""ONNX Runtime: dynamic INT8 quantization of a (fused) ONNX graph, and the runner.

`quantize_onnx(src_dir, out_dir, cfg)` runs `onnxruntime.quantization.quantize_dynamic`
on the fused FP32 graph written by `export_onnx`: fused Attention becomes QAttention,
MatMul becomes MatMulInteger (or DynamicQuantizeMatMul), EmbedLayerNormalization becomes
QEmbedLayerNormalization unless the embeddings are kept in float.

Why `DefaultTensorType`: the fused graph contains contrib ops (Attention, SkipLayerNorm,
BiasGelu ...) whose outputs ONNX shape inference cannot type, and onnxruntime 1.32's
quantizer then stops with "Unable to find data type for weight_name=...". Every tensor
in these graphs is FP32 apart from the int64 inputs, so telling the quantizer that
untyped tensors are FP32 is exact here; the alternative, quant_pre_process, would undo
the fusions with its own optimisation pass.

Which groups stay in float is `keep_float` (embeddings, attention, ffn, pooler,
classifier; LayerNorm is never quantized by dynamic INT8). Node names from the
TorchScript exporter carry the module path (`/bert/encoder/layer.0/intermediate/...`)
and fused nodes their op (`Attention_0`), which is how a node maps to a group;
`quantized_groups(path)` reads a quantized graph back so tests can check it obeys
the config.
"""
from __future__ import annotations

import re
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from .config import check
from .data import sha256_file
from .io import atomic_dir
from .onnx_export import check_onnx_file, count_initializer_params, cpu_session, op_counts

GROUPS = ("embeddings", "attention", "ffn", "pooler", "classifier", "layernorm")
QUANT_OPS = {"MatMulInteger", "DynamicQuantizeMatMul", "QAttention", "QEmbedLayerNormalization",
             "QGemm", "ConvInteger", "DynamicQuantizeLinear"}


def node_group(name: str, op_type: str) -> str | None:
    """The module group of a node of an exported BERT graph (fused or not)."""
    base = re.sub(r"_quant$", "", name)
    if op_type in ("EmbedLayerNormalization", "QEmbedLayerNormalization") or "/embeddings/" in base:
        return "embeddings"
    if op_type in ("Attention", "QAttention", "MultiHeadAttention") or "/attention/" in base:
        return "attention" if "LayerNorm" not in base else "layernorm"
    if "LayerNorm" in base or op_type in ("SkipLayerNormalization", "LayerNormalization"):
        return "layernorm"
    if re.search(r"/(intermediate|output)/dense/", base):
        return "ffn"
    if "/pooler/" in base:
        return "pooler"
    if "/classifier/" in base:
        return "classifier"
    return None


@dataclass(frozen=True)
class OrtQuantConfig:
    keep_float: list[str] = field(default_factory=lambda: ["embeddings", "layernorm", "classifier"])
    # One weight scale per output channel. The fused QKV weight of QAttention holds three
    # projections; one per-tensor scale for all of them cost 0.46 points of SST-2 dev
    # accuracy here (88.76% vs 89.33%, FP32 89.22%) for ~1% of latency.
    per_channel: bool = True
    reduce_range: bool = False  # 7-bit weights, only for CPUs without VNNI
    threads: int = 2

    def __post_init__(self):
        for g in self.keep_float:
            check(g in GROUPS, f"keep_float: unknown group '{g}', choose from {', '.join(GROUPS)}")
        check("layernorm" in self.keep_float,
              "keep_float must include 'layernorm': dynamic INT8 has no LayerNorm kernels")
        check(len(set(GROUPS) - set(self.keep_float)) > 0, "keep_float leaves nothing to quantize")
        check(self.threads >= 1, f"threads must be >= 1, got {self.threads}")


def _nodes_to_exclude(path: Path, keep_float: list[str]) -> list[str]:
    import onnx

    graph = onnx.load(str(path), load_external_data=False).graph
    names = [n.name for n in graph.node if node_group(n.name, n.op_type) in keep_float]
    # The quantizer first rewrites a Gemm (pooler, classifier) into "<name>_MatMul" + Add
    # and looks the exclusion up under that new name.
    return names + [n + "_MatMul" for n in names if n.endswith("Gemm")]


def quantized_groups(path: str | Path) -> dict[str, int]:
    """How many quantized nodes each group has in an INT8 graph (DynamicQuantizeLinear
    nodes, which quantize activations, are not counted)."""
    import onnx

    out: dict[str, int] = {}
    for n in onnx.load(str(path), load_external_data=False).graph.node:
        if n.op_type in QUANT_OPS and n.op_type != "DynamicQuantizeLinear":
            g = node_group(n.name, n.op_type) or "other"
            out[g] = out.get(g, 0) + 1
    return out


def quantize_onnx(src_dir: str | Path, out_dir: str | Path, cfg: OrtQuantConfig) -> dict:
    """The `quantize` verb for ONNX: dynamic INT8 of src_dir/model.onnx into out_dir."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    src_dir, out_dir = Path(src_dir), Path(out_dir)
    src = src_dir / "model.onnx"
    check_onnx_file(src)
    exclude = _nodes_to_exclude(src, cfg.keep_float)
    summary: dict = {"source": str(src), "config": asdict(cfg), "nodes_kept_float": len(exclude)}
    with atomic_dir(out_dir) as tmp:
        for f in src_dir.iterdir():  # tokenizer and config.json travel with the graph
            if f.is_file() and f.suffix != ".onnx":
                shutil.copy2(f, tmp / f.name)
        dst = tmp / "model.onnx"
        t0 = time.perf_counter()
        quantize_dynamic(
            str(src), str(dst), weight_type=QuantType.QInt8, per_channel=cfg.per_channel,
            reduce_range=cfg.reduce_range, nodes_to_exclude=exclude,
            extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})
        summary["quantize_s"] = round(time.perf_counter() - t0, 2)
        check_onnx_file(dst)
        groups = quantized_groups(dst)
        leaked = sorted(set(groups) & set(cfg.keep_float))
        if leaked:
            raise RuntimeError(f"{dst}: groups {leaked} were quantized although keep_float lists them")
        summary["quantized_nodes_by_group"] = groups
        summary["op_counts"] = op_counts(dst)
        summary["num_params"] = count_initializer_params(dst)
        summary["size_mb"] = round(dst.stat().st_size / 2**20, 3)
        summary["sha256"] = sha256_file(dst)
    return summary


# --- runner ------------------------------------------------------------------------------

def ort_gpu_unavailable() -> str | None:
    import onnxruntime as ort

    if "CUDAExecutionProvider" not in ort.get_available_providers():
        return (f"onnxruntime {ort.__version__} has no CUDAExecutionProvider "
                "(install onnxruntime-gpu on a CUDA machine)")
    from .runners import cuda_unavailable

    return cuda_unavailable()


class OrtRunner:
    """ONNX Runtime: CPUExecutionProvider on cpu, CUDAExecutionProvider on gpu."""

    def __init__(self, artifact, target: str, threads: int):
        from .models import load_tokenizer
        from transformers import AutoConfig

        path = Path(artifact.path) / "model.onnx"
        check_onnx_file(path)
        if target == "cpu":
            self.session = cpu_session(path, threads)
        else:
            import onnxruntime as ort

            so = ort.SessionOptions()
            so.log_severity_level = 3
            self.session = ort.InferenceSession(str(path), so, providers=["CUDAExecutionProvider"])
        self.backend = f"onnxruntime-{target}"
        self.inputs = [i.name for i in self.session.get_inputs()]
        self.tokenizer = load_tokenizer(artifact.path)
        self.num_labels = AutoConfig.from_pretrained(artifact.path).num_labels
        self.num_params = count_initializer_params(path)

    @staticmethod
    def unavailable(target: str) -> str | None:
        return None if target == "cpu" else ort_gpu_unavailable()

    def __call__(self, batch: dict[str, np.ndarray]) -> np.ndarray:
        return self.session.run(["logits"], {k: batch[k] for k in self.inputs})[0].astype(np.float32)

    def synchronize(self) -> None:
        pass  # session.run returns host arrays: already synchronous
