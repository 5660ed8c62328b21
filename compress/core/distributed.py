"""Data parallelism over several processes and machines: torchrun starts the processes and
runs the rendezvous, DistributedDataParallel all-reduces the gradients. Nothing here
replaces either; this module holds what the stages need around them.

- `LaunchConfig`: the `launch` params section, validated when built.
- `relaunch`: a stage started as one process (the one-line `dvc.yaml` command) restarts
  itself under torchrun's launcher when the config asks for several; a rank that fails
  stops them all and the launcher's report is turned into one error naming the rank.
- Inside the ranks: `rank()`, `world()`, `is_main()`, `shard()`, `gather_rows()`,
  `barrier()`, `output_dir()` (only rank 0 writes; the others write into a throwaway).

With one process nothing of this runs: no process group, no wrapper, no collective, so
the single-process path is today's code, bit for bit.
"""
from __future__ import annotations

import os
import signal
import socket
import sys
import tempfile
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np
import torch
import torch.distributed as dist

from compress.core.config import check
from compress.core.errors import UserError
from compress.core.io import atomic_dir

BACKENDS = ("auto", "gloo", "nccl")


@dataclass(frozen=True)
class LaunchConfig:
    nproc_per_node: int = 1  # processes on each machine (one per GPU on a GPU machine)
    nnodes: int = 1  # machines; > 1 needs the same rdzv_endpoint and rdzv_id on every one
    rdzv_endpoint: str | None = None  # host:port of the rendezvous (several machines only)
    rdzv_id: str = "compress"  # names the job at the rendezvous: unique per concurrent run
    backend: str = "auto"  # auto: nccl when CUDA is available, else gloo
    threads_per_proc: int | None = None  # null: the stage's threads / nproc_per_node (at least 1)

    def __post_init__(self):
        check(self.nproc_per_node >= 1, f"nproc_per_node must be >= 1, got {self.nproc_per_node}")
        check(self.nnodes >= 1, f"nnodes must be >= 1, got {self.nnodes}")
        check(self.backend in BACKENDS, f"backend must be one of {', '.join(BACKENDS)}, got '{self.backend}'")
        check(self.nnodes == 1 or bool(self.rdzv_endpoint),
              f"rdzv_endpoint (host:port of the rendezvous) is needed when nnodes is {self.nnodes}")
        check(self.threads_per_proc is None or self.threads_per_proc >= 1,
              f"threads_per_proc must be >= 1 or null, got {self.threads_per_proc}")
        if self.world_size > 1 and self.backend == "nccl":
            check(torch.cuda.is_available(),
                  "backend 'nccl' needs CUDA GPUs and this machine has none: use 'gloo' or 'auto'")
            check(torch.cuda.device_count() >= self.nproc_per_node,
                  f"nproc_per_node {self.nproc_per_node} with backend 'nccl' needs as many GPUs; "
                  f"this machine has {torch.cuda.device_count()}")

    @property
    def world_size(self) -> int:
        return self.nproc_per_node * self.nnodes

    def resolved_backend(self) -> str:
        if self.backend == "auto":
            return "nccl" if torch.cuda.is_available() and torch.cuda.device_count() >= self.nproc_per_node \
                else "gloo"
        return self.backend

    def check_batch(self, batch_size: int, key: str) -> None:
        """Each rank takes a share of every global batch: more ranks than rows in a batch
        would leave ranks with nothing to learn from."""
        if self.world_size > batch_size:
            raise UserError(f"launch: {self.world_size} ranks (nproc_per_node x nnodes) exceed {key} = "
                            f"{batch_size}: each rank needs rows of every batch; lower the ranks or "
                            "raise the batch size")


# --- the launcher side ----------------------------------------------------------------------

def under_torchrun() -> bool:
    return "TORCHELASTIC_RUN_ID" in os.environ and "LOCAL_RANK" in os.environ


def relaunch(cfg: LaunchConfig, module: str) -> None:
    """Run `python -m module` under torchrun's launcher with cfg's processes; return when
    every rank succeeded, else raise UserError naming the first failed rank."""
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig as TorchLaunchConfig, elastic_launch

    if cfg.nnodes == 1:  # what `torchrun --standalone` does: a private store on a free port
        endpoint, run_id = "localhost:0", str(uuid.uuid4())
    else:
        endpoint, run_id = cfg.rdzv_endpoint, cfg.rdzv_id
    launch = TorchLaunchConfig(
        min_nodes=cfg.nnodes, max_nodes=cfg.nnodes, nproc_per_node=cfg.nproc_per_node,
        run_id=run_id, rdzv_endpoint=endpoint, rdzv_backend="c10d",
        max_restarts=0,  # a stage is not elastic: a failed rank fails the stage
        monitor_interval=0.5, start_method="spawn")
    print(f"launch: {cfg.world_size} ranks ({cfg.nnodes} node(s) x {cfg.nproc_per_node}), "
          f"backend {cfg.resolved_backend()}, running `python -m {module}` under torchrun", flush=True)
    try:
        elastic_launch(launch, entrypoint=sys.executable)("-m", module)
    except ChildFailedError as e:
        rank, failure = e.get_first_failure()
        how = (f"was killed by signal {signal.Signals(-failure.exitcode).name}" if failure.exitcode < 0
               else f"exited with code {failure.exitcode}")
        raise UserError(f"rank {rank} of {cfg.world_size} {how} on {socket.gethostname()} "
                        f"(its error is printed above); torchrun stopped the other ranks and the stage "
                        "wrote nothing: what an earlier run built is unchanged") from None


# --- inside a rank ----------------------------------------------------------------------------

_launch: LaunchConfig | None = None  # the job's config, inside a torchrun rank


@contextmanager
def process_group(cfg: LaunchConfig) -> Iterator[None]:
    """Join the torchrun job (a no-op outside torchrun) for the duration of a stage."""
    global _launch
    if not under_torchrun():
        yield
        return
    # torchrun stops the ranks with SIGTERM when one fails: exit through Python so that
    # temporary outputs are removed by their context managers (compress.core.io)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    backend = cfg.resolved_backend()
    if backend == "nccl":
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group(backend)
    _launch = cfg
    try:
        yield
    finally:
        _launch = None
        dist.destroy_process_group()


def active() -> bool:
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def rank() -> int:
    return dist.get_rank() if active() else 0


def world() -> int:
    return dist.get_world_size() if active() else 1


def is_main() -> bool:
    return rank() == 0


def threads(stage_threads: int) -> int:
    """Intra-op threads for this process: the stage's own; under torchrun
    launch.threads_per_proc, by default the stage's threads shared by the node's ranks."""
    if not (active() and _launch):
        return stage_threads
    return _launch.threads_per_proc or max(1, stage_threads // _launch.nproc_per_node)


def device() -> torch.device:
    """Where this rank trains: its GPU under nccl, else the CPU (today's single process)."""
    if active() and dist.get_backend() == "nccl":
        return torch.device("cuda", int(os.environ["LOCAL_RANK"]))
    return torch.device("cpu")


def barrier() -> None:
    if active():
        dist.barrier()


def shard(items: Sequence) -> Sequence:
    """This rank's share of a sequence: items rank, rank + world, ..."""
    return items[rank()::world()] if active() else items


def gather_rows(out: np.ndarray) -> np.ndarray:
    """Every rank filled only its own rows of `out` (zeros elsewhere): sum over ranks
    gives the whole array, in dataset order, on every rank (x + 0 is exact)."""
    if not active():
        return out
    t = torch.from_numpy(np.ascontiguousarray(out))
    if dist.get_backend() == "nccl":
        t = t.to(device())
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return t.cpu().numpy()


def all_sum(value: float) -> float:
    if not active():
        return value
    t = torch.tensor([value], dtype=torch.float64, device=device())
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return float(t.item())


@contextmanager
def output_dir(path: str | Path) -> Iterator[Path]:
    """Rank 0: `atomic_dir(path)`. Other ranks compute the same things but must not write:
    they get a throwaway directory."""
    if is_main():
        with atomic_dir(path) as tmp:
            yield tmp
    else:
        with tempfile.TemporaryDirectory(prefix=f"rank{rank()}-") as tmp:
            yield Path(tmp)
