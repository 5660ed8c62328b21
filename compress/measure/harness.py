"""The measurement harness: accuracy, latency and memory of one artifact on one target.

`measure(artifact, prepared, cfg)` returns one report record per target. Each target is
measured in a fresh child process, so the peak resident memory it reports is that of
loading and running this artifact (not of the training that preceded it in the stage),
and one measurement cannot warm caches or leak threads into the next.

Latency: for every configured (batch, seq) point, real dev sentences are tokenized and
padded to exactly `seq` tokens, run `warmup_queries` times untimed, then timed one query
at a time until both `min_queries` and `min_duration_s` are reached (capped by
`max_duration_s`). Reported: p50/p90/p99/mean in ms per query and throughput in
sequences/s. Threads are pinned to `threads` and recorded.

Real-length throughput (`dev_stream_repeats` > 0, set by the benchmark stage): the whole
dev split classified exactly as `compress predict` does it (tokenize, length-sorted
batches of 32, each padded to its longest row), once untimed, then `dev_stream_repeats`
timed passes; the median pass gives `dev_stream_seq_per_s`. Fixed 128-token points
overstate the cost of real, short sentences ~8x; this is the figure a batch job sees.

GPU memory: torch's CUDA peak is reset before the accuracy pass and before each latency
point and read after it, so a point that does not fit (CUDA out of memory) cannot leak
its failed allocations into the record's `peak_gpu_mem_mb`, which is the largest peak of
the passes that ran.

Intervals: every metric of the accuracy pass gets its 95% percentile bootstrap interval
over the dev rows (`<metric>_ci95_low/_high`, `compress.measure.metrics.bootstrap_ci`, 2,000
resamples at seed 0, so an unchanged model gives an unchanged report).

Validation (`validation`, on by default): the accuracy pass also scores the prepared
validation split (capped at 2,000 rows by prepare, and at `eval_max_rows` like dev) through
the same runner, tokenizer and batches: `validation_metrics` (metrics and intervals, keyed
as on the record), `validation_rows`, `validation_sha256` (compress.measure.validation).
`select` chooses on these; dev only reports. Data without a validation split: None.
"""
from __future__ import annotations

import multiprocessing as mp
import queue as queue_module
import resource
import time
import traceback
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from compress.core.config import check
from compress.data.prepare import Prepared
from compress.core.io import sha256_file
from compress.measure.metrics import task_ci95, task_metrics
from compress.report.schema import HEADLINE_LATENCY, HEADLINE_THROUGHPUT, LatencyPoint, Record
from compress.backends import registry
from compress.backends.base import Artifact, skip_reason
from compress.backends.pytorch import cuda_unavailable

TARGETS = ("cpu", "gpu")


@dataclass(frozen=True)
class MeasureConfig:
    targets: list[str] = field(default_factory=lambda: ["cpu", "gpu"])
    points: list[list[int]] = field(default_factory=lambda: [[1, 128], [32, 128]])
    eval_max_length: int = 128
    eval_batch_size: int = 64
    eval_max_rows: int | None = None  # None: the whole dev split
    warmup_queries: int = 5
    # A stage's own latency is a same-run check against the teacher; the benchmark stage
    # measures every artifact again, one after another, for the comparison. One second
    # of queries (~70 at 1x128 for the slowest, the ~14 ms teacher) settles the p50.
    min_queries: int = 20
    min_duration_s: float = 1.0
    max_duration_s: float = 60.0
    threads: int = 2
    isolate: bool = True  # measure in a child process (honest peak memory)
    gpu_fp16: bool = True  # on the gpu target, also run each PyTorch FP32 artifact cast to FP16
    # on the gpu target, also run each PyTorch FP32 artifact replayed from CUDA graphs
    # (`<name>_cudagraph` in FP16, `<name>_cudagraph_fp32`): launch overhead removed
    gpu_cudagraph: list[str] = field(default_factory=lambda: ["fp16"])
    dev_stream_repeats: int = 0  # >0: timed passes of the whole dev split as `compress predict` runs it
    dev_stream_batch_size: int = 32
    real_length_rows: int = 0  # >0: batch-1 latency over that many dev rows, each at its own length
    validation: bool = True  # also score the validation split (what select chooses on); the benchmark keeps none

    def __post_init__(self):
        check(len(self.targets) > 0, "targets must name at least one of " + ", ".join(TARGETS))
        for t in self.targets:
            check(t in TARGETS, f"unknown target '{t}': choose from {', '.join(TARGETS)}")
        check(len(set(self.targets)) == len(self.targets), f"targets repeat: {self.targets}")
        for p in self.points:
            check(len(p) == 2 and p[0] >= 1 and p[1] >= 2,
                  f"each point is [batch >= 1, seq >= 2], got {p}")
        check(self.eval_max_length >= 8, f"eval_max_length must be >= 8, got {self.eval_max_length}")
        check(self.eval_batch_size >= 1, f"eval_batch_size must be >= 1, got {self.eval_batch_size}")
        check(self.eval_max_rows is None or self.eval_max_rows >= 1, "eval_max_rows must be >= 1 or null")
        check(self.warmup_queries >= 0, f"warmup_queries must be >= 0, got {self.warmup_queries}")
        check(self.min_queries >= 1, f"min_queries must be >= 1, got {self.min_queries}")
        check(self.min_duration_s >= 0, f"min_duration_s must be >= 0, got {self.min_duration_s}")
        check(self.max_duration_s >= self.min_duration_s,
              f"max_duration_s ({self.max_duration_s}) must be >= min_duration_s ({self.min_duration_s})")
        check(self.threads >= 1, f"threads must be >= 1, got {self.threads}")
        check(self.dev_stream_repeats >= 0, f"dev_stream_repeats must be >= 0, got {self.dev_stream_repeats}")
        check(all(p in ("fp16", "fp32") for p in self.gpu_cudagraph) and
              len(set(self.gpu_cudagraph)) == len(self.gpu_cudagraph),
              f"gpu_cudagraph lists precisions of the CUDA-graph rows, fp16 and/or fp32 (empty: none), "
              f"got {self.gpu_cudagraph}")
        check(self.dev_stream_batch_size >= 1,
              f"dev_stream_batch_size must be >= 1, got {self.dev_stream_batch_size}")
        check(self.real_length_rows >= 0, f"real_length_rows must be >= 0, got {self.real_length_rows}")


def gpu_skip_reason() -> str | None:
    """None when a CUDA device can be used, else why the gpu target is skipped."""
    return cuda_unavailable()


def _rss_mb() -> float:
    """Peak resident memory of this process in MiB.

    Linux: VmHWM, the high-water mark of this process image. Not getrusage's ru_maxrss:
    that survives execve, so a child spawned from a big training process would report
    the parent's footprint as its own.
    """
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024  # kB
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # other Unixes: KiB


def time_queries(run, batch, warmup: int, min_queries: int, min_s: float, max_s: float,
                 sync=lambda: None, progress=None) -> np.ndarray:
    """Per-query seconds after `warmup` untimed calls; runs until min count and min time."""
    for _ in range(warmup):
        run(batch)
    sync()
    times = []
    start = time.perf_counter()
    while True:
        t = time.perf_counter()
        run(batch)
        sync()
        times.append(time.perf_counter() - t)
        if progress is not None:
            progress.update(1)
        elapsed = time.perf_counter() - start
        if (len(times) >= min_queries and elapsed >= min_s) or elapsed >= max_s:
            break
    return np.asarray(times)


def latency_point(times: np.ndarray, batch: int, seq: int) -> LatencyPoint:
    ms = times * 1000.0
    return LatencyPoint(
        batch_size=batch, seq_len=seq, status="ok", reason=None,
        latency_ms_p50=round(float(np.percentile(ms, 50)), 4),
        latency_ms_p90=round(float(np.percentile(ms, 90)), 4),
        latency_ms_p99=round(float(np.percentile(ms, 99)), 4),
        latency_ms_mean=round(float(ms.mean()), 4),
        throughput_seq_per_s=round(batch * len(times) / float(times.sum()), 2),
        queries=len(times), duration_s=round(float(times.sum()), 3),
    )


def _is_oom(e: BaseException) -> bool:
    return "out of memory" in str(e).lower()


class CudaMemory:
    """torch's CUDA allocator peak, reset per pass (other backends allocate outside it)."""

    def reset(self) -> None:
        import torch

        torch.cuda.reset_peak_memory_stats()

    def peak_mb(self) -> float:
        import torch

        return round(torch.cuda.max_memory_allocated() / 2**20, 1)

    def release(self) -> None:
        import torch

        torch.cuda.empty_cache()


def latency_points(runner, make_batch, cfg: MeasureConfig, target: str, progress=None,
                   gpu_memory=None) -> list[LatencyPoint]:
    """Time every (batch, seq) point of cfg.points; make_batch(batch, seq) builds the inputs.

    On the gpu target a CUDA out-of-memory error makes that point `does_not_fit` (with
    the message) and the next points still run; any other error propagates. gpu_memory
    (a CudaMemory, or a fake in tests): reset before each point, its peak read into the
    point after it; a point that did not fit gets none."""
    points = []
    for batch_size, seq in cfg.points:
        if gpu_memory is not None:
            gpu_memory.reset()
        try:
            times = time_queries(runner, make_batch(batch_size, seq), cfg.warmup_queries, cfg.min_queries,
                                 cfg.min_duration_s, cfg.max_duration_s, runner.synchronize, progress)
            point = latency_point(times, batch_size, seq)
            if gpu_memory is not None:
                point = replace(point, peak_gpu_mem_mb=gpu_memory.peak_mb())
            points.append(point)
        except RuntimeError as e:
            if target != "gpu" or not _is_oom(e):
                raise
            if gpu_memory is not None:
                gpu_memory.release()
            points.append(LatencyPoint(batch_size=batch_size, seq_len=seq, status="does_not_fit",
                                       reason=f"CUDA out of memory: {str(e).splitlines()[0]}"))
    return points


def record_gpu_peak(accuracy_peak_mb: float | None, points: list[LatencyPoint]) -> float | None:
    """The record's peak GPU memory: the accuracy pass and the points that ran, never a
    point that did not fit."""
    peaks = [p.peak_gpu_mem_mb for p in points if p.status == "ok" and p.peak_gpu_mem_mb is not None]
    peaks += [accuracy_peak_mb] if accuracy_peak_mb is not None else []
    return max(peaks) if peaks else None


def dev_stream_throughput(runner, task, examples: list, cfg: MeasureConfig) -> float:
    """Sentences/s over the whole dev split, classified as `compress predict` does it
    (tokenization included): one untimed pass, then the median of cfg.dev_stream_repeats."""
    from compress.stream import Loaded, predict_stream

    loaded = Loaded(runner, task, [str(i) for i in range(runner.num_labels)], None)

    def one_pass() -> float:
        t = time.perf_counter()
        for _ in predict_stream(loaded, examples, cfg.dev_stream_batch_size, cfg.eval_max_length):
            pass
        runner.synchronize()
        return time.perf_counter() - t

    one_pass()  # warm-up: shape-specialising backends (OpenVINO, TensorRT) see every batch shape once
    seconds = sorted(one_pass() for _ in range(cfg.dev_stream_repeats))
    return round(len(examples) / float(np.median(seconds)), 1)


def real_length_latency(runner, enc, rows: int) -> tuple[float, float]:
    """(p50, p99) ms of batch-1 queries over the first `rows` rows of `enc` (encoded dev
    texts), each at its own length: no padding, as an interactive request arrives. One
    untimed pass first (shape-specialising backends see each length once), then one timed
    query per row; the model call only, as at the fixed points."""
    from compress.data.tokens import collate

    idx = list(range(min(rows, len(enc))))
    for i in idx:
        runner(collate(enc, [i]))
    runner.synchronize()
    ms = []
    for i in idx:
        batch = collate(enc, [i])  # (1, its own length)
        t = time.perf_counter()
        runner(batch)
        runner.synchronize()
        ms.append(1000 * (time.perf_counter() - t))
    return round(float(np.percentile(ms, 50)), 4), round(float(np.percentile(ms, 99)), 4)


def _validation(runner, prepared: Prepared, cfg: MeasureConfig) -> dict:
    """The record's validation fields, scored as the dev accuracy pass is (all None when
    cfg.validation is off or the data has no validation split)."""
    from compress.data.tokens import eval_batches, position_logits
    from compress.measure.validation import NONE, validation_fields

    def logits_of(enc):
        return position_logits(enc, eval_batches(enc.lengths(), cfg.eval_batch_size), runner, runner.num_labels)

    if not cfg.validation:
        return dict(NONE)
    return validation_fields(prepared, runner.tokenizer, cfg.eval_max_length, cfg.eval_max_rows, logits_of)


def _measure_in_process(artifact: Artifact, prepared_root: Path, target: str, cfg: MeasureConfig,
                        parent_predictions: list[int] | None = None) -> tuple[dict, list[int]]:
    """Measure one target in this process; returns a Record as a dict and the dev predictions."""
    import torch
    from tqdm.auto import tqdm

    from compress.backends.base import load_runner
    from compress.data.tokens import collate, encode, eval_batches, position_logits

    torch.set_num_threads(cfg.threads)
    prepared = Prepared.open(prepared_root)
    dev = prepared.split("dev")
    if cfg.eval_max_rows:
        dev = dev[: cfg.eval_max_rows]
    base_mb = _rss_mb()
    runner = load_runner(artifact, target, cfg.threads)
    # torch's allocator only sees PyTorch's own CUDA memory; other backends report None
    gpu_memory = (CudaMemory() if target == "gpu" and torch.cuda.is_available()
                  and runner.backend.startswith("pytorch") else None)
    if gpu_memory is not None:
        gpu_memory.reset()

    # Accuracy: the whole dev split through the runner, same tokenizer as latency below;
    # logits of every scored position (a row, or each kept word's first piece).
    task = prepared.task
    enc = encode(runner.tokenizer, dev, cfg.eval_max_length)
    batches = tqdm(eval_batches(enc.lengths(), cfg.eval_batch_size),
                   desc=f"{artifact.name}/{target} accuracy", unit="batch", leave=False)
    logits = position_logits(enc, batches, runner, runner.num_labels)
    metrics = task_metrics(task, enc, logits)
    validation = _validation(runner, prepared, cfg)  # the same pass on the split select chooses on
    accuracy_gpu_peak = gpu_memory.peak_mb() if gpu_memory is not None else None
    predictions = logits.argmax(axis=1)
    # 95% bootstrap intervals of every metric the task reports, at a fixed seed (reproducible)
    intervals = task_ci95(task, enc, predictions) if len(enc) else {}
    details = task.kind_impl.details(task, enc, predictions)
    agreement = None
    if parent_predictions is not None:
        if len(parent_predictions) != len(predictions):
            raise ValueError(f"parent predictions cover {len(parent_predictions)} rows, this run {len(predictions)}")
        agreement = round(float((predictions == np.asarray(parent_predictions)).mean()), 6)

    # Latency: real sentences, truncated/padded to exactly seq tokens.
    def make_batch(batch_size: int, seq: int) -> dict[str, np.ndarray]:
        enc_seq = encode(runner.tokenizer, dev, seq)
        return collate(enc_seq, [i % len(enc_seq) for i in range(batch_size)], pad_to=seq)

    # No total: each point runs until both min_queries and min_duration_s are reached.
    with tqdm(desc=f"{artifact.name}/{target} latency", unit="query", leave=False, mininterval=1.0) as bar:
        points = latency_points(runner, make_batch, cfg, target, bar, gpu_memory)
    # the real-length figures take the whole split, whatever eval_max_rows says
    full_dev = prepared.split("dev") if cfg.real_length_rows or cfg.dev_stream_repeats else []
    real = (None, None)
    if cfg.real_length_rows:
        real = real_length_latency(runner, encode(runner.tokenizer, full_dev[: cfg.real_length_rows],
                                                  cfg.eval_max_length), cfg.real_length_rows)
    stream = None
    if cfg.dev_stream_repeats:
        stream = dev_stream_throughput(runner, prepared.task, full_dev, cfg)

    weights = artifact.weight_files()
    rec = Record(
        artifact=artifact.name, target=target, status="ok", reason=None,
        backend=runner.backend, format=artifact.format, precision=artifact.precision,
        task=prepared.task.name, primary_metric=task.primary_metric, accuracy=metrics.get("accuracy"),
        f1=metrics.get("f1"), macro_f1=metrics.get("macro_f1"), metrics=dict(metrics), **intervals,
        token_accuracy=metrics.get("token_accuracy"), f1_per_type=details.get("f1_per_type"),
        eval_rows=len(enc), parent=artifact.parent, path=str(artifact.path), agreement_with_parent=agreement,
        size_mb=round(sum(f.stat().st_size for f in weights) / 2**20, 3),
        num_params=int(runner.num_params),
        peak_mem_mb=round(_rss_mb(), 1), baseline_mem_mb=round(base_mb, 1),
        peak_gpu_mem_mb=record_gpu_peak(accuracy_gpu_peak, points) if gpu_memory is not None else None,
        dev_stream_seq_per_s=stream, real_latency_ms_p50=real[0], real_latency_ms_p99=real[1],
        threads=torch.get_num_threads(),
        artifact_sha256=sha256_file(weights[0]),
        data_sha256=prepared.sha256("dev"), **validation,
        points=points,
    )
    return rec.with_headline(HEADLINE_LATENCY, HEADLINE_THROUGHPUT).to_dict(), predictions.tolist()


def _child(args, queue, plugins: list[str] = ()) -> None:
    try:
        registry.load_plugins(plugins)  # a fresh interpreter: backends registered outside compress/
        queue.put(("ok", _measure_in_process(*args)))
    except BaseException as e:  # send the failure to the parent, which raises it
        queue.put(("error", f"{type(e).__name__}: {e}\n{traceback.format_exc()}"))


def _measure_isolated(artifact: Artifact, prepared_root: Path, target: str, cfg: MeasureConfig,
                      parent_predictions: list[int] | None = None) -> tuple[dict, list[int]]:
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_child, args=((artifact, prepared_root, target, cfg, parent_predictions), queue,
                                            registry.plugin_modules()))
    proc.start()
    try:
        while True:  # a child that dies without reporting (killed, segfault) must not hang us
            try:
                status, payload = queue.get(timeout=1.0)
                break
            except queue_module.Empty:
                if not proc.is_alive():
                    status, payload = "error", (f"the child process exited with code {proc.exitcode} "
                                                "before reporting (killed, out of memory, or crashed)")
                    break
    finally:
        proc.join()
    if status != "ok":
        raise RuntimeError(f"measuring {artifact.name} on {target} failed in the child process:\n{payload}")
    return payload


def measure(artifact: Artifact, prepared_root: str | Path, cfg: MeasureConfig,
            parent_predictions: list[int] | None = None,
            predictions_out: dict[str, list[int]] | None = None) -> list[dict]:
    """One record per target in cfg.targets; a target that cannot run here (no CUDA, no
    TensorRT, a format with no kernels on that device) is `skipped` with the reason, never
    an error.

    parent_predictions: the parent artifact's dev predictions (argmax, CPU); each record
    then carries `agreement_with_parent`. predictions_out: filled with this artifact's dev
    predictions per measured target, to pass on to the artifacts derived from it.
    """
    prepared_root = Path(prepared_root)
    records = []
    for target in cfg.targets:
        reason = skip_reason(artifact, target)
        if reason:
            records.append(Record.skipped(artifact.name, target, reason, artifact.format,
                                          artifact.precision, str(artifact.path)).to_dict())
            continue
        fn = _measure_isolated if cfg.isolate else _measure_in_process
        record, predictions = fn(artifact, prepared_root, target, cfg, parent_predictions)
        records.append(record)
        if predictions_out is not None:
            predictions_out[target] = predictions
    return records


def measure_with_reference(artifacts: list[Artifact], references: list[Artifact], prepared_root: str | Path,
                           cfg: MeasureConfig) -> tuple[list[dict], dict]:
    """Measure a stage's artifacts and, in the same run, the artifacts they are compared with.

    Ratios only compare numbers from one run (shared machines drift between runs), so the
    references (the teacher for the student, the float parent of an INT8 model ...) are
    measured here again. Each artifact whose `parent` was measured before it in this call
    (a reference or an earlier artifact) gets `agreement_with_parent`, and its p50 speedup
    over that parent per target and point lands in details["speedup_vs_parent"]. On the
    gpu target a PyTorch FP32 artifact is also measured cast to FP16 (`<name>_fp16`) when
    cfg.gpu_fp16, and replayed from CUDA graphs (`<name>_cudagraph`, FP16;
    `<name>_cudagraph_fp32`) for each precision in cfg.gpu_cudagraph; without CUDA these
    rows are skipped with the reason, like every GPU row.

    Returns (records of `artifacts`, details) with details["same_run_reference"] holding the
    references' records, and details[f"speedup_vs_{name}"] for the first reference.
    """
    predictions: dict[str, list[int]] = {}  # artifact -> CPU dev predictions
    by_name: dict[str, list[dict]] = {}
    ref_records: list[dict] = []
    for ref in references:
        out: dict[str, list[int]] = {}
        by_name[ref.name] = measure(ref, prepared_root, cfg, parent_predictions=predictions.get(ref.parent),
                                    predictions_out=out)
        ref_records += by_name[ref.name]
        if "cpu" in out:
            predictions[ref.name] = out["cpu"]
    records: list[dict] = []
    for art in artifacts:
        out = {}
        mine = measure(art, prepared_root, cfg, parent_predictions=predictions.get(art.parent), predictions_out=out)
        by_name[art.name] = mine
        if "cpu" in out:
            predictions[art.name] = out["cpu"]
        if "gpu" in cfg.targets and art.format == "pytorch" and art.precision == "fp32":
            variants = [Artifact(f"{art.name}_fp16", art.path, "pytorch", "fp16", parent=art.name)] * cfg.gpu_fp16
            variants += [Artifact(f"{art.name}_cudagraph" + ("" if p == "fp16" else f"_{p}"), art.path,
                                  "pytorch_cudagraph", p, parent=art.name) for p in cfg.gpu_cudagraph]
            for v in variants:  # agreement with the eager FP32 parent's CPU predictions
                mine = mine + measure(v, prepared_root, replace(cfg, targets=["gpu"]),
                                      parent_predictions=predictions.get(art.name))
        records += mine
    from compress.report.schema import speedups

    details: dict = {}
    if references:
        details["same_run_reference"] = ref_records
        details[f"speedup_vs_{references[0].name}"] = speedups(records, by_name[references[0].name])
    vs_parent = {}
    for art in artifacts:
        if art.parent in by_name:
            vs_parent.update(speedups([r for r in records if r["artifact"] == art.name], by_name[art.parent]))
    if vs_parent:
        details["speedup_vs_parent"] = vs_parent
    return records, details
