"""Run one job in a second process while this one works on another.

Two small models trained one after the other on a 2-core machine waste about a third of
it: a step of a 3-layer student is mostly small kernels and optimizer bookkeeping, and a
second intra-op thread speeds it up only ~1.35x (SST-2 student on the AMX Xeon: 71 ms a
step on 2 threads, 96 ms on 1). Two processes of one thread each finish the pair in ~0.69x
the time. Each job's results are what it gives on its own with the same thread count:
nothing is shared but the machine.

The job runs in a fresh interpreter (the spawn start method: forking a process whose
OpenMP pool is running can hang the child), so `fn` must be a module-level function and
its arguments picklable. A failure in the job is raised here, with its traceback; a failure
here (or Ctrl-C) stops the job, whose half-written outputs its own atomic writers remove.
"""
from __future__ import annotations

import multiprocessing
import signal
import sys
import traceback
from typing import Any, Callable

import torch


def _child(conn, fn: Callable, args: tuple, threads: int) -> None:
    # SIGTERM (Alongside.stop) becomes SystemExit, so atomic_dir's cleanup runs
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    torch.set_num_threads(threads)
    try:
        result = ("ok", fn(*args))
    except (SystemExit, KeyboardInterrupt):
        raise  # stopped: nobody waits for a result
    except BaseException as e:  # noqa: BLE001 - every failure goes back to the parent
        result = ("error", e, traceback.format_exc())
    try:
        conn.send(result)
    except Exception as e:  # an exception that does not pickle: send its text
        conn.send(("error", RuntimeError(f"{type(result[1]).__name__}: {result[1]}"), result[-1])
                  if result[0] == "error" else ("error", e, traceback.format_exc()))
    conn.close()


class Alongside:
    """`with Alongside(fn, args, threads=1, name="control") as job: ...; r = job.result()`.

    The job starts on entering the block with `threads` intra-op threads; `result()` waits
    for it and returns `fn(*args)` or raises the job's exception. Leaving the block by an
    exception stops the job first."""

    def __init__(self, fn: Callable, args: tuple, threads: int, name: str):
        self.fn, self.args, self.threads, self.name = fn, args, threads, name
        self._proc = None
        self._conn = None

    def __enter__(self) -> "Alongside":
        ctx = multiprocessing.get_context("spawn")
        self._conn, child_conn = ctx.Pipe(duplex=False)
        # daemon: if this process exits without waiting, the job does not outlive it
        self._proc = ctx.Process(target=_child, args=(child_conn, self.fn, self.args, self.threads),
                                 name=self.name, daemon=True)
        self._proc.start()
        child_conn.close()  # ours closed: recv() sees EOF if the child dies without sending
        return self

    def result(self) -> Any:
        try:
            message = self._conn.recv()
        except EOFError:
            self._proc.join()
            raise RuntimeError(f"the {self.name} process ended without a result (exit code "
                               f"{self._proc.exitcode}: killed or out of memory?)") from None
        self._proc.join()
        if message[0] == "ok":
            return message[1]
        _, error, tb = message
        error.add_note(f"raised in the {self.name} process:\n{tb}")
        raise error

    def stop(self) -> None:
        if self._proc is not None and self._proc.is_alive():
            self._proc.terminate()
            self._proc.join(timeout=30)
            if self._proc.is_alive():
                self._proc.kill()
                self._proc.join()

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            self.stop()
        elif self._proc is not None and self._proc.is_alive():  # result() was never asked for
            self.stop()
        if self._conn is not None:
            self._conn.close()
