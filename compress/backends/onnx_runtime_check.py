"""The accuracy check of ONNX Runtime dynamic INT8 (compress.backends.onnx_runtime).

Dynamic INT8 has no accuracy control of its own: on the AMX Xeon the MRPC pruned student's
INT8 graph kept 98.08% of its FP32 parent on dev and 97.6% on validation, and nothing in
the stage noticed. The OpenVINO route has NNCF's accuracy control; this is the same idea
for ONNX Runtime, done the way NNCF's accuracy control does it (rank the quantized
operations by how much putting one back in float helps, put the worst back one at a time):

1. score the FP32 parent and the INT8 graph on the validation split, in length-sorted
   padded batches of `check_batch_size` (as the measurement runs dev);
2. keep the INT8 graph when its relative drop of the task's validation metric is within
   `max_drop` at `confidence` (compress.measure.drop: a paired bootstrap over the rows);
3. otherwise rank the quantized nodes (fused Attention, MatMul, Gemm) by how close the
   graph's output comes to the FP32 parent's with that one node left in float (mean KL
   divergence of the softmax at every scored position of `rank_rows` validation rows:
   no labels read, so the ranking is not a second metric fit), then leave the top 1, 2,
   ... `max_float_nodes` in float, rebuilding and re-checking each time, and keep the
   first graph that passes;
4. when none passes, keep the graph with the lowest bound (fewest float nodes on a tie)
   and record `met: false`: select's floor still keeps it out of production.

Only validation rows are read (dynamic quantization needs no calibration rows); dev only
reports. The summary's `accuracy_check` records the rows, every graph tried with its
metric, point drop and bound, the ranking, and which nodes stay float.
"""
from __future__ import annotations

import random
import shutil
import tempfile
from pathlib import Path
from typing import Callable

import numpy as np

from compress.measure.drop import Scored, drop_upper_bound, relative_drop, scored_from_logits

# ops quantize_dynamic turns into integer kernels in these graphs (Attention -> QAttention,
# MatMul -> MatMulInteger / DynamicQuantizeMatMul, Gemm -> its MatMul + Add)
CANDIDATE_OPS = ("Attention", "MatMul", "Gemm")


def candidates(src: Path, excluded: list[str]) -> list[str]:
    """The nodes of the FP32 graph that quantize_dynamic quantizes under `excluded`."""
    import onnx

    graph = onnx.load(str(src), load_external_data=False).graph
    skip = set(excluded)
    return [n.name for n in graph.node if n.op_type in CANDIDATE_OPS and n.name not in skip]


class CheckRows:
    """The validation rows the check scores: all of them (a seeded sample of
    `validation_rows` when the split holds more), encoded by the artifact's tokenizer, and
    the first `rank_rows` of that sample for the ranking."""

    def __init__(self, prepared_root: Path, tokenizer, cfg):
        from compress.data.prepare import Prepared
        from compress.data.tokens import encode

        prepared = Prepared.open(prepared_root)
        rows = prepared.validation()
        if len(rows) > cfg.validation_rows:
            rows = [rows[i] for i in sorted(random.Random(cfg.seed).sample(range(len(rows)), cfg.validation_rows))]
        self.task = prepared.task
        self.enc = encode(tokenizer, rows, cfg.max_length)
        self.rank_enc = encode(tokenizer, rows[:cfg.rank_rows], cfg.max_length)
        self.batch_size = cfg.check_batch_size
        self.info = {"split": "validation", "rows": len(rows), "rank_rows": len(self.rank_enc),
                     "sha256": prepared.sha256("validation"), "batch_size": cfg.check_batch_size,
                     "max_length": cfg.max_length}


def graph_logits(path: Path, enc, batch_size: int, num_labels: int, threads: int) -> np.ndarray:
    """(positions, labels) logits of a graph at every scored position of `enc`."""
    from compress.backends.onnx_export import cpu_session, run_session
    from compress.data.tokens import eval_batches, position_logits

    session = cpu_session(path, threads)
    return position_logits(enc, eval_batches(enc.lengths(), batch_size), lambda b: run_session(session, b), num_labels)


def mean_kl(p_logits: np.ndarray, q_logits: np.ndarray) -> float:
    """Mean KL(softmax(p) || softmax(q)) over positions: how far q's output is from p's."""
    def log_softmax(x):
        x = x - x.max(axis=-1, keepdims=True)
        return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))

    lp, lq = log_softmax(p_logits.astype(np.float64)), log_softmax(q_logits.astype(np.float64))
    return float((np.exp(lp) * (lp - lq)).sum(axis=-1).mean()) if len(lp) else 0.0


def revert_until(ranked: list[str], check: Callable[[list[str]], dict], max_drop: float,
                 max_float_nodes: int) -> tuple[list[str], list[dict]]:
    """Leave the top 1, 2, ... of `ranked` in float until `check(float_nodes)` (a tried
    graph's record, with `drop_upper_bound`) is within max_drop. Returns the nodes of the
    graph to keep and every record tried, in order; the first record (no extra float node)
    is the caller's. When none passes: the lowest bound, the fewest float nodes on a tie."""
    tried = [check([])]
    if tried[0]["drop_upper_bound"] <= max_drop:
        return [], tried
    for k in range(1, min(max_float_nodes, len(ranked)) + 1):
        tried.append(check(ranked[:k]))
        if tried[-1]["drop_upper_bound"] <= max_drop:
            return ranked[:k], tried
    best = min(range(len(tried)), key=lambda i: (tried[i]["drop_upper_bound"], i))
    return ranked[:best], tried


def check_int8(src: Path, dst: Path, excluded: list[str], build: Callable[[list[str], Path], None],
               prepared_root: Path, tokenizer, num_labels: int, cfg) -> dict:
    """Check dst (built from src with `excluded` in float) against src on validation and,
    when it loses more than cfg.max_drop at cfg.confidence, rebuild it with the most
    sensitive nodes in float (see the module docstring). `build(extra_float_nodes, path)`
    writes a graph. dst ends up holding the chosen graph; returns the record."""
    from tqdm.auto import tqdm

    rows = CheckRows(prepared_root, tokenizer, cfg)
    fp32_logits = graph_logits(src, rows.enc, rows.batch_size, num_labels, cfg.threads)
    parent = scored_from_logits(rows.enc, fp32_logits, rows.task)

    def record(path: Path, float_nodes: list[str]) -> dict:
        child: Scored = scored_from_logits(
            rows.enc, graph_logits(path, rows.enc, rows.batch_size, num_labels, cfg.threads), rows.task)
        return {"float_nodes": list(float_nodes), "metric": round(child.metric, 6),
                "relative_drop": round(relative_drop(parent.metric, child.metric), 6),
                "drop_upper_bound": round(drop_upper_bound(parent, child, cfg.confidence), 6)}

    out = {**rows.info, "metric_name": rows.task.kind_impl.validation_metric_name,
           "fp32_metric": round(parent.metric, 6), "max_drop": cfg.max_drop, "confidence": cfg.confidence}
    first = record(dst, [])
    if first["drop_upper_bound"] <= cfg.max_drop:
        return {**out, "met": True, "float_nodes": [], "tried": [first],
                "why": f"within the max drop at {cfg.confidence:.0%} confidence as quantized"}

    with tempfile.TemporaryDirectory(prefix="ort_check_") as tmp:
        tmp = Path(tmp)
        rank_fp32 = graph_logits(src, rows.rank_enc, rows.batch_size, num_labels, cfg.threads)
        sensitivity = {}
        for node in tqdm(candidates(src, excluded), desc="rank INT8 nodes", unit="node", mininterval=2.0):
            build([node], tmp / "rank.onnx")
            sensitivity[node] = mean_kl(rank_fp32, graph_logits(tmp / "rank.onnx", rows.rank_enc, rows.batch_size,
                                                                num_labels, cfg.threads))
        ranked = sorted(sensitivity, key=lambda n: (sensitivity[n], n))  # least KL with it in float first

        def check(float_nodes: list[str]) -> dict:
            if not float_nodes:
                return first
            path = tmp / f"float_{len(float_nodes)}.onnx"
            build(float_nodes, path)
            return record(path, float_nodes)

        keep, tried = revert_until(ranked, check, cfg.max_drop, cfg.max_float_nodes)
        if keep:
            shutil.copyfile(tmp / f"float_{len(keep)}.onnx", dst)  # the graph checked above
    kept = next(t for t in tried if t["float_nodes"] == keep)  # revert_until returns a tried graph's nodes
    met = kept["drop_upper_bound"] <= cfg.max_drop
    why = (f"{len(keep)} most sensitive node(s) left in float to stay within the max drop at "
           f"{cfg.confidence:.0%} confidence" if met else
           f"no graph with up to {cfg.max_float_nodes} node(s) in float stayed within the max drop at "
           f"{cfg.confidence:.0%} confidence; kept the lowest bound (select's floor still applies)")
    return {**out, "met": met, "float_nodes": keep, "tried": tried, "why": why,
            "ranking_kl": {n: round(sensitivity[n], 8) for n in ranked}}
