#!/usr/bin/env python
"""Peer check: the project's student against Hugging Face Optimum's own routes, in one run.

Two checks, both by default (``--checks all|onnx|openvino``), each building the peer from the
same float checkpoint (``--model``) and measuring it beside the project's artifact:

**onnx** -- the project's ONNX INT8 graph (``--project-onnx``) against optimum-onnx's export
quantized by ``ORTQuantizer`` with ``AutoQuantizationConfig.avx512_vnni(is_static=False,
per_channel=False)``, both run by identical ONNX Runtime sessions, fed by one tokenizer:
accuracy on the whole dev split, prediction agreement, batch-1 latency in interleaved
A/B/A/B rounds (benchmarks/peer/onnx_route.py, graphs.py).

**openvino** -- the project's OpenVINO artifacts (``student_ov`` FP32 IR, ``student_ov_bf16``
the same IR run at bf16, ``student_ov_int8``; ``--project-ov``, ``--project-ov-int8``) against
optimum-intel's FP32 IR (``OVModelForSequenceClassification.from_pretrained(model,
export=True)``) and static INT8 (``OVQuantizer``, NNCF PTQ on ``--calibration-rows`` training
rows) (benchmarks/peer/openvino_build.py), every route measured by the project's harness,
``compress.measure.harness.measure``, in interleaved rounds, each peer row compiled with the
project row's runtime settings (openvino_runtime.py). optimum-intel's model is run by
``benchmarks.peer.runner.OptimumIntelRunner``, whose format (``optimum_intel_openvino``) is
registered with compress.backends.registry while the check runs (openvino_route.py).

It is a benchmark, not a gate: the exit status is 0 whatever the numbers say; it is non-zero
only for bad inputs (2) or when a peer route cannot be built (1). benchmarks/peer/__init__.py
lists what each module does; this file is the command.

    python benchmarks/optimum_peer.py --model models/student \\
        --project-onnx models/student_onnx_int8/model.onnx --data data/prepared \\
        --project-ov models/student_ov --project-ov-int8 models/student_ov_int8 --json peer.json

Needs the ``peer`` extra: ``pip install -e ".[peer]"`` (optimum, optimum-onnx, optimum-intel[openvino]).
"""
from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # benchmarks.peer (and compress) from a checkout, however this file is run
    sys.path.insert(0, str(REPO))

from benchmarks.peer.cli import CHECKS, PEER_END, PEER_START, check_args, main, parse_args, run  # noqa: E402
from benchmarks.peer.common import INSTALL_HINT, InputError, PeerBuildError  # noqa: E402
from benchmarks.peer.graphs import Graph, interleaved_latency, model_size_mb  # noqa: E402
from benchmarks.peer.onnx_route import build_optimum_int8, import_optimum, run_onnx  # noqa: E402
from benchmarks.peer.openvino_build import build_optimum_intel, calibration_rows, import_optimum_intel  # noqa: E402
from benchmarks.peer.openvino_route import (OV_PAIRS, peer_artifact, peer_runner_registered,  # noqa: E402
                                            run_openvino)
from benchmarks.peer.openvino_runtime import (OV_PEER_FORMAT, compiled_properties,  # noqa: E402
                                              find_compiled_model)
from benchmarks.peer.render import render  # noqa: E402

# OptimumIntelRunner is not imported here: importing benchmarks.peer.runner registers its format.
__all__ = ["CHECKS", "INSTALL_HINT", "OV_PAIRS", "OV_PEER_FORMAT", "PEER_END", "PEER_START", "Graph", "InputError",
           "PeerBuildError", "build_optimum_int8", "build_optimum_intel", "calibration_rows", "check_args",
           "compiled_properties", "find_compiled_model", "import_optimum", "import_optimum_intel",
           "interleaved_latency", "main", "model_size_mb", "parse_args", "peer_artifact", "peer_runner_registered",
           "render", "run", "run_onnx", "run_openvino"]


if __name__ == "__main__":
    sys.exit(main())
