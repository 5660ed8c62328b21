"""ONNX Runtime: dynamic INT8 quantization of a (fused) ONNX graph, and the runner.

`quantize_onnx(src_dir, out_dir, cfg)` runs `onnxruntime.quantization.quantize_dynamic`
on the fused FP32 graph written by `export_onnx`: fused Attention becomes QAttention,
MatMul becomes MatMulInteger (or DynamicQuantizeMatMul).

Word embeddings (`quantize_embeddings`, `embedding_scheme`; sizes and row errors of each
choice in docs/backends.md).
- `per_row` (default): the table becomes INT8 rows with one fp32 scale per row
  (`compress.backends.torchao.quantize_rows`, symmetric). The fused EmbedLayerNormalization is
  replaced by what it computes, with the word rows looked up in INT8: Gather(int8 table,
  ids) -> Cast -> Mul(Gather(scales, ids)), + position rows (Slice) + segment rows
  (Gather), SkipLayerNormalization (the contrib op the fused graph already uses), and
  the mask index for the fused Attention nodes as ReduceSum(mask), which is what
  EmbedLayerNormalization's second output is. Only the looked-up rows are dequantized;
  every other fusion (Attention, SkipLayerNormalization, BiasGelu) stays. An unfused
  graph gets the same INT8 Gather in place of its word-embedding Gather.
- `per_tensor`: ONNX Runtime's own QEmbedLayerNormalization, which stores the word,
  position and segment tables and the LayerNorm gamma/beta as uint8 with one scale per
  tensor, several times the per-row error (`embedding_error` measures both).
`quantize_embeddings: false` keeps the table in FP32 (then keep_float may list
`embeddings`, otherwise a contradiction).

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

A tagger (BertForTokenClassification) has no pooler (`pooler` in keep_float then keeps
nothing) and its classifier, run on every position, exports as MatMul + Add under
`/classifier/`, the same group; its logits are (batch, seq, tags) and the runner returns
them as they are (the harness takes the scored positions, compress.data.tokens).
"""
from __future__ import annotations

import re
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from compress.core.config import check
from compress.core.errors import UserError
from compress.core.io import atomic_dir, sha256_file
from compress.backends.onnx_export import check_onnx_file, count_initializer_params, cpu_session, op_counts
from compress.backends.registry import Backend, register, write_manifest

BACKEND = register(Backend(
    format="onnx",
    runners={"cpu": "compress.backends.onnx_runtime:OrtRunner", "gpu": "compress.backends.onnx_runtime:OrtRunner"},
    weight_globs=("*.onnx",),
    usage="onnxruntime.InferenceSession(path + '/model.onnx')  # inputs input_ids, attention_mask, token_type_ids",
    color="#2ca02c",
    libraries=("onnx", "onnxruntime", "onnxruntime-gpu"),
    marker="model.onnx",
    precision_of="compress.backends.onnx_runtime:onnx_precision",
))

GROUPS = ("embeddings", "attention", "ffn", "pooler", "classifier", "layernorm")
EMBEDDING_SCHEMES = ("per_row", "per_tensor")
INT8_EMBED_PREFIX = "/bert/embeddings/word_embeddings_int8/"
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
    # Groups left in float: layernorm (always), attention, ffn, pooler, classifier;
    # `embeddings` only together with quantize_embeddings: false.
    keep_float: list[str] = field(default_factory=lambda: ["layernorm", "classifier"])
    # One weight scale per output channel. The fused QKV weight of QAttention holds three
    # projections; one per-tensor scale for all of them cost 0.46 points of SST-2 dev
    # accuracy here (88.76% vs 89.33%, FP32 89.22%) for ~1% of latency.
    per_channel: bool = True
    reduce_range: bool = False  # 7-bit weights, only for CPUs without VNNI
    threads: int = 2
    quantize_embeddings: bool = True  # INT8 word-embedding table (see the module docstring)
    embedding_scheme: str = "per_row"  # per_row | per_tensor (ORT's QEmbedLayerNormalization)
    # The accuracy check on the validation split (compress.backends.onnx_runtime_check):
    # relative drop of the task's validation metric allowed at `confidence`; null: no check.
    max_drop: float | None = 0.01
    confidence: float = 0.95
    max_float_nodes: int = 6  # most sensitive nodes the check may leave in float
    validation_rows: int = 1000  # at most (a seeded sample of the split)
    rank_rows: int = 256  # rows the ranking of nodes reads (outputs only, no labels)
    seed: int = 0
    max_length: int = 128
    check_batch_size: int = 64  # length-sorted padded batches, as measure.eval_batch_size

    def __post_init__(self):
        for g in self.keep_float:
            check(g in GROUPS, f"keep_float: unknown group '{g}', choose from {', '.join(GROUPS)}")
        check("layernorm" in self.keep_float,
              "keep_float must include 'layernorm': dynamic INT8 has no LayerNorm kernels")
        check(not (self.quantize_embeddings and "embeddings" in self.keep_float),
              "keep_float lists 'embeddings' but quantize_embeddings is true: drop 'embeddings' from "
              "keep_float (INT8 word embeddings) or set quantize_embeddings: false (FP32 table)")
        check(self.embedding_scheme in EMBEDDING_SCHEMES,
              f"embedding_scheme must be one of {', '.join(EMBEDDING_SCHEMES)}, got '{self.embedding_scheme}'")
        kept = set(self.keep_float) | (set() if self.quantize_embeddings else {"embeddings"})
        check(len(set(GROUPS) - kept) > 0, "keep_float leaves nothing to quantize")
        check(self.threads >= 1, f"threads must be >= 1, got {self.threads}")
        check(self.max_drop is None or 0 <= self.max_drop < 1, f"max_drop must be in [0, 1) or null, got {self.max_drop}")
        check(0.5 <= self.confidence < 1, f"confidence must be in [0.5, 1), got {self.confidence}")
        for name in ("validation_rows", "rank_rows", "max_length", "check_batch_size"):
            check(getattr(self, name) >= 1, f"{name} must be >= 1, got {getattr(self, name)}")
        check(self.max_float_nodes >= 0, f"max_float_nodes must be >= 0, got {self.max_float_nodes}")

    def float_groups(self) -> list[str]:
        """Groups ONNX Runtime's quantize_dynamic must leave alone: keep_float, and the
        embeddings unless ORT's own per-tensor scheme quantizes them."""
        own = self.quantize_embeddings and self.embedding_scheme == "per_tensor"
        return sorted(set(self.keep_float) | (set() if own else {"embeddings"}))


def exclusion_names(nodes: list[str]) -> list[str]:
    """What nodes_to_exclude must list to keep `nodes` in float: the quantizer first
    rewrites a Gemm into "<name>_MatMul" + Add and looks the exclusion up under that name."""
    return list(nodes) + [n + "_MatMul" for n in nodes if n.endswith("Gemm")]


def _nodes_to_exclude(path: Path, keep_float: list[str]) -> list[str]:
    import onnx

    graph = onnx.load(str(path), load_external_data=False).graph
    return exclusion_names([n.name for n in graph.node if node_group(n.name, n.op_type) in keep_float])


def _int8_initializers(graph) -> set[str]:
    import onnx

    return {t.name for t in graph.initializer if t.data_type in (onnx.TensorProto.INT8, onnx.TensorProto.UINT8)}


def quantized_groups(path: str | Path) -> dict[str, int]:
    """How many quantized nodes each group has in an INT8 graph (DynamicQuantizeLinear
    nodes, which quantize activations, are not counted; a Gather of an INT8 table, the
    per-row word embeddings, is)."""
    import onnx

    graph = onnx.load(str(path), load_external_data=False).graph
    int8 = _int8_initializers(graph)
    out: dict[str, int] = {}
    for n in graph.node:
        if (n.op_type in QUANT_OPS and n.op_type != "DynamicQuantizeLinear") or \
                (n.op_type == "Gather" and n.input[0] in int8):
            g = node_group(n.name, n.op_type) or "other"
            out[g] = out.get(g, 0) + 1
    return out


# --- per-row INT8 word embeddings ------------------------------------------------------------

def embedding_error(table: np.ndarray, scheme: str) -> dict[str, float]:
    """Relative reconstruction error per row (|row - dequantized| / |row|) of an embedding
    table under `per_row` (this module's INT8, symmetric, one scale per row) or
    `per_tensor` (ONNX Runtime's QEmbedLayerNormalization: uint8, asymmetric, one scale)."""
    w = np.asarray(table, dtype=np.float32)
    if scheme == "per_row":
        import torch

        from compress.backends.torchao import dequantize_rows, quantize_rows

        deq = dequantize_rows(*quantize_rows(torch.from_numpy(w))).numpy()
    elif scheme == "per_tensor":
        lo, hi = min(float(w.min()), 0.0), max(float(w.max()), 0.0)
        scale = (hi - lo) / 255 or 1.0
        zero = np.round(-lo / scale)
        deq = (np.clip(np.round(w / scale) + zero, 0, 255) - zero) * scale
    else:
        raise ValueError(f"scheme must be one of {EMBEDDING_SCHEMES}, got {scheme!r}")
    err = np.linalg.norm(deq - w, axis=1) / np.maximum(np.linalg.norm(w, axis=1), 1e-12)
    return {"mean": float(err.mean()), "p99": float(np.percentile(err, 99)), "max": float(err.max())}


def _per_row_tables(graph, name: str, prefix: str):
    """Replace the float initializer `name` by `<prefix>rows` (int8) and `<prefix>scales`
    (fp32, [rows, 1]); returns their names."""
    import torch
    from onnx import numpy_helper

    from compress.backends.torchao import quantize_rows

    init = next(t for t in graph.initializer if t.name == name)
    q, scale = quantize_rows(torch.from_numpy(numpy_helper.to_array(init).astype(np.float32)))
    graph.initializer.remove(init)
    rows, scales = prefix + "rows", prefix + "scales"
    graph.initializer.extend([numpy_helper.from_array(q.numpy(), rows),
                              numpy_helper.from_array(scale.numpy(), scales)])
    return rows, scales


def _gather_rows(rows: str, scales: str, ids: str, out: str, prefix: str) -> list:
    """Nodes computing out = float(rows[ids]) * scales[ids]: only the looked-up rows."""
    from onnx import TensorProto, helper

    return [
        helper.make_node("Gather", [rows, ids], [prefix + "rows_int8"], prefix + "Gather", axis=0),
        helper.make_node("Gather", [scales, ids], [prefix + "row_scales"], prefix + "GatherScales", axis=0),
        helper.make_node("Cast", [prefix + "rows_int8"], [prefix + "rows_f32"], prefix + "Cast", to=TensorProto.FLOAT),
        helper.make_node("Mul", [prefix + "rows_f32", prefix + "row_scales"], [out], prefix + "Mul"),
    ]


def _unfused_embed_layer_norm(node, rows: str, scales: str, opset: int) -> list:
    """What a com.microsoft EmbedLayerNormalization computes, with the word rows from the
    per-row INT8 table: LN(word[ids] + position[0:seq or position_ids] + segment[segment_ids])
    and, as its second output, the mask index ReduceSum(mask, axis 1) (int32)."""
    from onnx import TensorProto, helper

    p = INT8_EMBED_PREFIX
    ids, seg, _, pos_table, seg_table, gamma, beta = (list(node.input) + [""] * 7)[:7]
    mask = node.input[7] if len(node.input) > 7 else ""
    position_ids = node.input[8] if len(node.input) > 8 else ""
    outs = list(node.output) + [""] * 3
    eps = next((a.f for a in node.attribute if a.name == "epsilon"), 1e-12)
    nodes = _gather_rows(rows, scales, ids, p + "word", p)
    if position_ids:
        nodes.append(helper.make_node("Gather", [pos_table, position_ids], [p + "position"], p + "GatherPosition",
                                      axis=0))
    else:  # positions 0 .. seq-1, broadcast over the batch
        nodes += [
            helper.make_node("Constant", [], [p + "zero"], p + "Zero",
                             value=helper.make_tensor(p + "zero_value", TensorProto.INT64, [1], [0])),
            helper.make_node("Constant", [], [p + "one"], p + "One",
                             value=helper.make_tensor(p + "one_value", TensorProto.INT64, [1], [1])),
            helper.make_node("Constant", [], [p + "two"], p + "Two",
                             value=helper.make_tensor(p + "two_value", TensorProto.INT64, [1], [2])),
            helper.make_node("Shape", [ids], [p + "ids_shape"], p + "Shape"),
            helper.make_node("Slice", [p + "ids_shape", p + "one", p + "two"], [p + "seq"], p + "SeqLen"),
            helper.make_node("Slice", [pos_table, p + "zero", p + "seq", p + "zero"], [p + "position"],
                             p + "SlicePosition"),
        ]
    nodes.append(helper.make_node("Add", [p + "word", p + "position"], [p + "word_position"], p + "AddPosition"))
    if seg and seg_table:
        nodes.append(helper.make_node("Gather", [seg_table, seg], [p + "segment"], p + "GatherSegment", axis=0))
        ln_in, skip = p + "word_position", p + "segment"
    else:
        nodes += [helper.make_node("Shape", [p + "word"], [p + "word_shape"], p + "WordShape"),
                  helper.make_node("Expand", [p + "position", p + "word_shape"], [p + "position_full"],
                                   p + "ExpandPosition")]
        ln_in, skip = p + "word", p + "position_full"
    nodes.append(helper.make_node("SkipLayerNormalization", [ln_in, skip, gamma, beta],
                                  [outs[0], "", "", outs[2]], p + "LayerNorm", domain="com.microsoft",
                                  epsilon=eps))
    if outs[1]:
        if not mask:
            raise UserError(f"{node.name}: a mask index output without a mask input; cannot replace it")
        if opset >= 13:
            nodes += [helper.make_node("Constant", [], [p + "axis1"], p + "Axis1",
                                       value=helper.make_tensor(p + "axis1_value", TensorProto.INT64, [1], [1])),
                      helper.make_node("ReduceSum", [mask, p + "axis1"], [outs[1]], p + "MaskIndex", keepdims=0)]
        else:
            nodes.append(helper.make_node("ReduceSum", [mask], [outs[1]], p + "MaskIndex", axes=[1], keepdims=0))
    return nodes


def int8_word_embeddings(src: str | Path, dst: str | Path) -> dict:
    """Rewrite src so its word-embedding table is INT8 rows + per-row scales (see the
    module docstring) and save it to dst (one file). Returns what was replaced."""
    import onnx

    model = onnx.load(str(src))
    graph = model.graph
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 17)
    inits = {t.name for t in graph.initializer}
    embed = [n for n in graph.node if n.op_type == "EmbedLayerNormalization"]
    word_gather = [n for n in graph.node if n.op_type == "Gather" and n.input[0] in inits
                   and "word_embeddings" in n.input[0] + n.name]
    if len(embed) == 1:
        node = embed[0]
        rows, scales = _per_row_tables(graph, node.input[2], INT8_EMBED_PREFIX)
        new = _unfused_embed_layer_norm(node, rows, scales, opset)
        replaced = {"node": node.name, "op_type": node.op_type, "table": node.input[2]}
    elif not embed and len(word_gather) == 1:
        node = word_gather[0]
        rows, scales = _per_row_tables(graph, node.input[0], INT8_EMBED_PREFIX)
        new = _gather_rows(rows, scales, node.input[1], node.output[0], INT8_EMBED_PREFIX)
        replaced = {"node": node.name, "op_type": node.op_type, "table": node.input[0]}
    else:
        raise UserError(f"{src}: found {len(embed)} EmbedLayerNormalization and {len(word_gather)} word-embedding "
                        "Gather nodes; expected one of them, so the word embeddings cannot be made INT8 "
                        "(set onnx_int8.quantize_embeddings: false)")
    index = list(graph.node).index(node)
    graph.node.remove(node)
    for i, n in enumerate(new):
        graph.node.insert(index + i, n)
    onnx.save(model, str(dst))
    return replaced


def _build(src: Path, dst: Path, exclude: list[str], cfg: OrtQuantConfig) -> dict:
    """quantize_dynamic of src into dst with `exclude` in float, then the word embeddings
    per cfg; returns the word-embedding record."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quantize_dynamic(
        str(src), str(dst), weight_type=QuantType.QInt8, per_channel=cfg.per_channel,
        reduce_range=cfg.reduce_range, nodes_to_exclude=exclude,
        extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})
    if cfg.quantize_embeddings and cfg.embedding_scheme == "per_row":  # quantize_dynamic never sees the INT8 table
        return {"scheme": "int8-symmetric-per-row", "replaced": int8_word_embeddings(dst, dst)}
    return {"scheme": "uint8-per-tensor (QEmbedLayerNormalization)" if cfg.quantize_embeddings else "float32"}


def quantize_onnx(src_dir: str | Path, out_dir: str | Path, cfg: OrtQuantConfig,
                  prepared_root: str | Path | None = None) -> dict:
    """The `quantize` verb for ONNX: dynamic INT8 of src_dir/model.onnx into out_dir, with
    the word embeddings per `quantize_embeddings` / `embedding_scheme`. With a prepared data
    directory that has a validation split and cfg.max_drop set, the accuracy check
    (compress.backends.onnx_runtime_check) may leave the most sensitive nodes in float;
    without one the check is recorded as skipped, with the reason."""
    from compress.backends.base import num_labels_of
    from compress.backends.onnx_runtime_check import check_int8
    from compress.data.prepare import Prepared
    from compress.data.tokenizer import load_fast_tokenizer

    src_dir, out_dir = Path(src_dir), Path(out_dir)
    src = src_dir / "model.onnx"
    check_onnx_file(src)
    exclude = _nodes_to_exclude(src, cfg.float_groups())
    summary: dict = {"source": str(src), "config": asdict(cfg), "nodes_kept_float": len(exclude)}
    with atomic_dir(out_dir) as tmp:
        for f in src_dir.iterdir():  # tokenizer and config.json travel with the graph
            if f.is_file() and f.suffix != ".onnx":
                shutil.copy2(f, tmp / f.name)
        dst = tmp / "model.onnx"
        t0 = time.perf_counter()
        summary["word_embeddings"] = _build(src, dst, exclude, cfg)
        summary["quantize_s"] = round(time.perf_counter() - t0, 2)
        if cfg.max_drop is None:
            summary["accuracy_check"] = {"skipped": "onnx_int8.max_drop is null"}
        elif prepared_root is None or not Prepared.open(prepared_root).has_validation():
            summary["accuracy_check"] = {"skipped": "no prepared validation split to check on"
                                         + ("" if prepared_root is None else f" in {prepared_root}")}
        else:
            t0 = time.perf_counter()
            summary["accuracy_check"] = check_int8(
                src, dst, exclude, lambda extra, path: _build(src, path, exclude + exclusion_names(extra), cfg),
                Path(prepared_root), load_fast_tokenizer(src_dir), num_labels_of(src_dir), cfg)
            summary["accuracy_check"]["check_s"] = round(time.perf_counter() - t0, 2)
            summary["nodes_kept_float"] += len(exclusion_names(summary["accuracy_check"]["float_nodes"]))
        check_onnx_file(dst)
        groups = quantized_groups(dst)
        leaked = sorted(set(groups) & set(cfg.keep_float))
        if leaked:
            raise RuntimeError(f"{dst}: groups {leaked} were quantized although keep_float lists them")
        if cfg.quantize_embeddings and "embeddings" not in groups:
            raise RuntimeError(f"{dst}: quantize_embeddings is true but the embeddings were not quantized "
                               "(no EmbedLayerNormalization / word-embedding Gather found)")
        summary["quantized_nodes_by_group"] = groups
        summary["op_counts"] = op_counts(dst)
        summary["num_params"] = count_initializer_params(dst)
        summary["size_mb"] = round(dst.stat().st_size / 2**20, 3)
        summary["sha256"] = sha256_file(dst)
        write_manifest(tmp, "onnx", "int8", parent=str(src_dir))  # replaces the parent's, copied above
    return summary


def onnx_precision(directory: str | Path) -> str:
    """int8 when the graph holds ONNX Runtime's quantized operators, else fp32."""
    return "int8" if QUANT_OPS & set(op_counts(Path(directory) / "model.onnx")) else "fp32"


# --- runner ------------------------------------------------------------------------------

def ort_gpu_unavailable() -> str | None:
    import onnxruntime as ort

    if "CUDAExecutionProvider" not in ort.get_available_providers():
        return (f"onnxruntime {ort.__version__} has no CUDAExecutionProvider "
                "(install onnxruntime-gpu on a CUDA machine)")
    from compress.backends.pytorch import cuda_unavailable

    return cuda_unavailable()


class OrtRunner:
    """ONNX Runtime: CPUExecutionProvider on cpu, CUDAExecutionProvider on gpu."""

    def __init__(self, artifact, target: str, threads: int):
        from compress.backends.base import num_labels_of
        from compress.data.tokenizer import load_fast_tokenizer  # tokenizers only: no torch on this path

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
        self.tokenizer = load_fast_tokenizer(artifact.path)
        self.num_labels = num_labels_of(artifact.path)
        self.num_params = count_initializer_params(path)

    @staticmethod
    def unavailable(target: str) -> str | None:
        return None if target == "cpu" else ort_gpu_unavailable()

    def __call__(self, batch: dict[str, np.ndarray]) -> np.ndarray:
        return self.session.run(["logits"], {k: batch[k] for k in self.inputs})[0].astype(np.float32)

    def synchronize(self) -> None:
        pass  # session.run returns host arrays: already synchronous
