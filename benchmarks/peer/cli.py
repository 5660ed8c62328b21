"""The peer check's command line: its arguments, the checks on them that run before anything
slow, the run of the checks asked for, and main() with its exit statuses.

In:  argv (benchmarks/optimum_peer.py --help lists every flag; --help needs no Optimum).
Out: the results dict (`run`), printed as markdown and optionally written as JSON (--json)
and into a README block (--readme, between PEER_START and PEER_END).
Refused: every input problem a user fixes from the message alone (InputError, exit 2), a
peer route that cannot be built (PeerBuildError, exit 1). The numbers never fail it.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
from importlib import metadata
from pathlib import Path

from .common import INSTALL_HINT, InputError, PeerBuildError
from .onnx_route import import_optimum, run_onnx
from .openvino_build import import_optimum_intel
from .openvino_route import run_openvino
from .render import render

CHECKS = {"all": ("onnx", "openvino"), "onnx": ("onnx",), "openvino": ("openvino",)}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="optimum_peer.py",
        description="Compare the project's student with the same student built by Hugging Face Optimum, "
                    "in one run. onnx check: the project's ONNX INT8 against optimum-onnx export + "
                    "ORTQuantizer avx512_vnni (is_static=False, per_channel=False), interleaved batch-1 "
                    "latency. openvino check: the project's OpenVINO IR (FP32, BF16, INT8) against "
                    "optimum-intel (OVModelForSequenceClassification export=True, OVQuantizer static "
                    "INT8 PTQ on training rows), all measured by compress.measure.harness.measure with the same "
                    "threads. Both: accuracy on the dev split, prediction agreement, latency, size.",
        epilog=f"Needs the peer extra: {INSTALL_HINT}",
    )
    p.add_argument("--model", required=True, type=Path,
                   help="float HF checkpoint directory of the student (config.json, *.safetensors, tokenizer)")
    p.add_argument("--checks", choices=sorted(CHECKS), default="all",
                   help="which peer checks to run (default all: onnx and openvino)")
    p.add_argument("--project-onnx", type=Path, default=None,
                   help="the project's INT8 ONNX file, e.g. models/student_onnx_int8/model.onnx "
                        "(required by the onnx check)")
    p.add_argument("--project-ov", type=Path, default=Path("models/student_ov"),
                   help="the project's FP32 OpenVINO IR directory (model.xml, model.bin, tokenizer); "
                        "measured as student_ov (f32) and student_ov_bf16 (default models/student_ov)")
    p.add_argument("--project-ov-int8", type=Path, default=Path("models/student_ov_int8"),
                   help="the project's INT8 OpenVINO IR directory (default models/student_ov_int8)")
    p.add_argument("--data", required=True, type=Path,
                   help="prepared data directory (card.json, dev.jsonl), e.g. data/prepared")
    p.add_argument("--threads", type=int, default=2,
                   help="intra-op threads of both ONNX sessions and inference threads of every OpenVINO "
                        "route (default 2)")
    p.add_argument("--seq", type=int, default=128, help="sequence length of the latency point (default 128)")
    p.add_argument("--min-queries", type=int, default=200,
                   help="onnx check: timed queries per route, all rounds together (default 200)")
    p.add_argument("--min-duration-s", type=float, default=10.0,
                   help="onnx check: timed seconds per route, all rounds together (default 10)")
    p.add_argument("--max-duration-s", type=float, default=120.0,
                   help="onnx check: cap on timed seconds per route, all rounds together (default 120)")
    p.add_argument("--rounds", type=int, default=5,
                   help="interleaved rounds per route, A/B/A/B... (default 5); the openvino check measures every "
                        "route once per round")
    p.add_argument("--warmup", type=int, default=5,
                   help="untimed queries before each round (default 5)")
    p.add_argument("--eval-max-length", type=int, default=128,
                   help="truncation length for the accuracy pass (default 128, as measure.eval_max_length)")
    p.add_argument("--eval-batch-size", type=int, default=64,
                   help="batch size of the accuracy pass (default 64, as measure.eval_batch_size)")
    p.add_argument("--batch", type=int, default=32,
                   help="openvino check: batch of the throughput point --batch x --seq (default 32)")
    p.add_argument("--ov-min-queries", type=int, default=50,
                   help="openvino check: timed queries per latency point and route, all rounds together "
                        "(default 50)")
    p.add_argument("--ov-min-duration-s", type=float, default=5.0,
                   help="openvino check: timed seconds per latency point and route, all rounds together "
                        "(default 5)")
    p.add_argument("--ov-max-duration-s", type=float, default=60.0,
                   help="openvino check: cap on timed seconds per latency point and route (default 60)")
    p.add_argument("--calibration-rows", type=int, default=300,
                   help="openvino check: training rows calibrating optimum-intel's static INT8 (default 300)")
    p.add_argument("--json", type=Path, default=None, help="also write the results to this JSON file")
    p.add_argument("--readme", type=Path, default=None,
                   help="also replace the <!-- peer:start --> ... <!-- peer:end --> block of this file")
    p.add_argument("--work-dir", type=Path, default=None,
                   help="keep Optimum's exports and INT8 models here (default: a temporary directory, removed)")
    return p.parse_args(argv)


def check_args(args: argparse.Namespace) -> None:
    """Every problem a user fixes from the message alone, before anything slow runs."""
    for name, value, low in (("--threads", args.threads, 1), ("--seq", args.seq, 2),
                             ("--min-queries", args.min_queries, 1), ("--rounds", args.rounds, 1),
                             ("--warmup", args.warmup, 0), ("--eval-max-length", args.eval_max_length, 8),
                             ("--eval-batch-size", args.eval_batch_size, 1), ("--batch", args.batch, 2),
                             ("--ov-min-queries", args.ov_min_queries, 1),
                             ("--calibration-rows", args.calibration_rows, 1)):
        if value < low:
            raise InputError(f"{name} must be >= {low}, got {value}")
    for prefix in ("", "ov_"):
        flag = "--" + prefix.replace("_", "-")
        low, high = getattr(args, prefix + "min_duration_s"), getattr(args, prefix + "max_duration_s")
        if low < 0:
            raise InputError(f"{flag}min-duration-s must be >= 0, got {low}")
        if high < low:
            raise InputError(f"{flag}max-duration-s ({high}) must be >= {flag}min-duration-s ({low})")
    checks = CHECKS[args.checks]
    if "onnx" in checks:
        if args.project_onnx is None:
            raise InputError("--project-onnx is required by the onnx check (or run only the other one: "
                             "--checks openvino)")
        if not args.project_onnx.is_file():
            what = "is a directory, not an .onnx file" if args.project_onnx.is_dir() else "not found"
            raise InputError(f"--project-onnx {args.project_onnx}: {what}")
    if "openvino" in checks:
        for flag, path in (("--project-ov", args.project_ov), ("--project-ov-int8", args.project_ov_int8)):
            if path.exists() and not path.is_dir():  # missing is reported in the results, not an error
                raise InputError(f"{flag} {path}: not a directory (an OpenVINO IR directory with model.xml)")
    if not args.model.is_dir():
        raise InputError(f"--model {args.model}: directory not found (a float checkpoint written by save_pretrained)")
    if not (args.model / "config.json").is_file():
        raise InputError(f"--model {args.model}: no config.json (a float checkpoint written by save_pretrained)")
    if not any(args.model.glob("*.safetensors")):
        raise InputError(f"--model {args.model}: no *.safetensors weights")
    if not (args.data / "card.json").is_file():
        raise InputError(f"--data {args.data}: {args.data / 'card.json'} not found; run the prepare stage first")
    if not (args.data / "dev.jsonl").is_file():
        raise InputError(f"--data {args.data}: {args.data / 'dev.jsonl'} not found; run the prepare stage first")
    if "openvino" in checks and not (args.data / "train.jsonl").is_file():
        raise InputError(f"--data {args.data}: {args.data / 'train.jsonl'} not found (optimum-intel's INT8 "
                         "calibrates on training rows); run the prepare stage first")
    if args.work_dir is not None and args.work_dir.exists() and not args.work_dir.is_dir():
        raise InputError(f"--work-dir {args.work_dir}: exists and is not a directory")


def run(args: argparse.Namespace) -> dict:
    """Every check --checks asks for, in one work directory (--work-dir, else a temporary one,
    removed); the results dict --json writes."""
    check_args(args)
    checks = CHECKS[args.checks]
    # fail fast, before reading data, when the extra is missing
    if "onnx" in checks:
        import_optimum()
    if "openvino" in checks:
        import_optimum_intel()

    from compress.data.prepare import DataError, Prepared
    from compress.core.env import cpu_info, library_versions
    from compress.training.models import load_tokenizer

    try:
        prepared = Prepared.open(args.data)
        dev = prepared.split("dev")
    except (DataError, OSError, ValueError) as e:
        raise InputError(f"--data {args.data}: {e}") from None
    if not dev:
        raise InputError(f"--data {args.data}: the dev split is empty")
    try:
        tokenizer = load_tokenizer(args.model)
    except Exception as e:  # noqa: BLE001 - ModelError or anything from AutoTokenizer
        raise InputError(f"--model {args.model}: {e}") from None

    tmp = None
    if args.work_dir is None:
        tmp = tempfile.TemporaryDirectory(prefix="optimum_peer_")
        work_dir = Path(tmp.name)
    else:
        work_dir = args.work_dir
        work_dir.mkdir(parents=True, exist_ok=True)
    res: dict = {"benchmark": "optimum_peer", "checks": list(checks), "task": prepared.task.name,
                 "dev_rows": len(dev), "data_sha256": prepared.sha256("dev"), "model": str(args.model)}
    try:
        if "onnx" in checks:
            res.update(run_onnx(args, prepared, dev, tokenizer, work_dir, temporary=tmp is not None))
        if "openvino" in checks:
            res["openvino"] = run_openvino(args, prepared, tokenizer, work_dir, temporary=tmp is not None)
    finally:
        if tmp is not None:
            tmp.cleanup()
    res["environment"] = {
        "threads": args.threads,
        **{name: _version(name) for name in ("onnxruntime", "optimum", "optimum-onnx", "optimum-intel",
                                             "openvino", "nncf")},
        **{k: v for k, v in library_versions().items()
           if k in ("python", "torch", "transformers", "onnx", "numpy")},
        **cpu_info(),
    }
    return res


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


PEER_START, PEER_END = "<!-- peer:start -->", "<!-- peer:end -->"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # everything comes from local directories
    try:
        res = run(args)
    except InputError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except PeerBuildError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(render(res))
    if args.json is not None:
        from compress.core.io import atomic_write_json

        atomic_write_json(args.json, res)
        print(f"wrote {args.json}")
    if args.readme is not None:
        from compress.core.io import replace_block

        replace_block(args.readme, PEER_START, PEER_END, render(res))
        print(f"updated {args.readme}")
    return 0
