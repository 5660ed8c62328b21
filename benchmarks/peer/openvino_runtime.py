"""What the openvino check's models are compiled with and what they report.

Every peer row is compiled with the project row's runtime settings: its
``INFERENCE_PRECISION_HINT`` and CPU pinning as the project's openvino.json records them,
else the project's rule (f32, bf16, and for INT8 bf16 where the CPU has native bf16, else
f32), plus ``INFERENCE_NUM_THREADS=--threads, NUM_STREAMS=1, PERFORMANCE_HINT=LATENCY``;
written beside the peer IR as peer_runtime.json, which benchmarks.peer.runner reads. Left
to its defaults optimum-intel would let the CPU plugin choose (bf16 on CPUs with native
bf16): `optimum_intel_default_precision` records that choice. `compiled_properties` reads
back what a compiled model (project or peer) says it runs with.
"""
from __future__ import annotations

import json
import math
import types
from pathlib import Path

import numpy as np

OV_PEER_FORMAT = "optimum_intel_openvino"  # the peer's artifact format (registered by benchmarks.peer.runner)
OV_RUNTIME_FILE = "peer_runtime.json"  # beside a peer IR: what each precision is compiled with


def default_runtime(precision: str) -> dict:
    """The project's rule, read from compress.backends.openvino_ir (PRECISION_HINTS, int8_hint
    "auto"): fp32 runs at f32, bf16 at bf16, and what an INT8 graph leaves in float at bf16
    where the CPU has native bf16, else f32; no CPU pinning."""
    from compress.backends.openvino_ir import PRECISION_HINTS, int8_hint

    hint = PRECISION_HINTS.get(precision) or int8_hint("auto")
    return {"inference_precision": hint, "cpu_pinning": False}


def project_runtime(ir_dir: Path, precision: str) -> dict | None:
    """The runtime settings the project's IR records for `precision` (openvino.json "runtime"),
    or None when it records none."""
    try:
        meta = json.loads((ir_dir / "openvino.json").read_text(encoding="utf-8"))
        got = meta["runtime"][precision]
        return {"inference_precision": str(got["inference_precision"]), "cpu_pinning": bool(got.get("cpu_pinning"))}
    except (OSError, ValueError, KeyError, TypeError):
        return None


def peer_ov_config(threads: int, runtime: dict) -> dict:
    """The compile options of optimum-intel's model: the project's runtime settings (threads,
    one stream, latency hint, CPU pinning) and the inference precision of the row."""
    return {"INFERENCE_NUM_THREADS": int(threads), "NUM_STREAMS": 1, "PERFORMANCE_HINT": "LATENCY",
            "INFERENCE_PRECISION_HINT": runtime["inference_precision"],
            "ENABLE_CPU_PINNING": bool(runtime.get("cpu_pinning", False))}


def write_peer_runtime(ir_dir: Path, runtime: dict[str, dict]) -> None:
    """Records, beside a peer IR, what each precision is compiled with ({precision: runtime})."""
    (ir_dir / OV_RUNTIME_FILE).write_text(json.dumps(runtime, indent=2) + "\n", encoding="utf-8")


def peer_runtime(ir_dir: Path, precision: str) -> dict:
    try:
        return json.loads((ir_dir / OV_RUNTIME_FILE).read_text(encoding="utf-8"))[precision]
    except (OSError, ValueError, KeyError):
        return default_runtime(precision)


def ir_constant_count(model) -> int:
    """Elements of the weight-like constants (float or 8/4-bit) of an openvino.Model."""
    total = 0
    for op in model.get_ops():
        if op.get_type_name() != "Constant":
            continue
        etype = op.get_output_element_type(0)
        if not (etype.is_real() or etype.get_type_name() in ("i8", "u8", "i4", "u4")):
            continue
        shape = op.get_output_shape(0)
        if len(shape) >= 1:
            total += math.prod(int(d) for d in shape)
    return total


def optimum_intel_default_precision(ir_dir: Path, threads: int) -> str | None:
    """The inference precision optimum-intel would run this IR at left to its defaults (it sets
    only PERFORMANCE_HINT=LATENCY; the CPU plugin then picks bf16 on CPUs with native bf16)."""
    import openvino as ov

    try:
        compiled = ov.Core().compile_model(str(ir_dir / "openvino_model.xml"), "CPU",
                                           {"PERFORMANCE_HINT": "LATENCY", "INFERENCE_NUM_THREADS": int(threads)})
    except Exception:  # noqa: BLE001 - informative only
        return None
    return compiled_properties(compiled).get("INFERENCE_PRECISION_HINT")


def find_compiled_model(runner, depth: int = 3):
    """The openvino.CompiledModel a runner holds (any attribute, a few levels down), or None."""
    import openvino as ov

    seen: set[int] = set()

    def walk(obj, level):
        if id(obj) in seen or obj is None or isinstance(obj, (str, bytes, int, float, bool, Path, np.ndarray)):
            return None
        seen.add(id(obj))
        if isinstance(obj, ov.CompiledModel):
            return obj
        if isinstance(obj, ov.InferRequest):
            return obj.get_compiled_model()
        if level == 0 or isinstance(obj, types.ModuleType) or not hasattr(obj, "__dict__"):
            return None
        for value in vars(obj).values():
            found = walk(value, level - 1)
            if found is not None:
                return found
        return None

    return walk(runner, depth)


def compiled_properties(compiled) -> dict:
    """What the compiled model reports it runs with (precision, threads, streams, hint)."""
    out = {}
    if compiled is None:
        return out
    for key in ("INFERENCE_PRECISION_HINT", "INFERENCE_NUM_THREADS", "NUM_STREAMS", "PERFORMANCE_HINT",
                "EXECUTION_MODE_HINT", "ENABLE_CPU_PINNING"):
        try:
            value = compiled.get_property(key)
        except Exception:  # noqa: BLE001 - a property this plugin does not report
            continue
        if hasattr(value, "get_type_name"):
            value = value.get_type_name()
        elif hasattr(value, "name") and not isinstance(value, (int, str)):
            value = value.name
        out[key] = value if isinstance(value, (int, float, str, bool)) else str(value)
    return out
