"""CUDA-graph replay of a PyTorch model: the GPU runs a whole forward pass from
one launch, so small batches time the GPU, not Python and per-kernel launches.

Why captured graphs and not `torch.compile(mode="reduce-overhead")` (which also uses CUDA
graphs): capture needs nothing beyond torch itself (no Triton/inductor build on the user's
machine), costs a few forward passes per shape instead of a compile per shape, and leaves
the numerics those of the eager kernels (agreement with the eager parent is then a check on
the replay mechanics, not on a different code generator). Whether compile is faster on a
given GPU is for `benchmarks/gpu_check.py` to measure, not to assume.

The mechanics sit in `GraphCache`, written against a small device interface
(`GraphDevice`), so the CPU test machines exercise the same bookkeeping with a fake device:

- one static input buffer set and one captured graph per (batch, seq) *bucket*: seq rounds
  up to a multiple of `seq_multiple`, batch up to a power of two (so accuracy passes over
  variable-length batches capture a handful of shapes, and the latency points, which are
  such shapes already, replay exactly what they ask for);
- a query is copied into its bucket's buffers (padding rows and positions with mask 0),
  the graph is replayed, and the rows asked for are read back.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Protocol

import numpy as np
import torch

from compress.data.tokens import unpad
from compress.backends.registry import Backend, register

# the float weights of a pytorch directory, replayed from captured CUDA graphs: a runtime
# variant, recognised by its record's format only (no marker file of its own)
BACKEND = register(Backend(
    format="pytorch_cudagraph",
    runners={"cpu": "skip:CUDA graphs replay on NVIDIA GPUs only", "gpu": "compress.backends.cudagraph:CudaGraphRunner"},
    weight_globs=("*.safetensors",),
    usage="compress.backends.cudagraph.CudaGraphRunner(Artifact(name, path, 'pytorch_cudagraph', precision), "
          "'gpu', threads)  # CUDA graphs replayed per query",
    color="#8c564b",
))

INPUTS = ("input_ids", "attention_mask", "token_type_ids")


class GraphDevice(Protocol):
    def buffers(self, batch: int, seq: int) -> dict[str, torch.Tensor]: ...
    def capture(self, forward: Callable[..., torch.Tensor], static: dict[str, torch.Tensor]): ...
    def replay(self, graph) -> None: ...
    def synchronize(self) -> None: ...


class CudaDevice:
    """The real thing: warm-up on a side stream, one torch.cuda.CUDAGraph per bucket, all
    graphs sharing one memory pool."""

    def __init__(self, device: torch.device, warmup: int = 3):
        self.device, self.warmup, self.pool = device, warmup, None

    def buffers(self, batch: int, seq: int) -> dict[str, torch.Tensor]:
        return {k: torch.zeros((batch, seq), dtype=torch.int64, device=self.device) for k in INPUTS}

    def capture(self, forward, static):
        side = torch.cuda.Stream(self.device)
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side):  # warm-up: cuBLAS handles, autotuning, allocator
            for _ in range(self.warmup):
                forward(**static)
        torch.cuda.current_stream(self.device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        if self.pool is None:
            self.pool = torch.cuda.graph_pool_handle()
        with torch.cuda.graph(graph, pool=self.pool):
            out = forward(**static)
        return graph, out

    def replay(self, graph) -> None:
        graph.replay()

    def synchronize(self) -> None:
        torch.cuda.synchronize(self.device)


@dataclass
class _Entry:
    static: dict[str, torch.Tensor]
    graph: object
    out: torch.Tensor


def _bucket(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


def _pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


@dataclass
class GraphCache:
    """Captured graphs by bucket shape, replayed per query (see the module docstring)."""
    forward: Callable[..., torch.Tensor]  # (input_ids, attention_mask, token_type_ids) -> logits
    device: GraphDevice
    seq_multiple: int = 16
    max_seq: int = 512
    entries: dict[tuple[int, int], _Entry] = field(default_factory=dict)
    replays: int = 0

    def shape_for(self, batch: int, seq: int) -> tuple[int, int]:
        return _pow2(batch), min(_bucket(seq, self.seq_multiple), max(seq, self.max_seq))

    def __call__(self, batch: dict[str, np.ndarray]) -> np.ndarray:
        rows, seq = batch["input_ids"].shape
        key = self.shape_for(rows, seq)
        entry = self.entries.get(key)
        if entry is None:
            static = self.device.buffers(*key)
            graph, out = self.device.capture(self.forward, static)
            entry = self.entries[key] = _Entry(static, graph, out)
        for name in INPUTS:
            buf = entry.static[name]
            buf.zero_()  # padding rows and positions: id 0 ([PAD]), mask 0, type 0
            buf[:rows, :seq].copy_(torch.from_numpy(batch[name]), non_blocking=True)
        self.device.replay(entry.graph)
        self.replays += 1
        out = unpad(entry.out, rows, seq)  # the captured shape's padded rows (and positions) go
        return out.float().cpu().numpy()  # .cpu() waits for the replay


def graph_forward(model) -> Callable[..., torch.Tensor]:
    """The model's logits from 2-D inputs, written so that it can be captured: the mask goes
    in as (batch, query, key). With a 2-D mask BERT's SDPA path first asks the host whether
    every position is real (`torch.all(mask == 1)`) to drop the mask: a device-to-host sync,
    illegal while a stream is captured, and a branch a graph would freeze."""
    def forward(input_ids, attention_mask, token_type_ids):
        seq = attention_mask.shape[1]
        mask = attention_mask[:, None, :].expand(-1, seq, -1)  # (batch, seq) -> (batch, seq, seq)
        return model(input_ids=input_ids, attention_mask=mask, token_type_ids=token_type_ids).logits
    return forward


class CudaGraphRunner:
    """A PyTorch artifact replayed from CUDA graphs on the GPU (FP16 by default; the
    artifact's precision says). Same interface as compress.backends.base' runners; registered as the
    `pytorch_cudagraph` format (gpu target only)."""
    backend = "pytorch-cudagraph-gpu"

    def __init__(self, artifact, target: str, threads: int, device: GraphDevice | None = None):
        from compress.backends.pytorch import load_torch_model

        reason = self.unavailable(target) if device is None else None
        if reason:
            raise RuntimeError(f"{artifact.name}: {reason}")
        torch.set_num_threads(threads)
        where = torch.device("cuda") if device is None else torch.device("cpu")
        self.model, self.tokenizer, self.num_params = load_torch_model(artifact, where)
        self.num_labels = self.model.config.num_labels
        self.device = device or CudaDevice(where)
        self.cache = GraphCache(graph_forward(self.model), self.device)

    @staticmethod
    def unavailable(target: str) -> str | None:
        if target != "gpu":
            return "CUDA graphs replay on NVIDIA GPUs only"
        from compress.backends.pytorch import cuda_unavailable

        return cuda_unavailable()

    @torch.inference_mode()
    def __call__(self, batch: dict[str, np.ndarray]) -> np.ndarray:
        return self.cache(batch)

    def synchronize(self) -> None:
        self.device.synchronize()
