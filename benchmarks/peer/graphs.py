"""Running an ONNX graph for the onnx check: one ONNX Runtime session per graph (the session
options every project measurement uses), its dev-split logits, A/B/A/B interleaved latency,
and the graph's opset and size on disk.

In:  .onnx files whose inputs are among input_ids / attention_mask / token_type_ids, and the
project's collated int64 batches. Out: fp32 logits (batch, labels); latency figures.
Refused (InputError): a file onnxruntime cannot load, a graph input the tokenizer does not
produce, an output that is not (batch, labels).
"""
from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np

from .common import InputError


def opset(path: Path) -> int | None:
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)


def model_size_mb(path: Path) -> float:
    """The .onnx file plus any external-data files it references, in MiB."""
    import onnx

    total = path.stat().st_size
    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception:  # noqa: BLE001 - size of the file alone is still a fact
        return round(total / 2**20, 3)
    extra = set()
    for init in model.graph.initializer:
        if init.data_location == onnx.TensorProto.EXTERNAL:
            extra |= {e.value for e in init.external_data if e.key == "location"}
    total += sum((path.parent / f).stat().st_size for f in extra if (path.parent / f).is_file())
    return round(total / 2**20, 3)


def make_session(path: Path, threads: int, label: str):
    from compress.backends.onnx_export import cpu_session  # the session options every project measurement uses

    try:
        return cpu_session(path, threads)
    except Exception as e:  # noqa: BLE001 - a file onnxruntime cannot load is a bad input
        raise InputError(f"{label} {path}: onnxruntime cannot load it: {type(e).__name__}: {e}") from None


class Graph:
    """One session; takes the project's collated batch and feeds only the inputs the graph
    declares (int64), returns fp32 logits (batch, labels)."""

    def __init__(self, name: str, path: Path, threads: int):
        self.name, self.path = name, path
        self.session = make_session(path, threads, "--project-onnx" if name == "project" else name)
        self.inputs = [i.name for i in self.session.get_inputs()]
        self.output = self.session.get_outputs()[0].name
        known = {"input_ids", "attention_mask", "token_type_ids"}
        unknown = [n for n in self.inputs if n not in known]
        if unknown:
            raise InputError(f"{path}: graph input(s) {unknown} are not produced by the tokenizer "
                             f"(known: {sorted(known)})")

    def __call__(self, batch: dict[str, np.ndarray]) -> np.ndarray:
        feed = {n: np.ascontiguousarray(batch[n], dtype=np.int64) for n in self.inputs}
        return np.asarray(self.session.run([self.output], feed)[0], dtype=np.float32)


def dev_logits(graph: Graph, enc, batches, num_labels: int) -> np.ndarray:
    from compress.data.tokens import collate

    logits = np.zeros((len(enc), num_labels), dtype=np.float32)
    for idx in batches:
        out = graph(collate(enc, idx))
        if out.ndim != 2 or out.shape[1] != num_labels:
            raise InputError(f"{graph.path}: output '{graph.output}' has shape {out.shape}, expected "
                             f"(batch, {num_labels}) for task labels {num_labels}")
        logits[idx] = out
    return logits


def interleaved_latency(graphs: dict[str, Graph], batch: dict[str, np.ndarray], args) -> dict:
    """A/B/A/B rounds; every round of every graph gets the same query/time budget."""
    from compress.measure.harness import latency_point, time_queries

    per_q = math.ceil(args.min_queries / args.rounds)
    per_min_s = args.min_duration_s / args.rounds
    per_max_s = args.max_duration_s / args.rounds
    times = {name: [] for name in graphs}
    for _ in range(args.rounds):
        for name, graph in graphs.items():
            times[name].append(time_queries(graph, batch, args.warmup, per_q, per_min_s, per_max_s))
    out = {}
    for name, rounds in times.items():
        point = latency_point(np.concatenate(rounds), 1, args.seq)
        out[name] = {
            **{k: v for k, v in dataclasses.asdict(point).items() if k not in ("status", "reason")},
            "round_p50_ms": [round(float(np.percentile(r, 50)) * 1000.0, 4) for r in rounds],
        }
    return out
