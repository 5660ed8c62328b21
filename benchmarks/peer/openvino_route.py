"""The openvino check: the project's OpenVINO artifacts (``student_ov`` FP32 IR,
``student_ov_bf16`` the same IR run at bf16, ``student_ov_int8``; ``--project-ov``,
``--project-ov-int8``) against optimum-intel's FP32 IR and static INT8
(benchmarks.peer.openvino_build).

Every route, project and peer, is measured by the project's harness itself,
``compress.measure.harness.measure`` (the benchmark stage's accuracy pass and latency points
[1, ``--seq``] and [``--batch``, ``--seq``], same dev sentences), through a runner: the
project's via ``compress.backends.base.load_runner(Artifact(name, path, "openvino", precision))``,
optimum-intel's via benchmarks.peer.runner.OptimumIntelRunner (compiled with the project
row's runtime settings, benchmarks.peer.openvino_runtime), whose format is registered with
compress.backends.registry for the duration of the check (`peer_runner_registered`).
Measurement runs in this process (``isolate=False``; peak memory is not compared) in
``--rounds`` interleaved rounds (project fp32, peer fp32, project bf16, ...): round 1 runs
the whole dev split; later rounds only re-time. Reported: accuracy, p50 ms at 1 x ``--seq``
(median of the round p50s), sequences/s at ``--batch`` x ``--seq`` (all rounds pooled),
size on disk (model.xml + model.bin), prediction agreement project vs peer, and the
inference precision each compiled model reports. Missing project artifacts (no
``dvc repro`` yet) are reported as such and the peer is still measured.

Refused: a project IR the project's runner cannot load for another reason than a missing
file (InputError); a peer route that cannot be registered, loaded or measured (PeerBuildError).
"""
from __future__ import annotations

import contextlib
import dataclasses
import gc
import math
import sys
from pathlib import Path

import numpy as np

from .common import InputError, PeerBuildError, speed_verdict
from .openvino_build import build_optimum_intel, calibration_rows
from .openvino_runtime import (OV_PEER_FORMAT, compiled_properties, default_runtime, find_compiled_model,
                               optimum_intel_default_precision, peer_ov_config, project_runtime, write_peer_runtime)

# The OpenVINO check: (precision, project artifact, optimum-intel artifact), measured in this order.
OV_PAIRS = (("fp32", "student_ov", "optimum_intel_ov"),
            ("bf16", "student_ov_bf16", "optimum_intel_ov_bf16"),
            ("int8", "student_ov_int8", "optimum_intel_ov_int8"))
OV_BUILD_HINT = ("the project's OpenVINO artifacts are built by the openvino stage "
                 "(compress/backends/openvino_ir.py; dvc repro)")


@contextlib.contextmanager
def peer_runner_registered():
    """The peer format (OV_PEER_FORMAT -> OptimumIntelRunner) registered with
    compress.backends.registry for the duration, so compress.measure.harness.measure loads it
    like any project runner, here or in a spawned child (which re-imports
    benchmarks.peer.runner); unregistered after, so a long-lived process (a test session)
    does not keep it. Yields the descriptor."""
    from compress.backends import registry

    from . import runner  # its first import registers the format

    backend = registry.register(runner.BACKEND, module=runner.BACKEND.module)  # again, after an earlier exit
    try:
        yield backend
    finally:
        registry.unregister(backend.format)


def peer_artifact(name: str, path: Path, precision: str, parent: str | None = None):
    """An Artifact of the peer format; only while `peer_runner_registered` (Artifact refuses
    an unregistered format)."""
    from compress.backends.base import Artifact

    return Artifact(name, Path(path), OV_PEER_FORMAT, precision, parent)


def _median(values: list[float]) -> float:
    return round(float(np.median(values)), 4)


def _combine_rounds(records: list[dict], seq: int, batch: int) -> dict:
    """One route's harness records (one per round) -> its figures: accuracy from round 1 (the
    whole dev split), p50 as the median of the round p50s, seq/s pooled over all rounds."""
    def point(rec, b):
        return next(p for p in rec["points"] if p["batch_size"] == b and p["seq_len"] == seq)

    first = records[0]
    lat, thr = [point(r, 1) for r in records], [point(r, batch) for r in records]
    return {
        "accuracy": first["accuracy"],
        "f1": first["f1"],
        "eval_rows": first["eval_rows"],
        "agreement_with_parent": first["agreement_with_parent"],
        "size_mb": first["size_mb"],
        "num_params": first["num_params"],
        "backend": first["backend"],
        "threads": first["threads"],
        "artifact_sha256": first["artifact_sha256"],
        "latency": {"batch_size": 1, "seq_len": seq,
                    "latency_ms_p50": _median([p["latency_ms_p50"] for p in lat]),
                    "latency_ms_p90": _median([p["latency_ms_p90"] for p in lat]),
                    "round_p50_ms": [p["latency_ms_p50"] for p in lat],
                    "queries": sum(p["queries"] for p in lat)},
        "throughput": {"batch_size": batch, "seq_len": seq,
                       # pooled: all timed queries of all rounds (mean x queries = their time)
                       "throughput_seq_per_s": round(batch * sum(p["queries"] for p in thr) * 1000.0
                                                     / sum(p["latency_ms_mean"] * p["queries"] for p in thr), 2),
                       "latency_ms_p50": _median([p["latency_ms_p50"] for p in thr]),
                       "round_seq_per_s": [p["throughput_seq_per_s"] for p in thr],
                       "queries": sum(p["queries"] for p in thr)},
    }


def run_openvino(args, prepared, tokenizer, work_dir: Path, temporary: bool) -> dict:
    """The openvino check: the project's OpenVINO artifacts against optimum-intel's FP32 IR and
    static INT8, every route measured by compress.measure.harness.measure in interleaved rounds."""
    from compress.measure.harness import MeasureConfig, measure
    from compress.backends.base import Artifact, load_runner, skip_reason

    project_specs = {"student_ov": (args.project_ov, "fp32", None, "--project-ov"),
                     "student_ov_bf16": (args.project_ov, "bf16", "student_ov", "--project-ov"),
                     "student_ov_int8": (args.project_ov_int8, "int8", "student_ov", "--project-ov-int8")}
    routes: dict[str, dict] = {}
    arts: dict = {}
    flags: dict[str, str] = {}
    for name, (path, precision, parent, flag) in project_specs.items():
        routes[name] = {"side": "project", "precision": precision, "path": str(path), "status": "ok",
                        "reason": None}
        flags[name] = f"{flag} {path}"
        if (path / "model.xml").is_file():
            arts[name] = Artifact(name, path, "openvino", precision, parent=parent)
        else:
            routes[name].update(status="missing", reason=f"{flag} {path}: "
                                f"{'no model.xml in it' if path.is_dir() else 'not found'}; {OV_BUILD_HINT}")

    print(f"building optimum-intel's route from {args.model} in {work_dir} "
          f"({args.calibration_rows} calibration rows) ...", file=sys.stderr, flush=True)
    calibration = calibration_rows(prepared, tokenizer, args.calibration_rows, args.eval_max_length)
    peer = build_optimum_intel(args.model, work_dir, tokenizer, calibration)
    shown = {"fp32_dir": "<temporary>/optimum_intel_ov" if temporary else str(peer["fp32_dir"]),
             "int8_dir": "<temporary>/optimum_intel_ov_int8" if temporary else str(peer["int8_dir"])}
    # The peer runs with the project's runtime settings (its openvino.json "runtime", else the
    # project's default rule), so precision, threads, streams and pinning match row by row.
    runtime = {}
    for precision, _, _ in OV_PAIRS:
        src = args.project_ov_int8 if precision == "int8" else args.project_ov
        recorded = project_runtime(src, precision)
        runtime[precision] = {**(recorded or default_runtime(precision)),
                              "from": str(src / "openvino.json") if recorded else
                              "the project's default rule (no recorded runtime found)"}
    for key in ("fp32_dir", "int8_dir"):
        write_peer_runtime(peer[key], runtime)
    optimum_default = optimum_intel_default_precision(peer["fp32_dir"], args.threads)
    for precision, _, name in OV_PAIRS:
        key = "int8_dir" if precision == "int8" else "fp32_dir"
        routes[name] = {"side": "optimum-intel", "precision": precision, "path": shown[key], "status": "ok",
                        "reason": None, "runtime": runtime[precision],
                        "ov_config": peer_ov_config(args.threads, runtime[precision])}
        flags[name] = name

    def failed(name: str, what: str, e: Exception) -> Exception:
        msg = f"{what}: {type(e).__name__}: {e}"
        if routes[name]["side"] == "project":
            return InputError(f"{flags[name]}: the project's OpenVINO runner {msg}")
        return PeerBuildError(f"optimum-intel's {name} ({routes[name]['path']}) {msg}")

    base = MeasureConfig(targets=["cpu"], points=[[1, args.seq], [args.batch, args.seq]],
                         eval_max_length=args.eval_max_length, eval_batch_size=args.eval_batch_size,
                         eval_max_rows=None, warmup_queries=args.warmup,
                         min_queries=math.ceil(args.ov_min_queries / args.rounds),
                         min_duration_s=args.ov_min_duration_s / args.rounds,
                         max_duration_s=args.ov_max_duration_s / args.rounds,
                         threads=args.threads, isolate=False, gpu_fp16=False, dev_stream_repeats=0)
    order = [name for _, proj, peer_name in OV_PAIRS for name in (proj, peer_name)]
    predictions: dict[str, list[int]] = {}
    records: dict[str, list[dict]] = {name: [] for name in order}
    with peer_runner_registered():
        for precision, _, name in OV_PAIRS:  # an Artifact of the peer format exists only while it is registered
            key = "int8_dir" if precision == "int8" else "fp32_dir"
            arts[name] = peer_artifact(name, peer[key], precision, None if precision == "fp32" else "optimum_intel_ov")
        # Which routes can run here (bf16 needs native bf16; the project's runner must exist),
        # and what each compiled model reports it runs with.
        for name in order:
            route = routes[name]
            if route["status"] != "ok":
                continue
            try:
                reason = skip_reason(arts[name], "cpu")
            except (ImportError, ValueError) as e:
                if route["side"] != "project":
                    raise failed(name, "cannot be registered", e) from e
                route.update(status="missing", reason="the project's OpenVINO runner (compress.backends.registry "
                             f"'openvino' -> compress.backends.openvino_runner) is not available: {type(e).__name__}: {e}")
                continue
            if reason:
                route.update(status="skipped", reason=reason)
                continue
            try:
                runner = load_runner(arts[name], "cpu", args.threads)
            except Exception as e:  # noqa: BLE001 - reported with the artifact's path
                if route["side"] == "project" and type(e).__name__ == "OpenVinoIrError":  # incomplete directory
                    route.update(status="missing", reason=f"{flags[name]}: {e}; {OV_BUILD_HINT}")
                    continue
                raise failed(name, "cannot load it", e) from e
            route["backend"] = runner.backend
            route["inference"] = compiled_properties(find_compiled_model(runner))
            del runner
            gc.collect()
        for name, route in routes.items():
            if route["status"] != "ok":
                print(f"note: {name} not measured ({route['status']}): {route['reason']}", file=sys.stderr, flush=True)

        for r in range(args.rounds):
            # Round 1 runs the whole dev split; later rounds only re-time (eval_max_rows = --batch
            # keeps the latency batches the same dev rows: rows 0 .. batch-1).
            cfg = base if r == 0 else dataclasses.replace(base, eval_max_rows=args.batch)
            print(f"openvino round {r + 1}/{args.rounds}: "
                  + ", ".join(n for n in order if routes[n]["status"] == "ok"), file=sys.stderr, flush=True)
            for name in order:
                if routes[name]["status"] != "ok":
                    continue
                art, out = arts[name], {}
                try:
                    rec = measure(art, args.data, cfg, parent_predictions=predictions.get(art.parent) if r == 0 else None,
                                  predictions_out=out)[0]
                except Exception as e:  # noqa: BLE001 - reported with the artifact's path
                    raise failed(name, "failed while measured", e) from e
                if rec["status"] != "ok":
                    routes[name].update(status=rec["status"], reason=rec["reason"])
                    continue
                if r == 0:
                    predictions[name] = out["cpu"]
                records[name].append(rec)
                gc.collect()

    for name in order:
        if routes[name]["status"] == "ok":
            routes[name].update(_combine_rounds(records[name], args.seq, args.batch))

    pairs = []
    for precision, proj, peer_name in OV_PAIRS:
        a, b = routes[proj], routes[peer_name]
        entry: dict = {"precision": precision, "project": proj, "optimum_intel": peer_name}
        if a["status"] != "ok" or b["status"] != "ok":
            entry.update(status="incomplete", reason="; ".join(f"{n} {routes[n]['status']}" for n in (proj, peer_name)
                                                              if routes[n]["status"] != "ok"))
            pairs.append(entry)
            continue
        pa, pb = np.asarray(predictions[proj]), np.asarray(predictions[peer_name])
        ratio = b["latency"]["latency_ms_p50"] / a["latency"]["latency_ms_p50"]
        round_ratios = [round(y / x, 4) for x, y in zip(a["latency"]["round_p50_ms"], b["latency"]["round_p50_ms"])]
        speed = speed_verdict(round_ratios, "optimum-intel")
        acc = (a.get("accuracy"), b.get("accuracy"))
        entry.update(
            status="ok",
            prediction_agreement=round(float((pa == pb).mean()), 6),
            disagreements=int((pa != pb).sum()),
            accuracy_delta_project_minus_optimum_intel=(round(acc[0] - acc[1], 6) if None not in acc else None),
            p50_ratio_optimum_intel_over_project=round(ratio, 4),
            round_p50_ratios=round_ratios,
            speed=speed,
            throughput_ratio_project_over_optimum_intel=round(
                a["throughput"]["throughput_seq_per_s"] / b["throughput"]["throughput_seq_per_s"], 4),
            size_ratio_optimum_intel_over_project=round(b["size_mb"] / a["size_mb"], 4),
        )
        pairs.append(entry)

    return {
        "project_artifacts": {"fp32_dir": str(args.project_ov), "int8_dir": str(args.project_ov_int8),
                              "runner": "compress.backends.base.load_runner(Artifact(name, path, 'openvino', precision), "
                                        "'cpu', threads)"},
        "project_measured": any(r["status"] == "ok" for r in routes.values() if r["side"] == "project"),
        "optimum_intel_route": {**{k: v for k, v in peer.items() if not k.endswith("_dir")}, **shown,
                                "runner": "OptimumIntelRunner: OVModelForSequenceClassification.from_pretrained("
                                          "dir, ov_config=..., device='CPU')",
                                "runtime": runtime,
                                "default_inference_precision": optimum_default},
        "measure": {"harness": "compress.measure.harness.measure", "isolate": False, "target": "cpu",
                    "points": base.points, "seq_len": args.seq, "batch_size": args.batch,
                    "eval_max_length": args.eval_max_length, "eval_batch_size": args.eval_batch_size,
                    "threads": args.threads, "rounds": args.rounds,
                    "order": "interleaved " + "/".join(order) + " per round",
                    "warmup_per_round": args.warmup, "queries_per_round_min": base.min_queries,
                    "seconds_per_round_min": round(base.min_duration_s, 3),
                    "seconds_per_round_max": round(base.max_duration_s, 3),
                    "later_rounds_eval_rows": args.batch},
        "routes": routes,
        "pairs": pairs,
    }
