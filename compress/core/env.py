"""The environment a number was measured in: CPU model and ISA flags, GPU, library
versions, threads. Written beside every measurement."""
from __future__ import annotations

import os
import platform
from importlib import metadata

# ISA features that decide which kernels (and so which speed) a backend gets.
CPU_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "avx_vnni", "amx_tile", "amx_int8", "amx_bf16")

# The CPU's matrix engines and dot-product units, as the environment tables name them.
MATRIX_ENGINES = {"amx_bf16": "AMX-BF16", "amx_int8": "AMX-INT8", "avx512_bf16": "AVX512-BF16",
                  "avx512_vnni": "AVX512-VNNI", "avx_vnni": "AVX-VNNI"}

# What every run uses whatever it builds; each backend adds its own (its descriptor's
# `libraries`, compress.backends.registry), so a new backend's libraries are recorded too.
CORE_LIBRARIES = ("torch", "transformers", "tokenizers", "numpy", "optimum", "optimum-onnx", "optimum-intel", "dvc")


def libraries(all_backends: bool = False) -> tuple[str, ...]:
    """The distributions the environment table records: the core ones, then those of every
    backend this process has loaded (a stage: the backends it built or ran with; so a
    stage's table depends on no code it does not run). all_backends: every registered
    backend's, importing each backend module (a few seconds), as `compress env` shows."""
    from compress.backends import registry

    return tuple(dict.fromkeys((*CORE_LIBRARIES, *registry.libraries(loaded_only=not all_backends))))


def _cpu_flags() -> set[str]:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "flags":
                    return set(value.split())
    except OSError:
        pass
    return set()


def matrix_engines(flags: dict[str, bool] | None = None) -> dict[str, bool]:
    """{"AMX-BF16": True, ...}: which matrix/dot-product engines the CPU has."""
    flags = flags if flags is not None else {f: True for f in _cpu_flags()}
    return {label: bool(flags.get(flag)) for flag, label in MATRIX_ENGINES.items()}


def bf16_unavailable(flags: dict[str, bool] | None = None) -> str | None:
    """None when the CPU computes bf16 natively (AMX-BF16 or AVX512-BF16), else why a bf16
    route is skipped. `flags` ({flag: bool}) defaults to this CPU's /proc/cpuinfo flags;
    tests pass a fake set. The environment variable COMPRESS_CPU_FLAGS (comma-separated
    flags) overrides the detection, so a whole run can act as an older CPU."""
    if flags is None:
        forced = os.environ.get("COMPRESS_CPU_FLAGS")
        names = set(forced.replace(",", " ").split()) if forced is not None else _cpu_flags()
        flags = {f: True for f in names}
    if flags.get("amx_bf16") or flags.get("avx512_bf16"):
        return None
    return ("this CPU has no native bf16 (neither AMX-BF16 nor AVX512-BF16 in its flags): bf16 would be "
            "emulated, slower than FP32")


def cpu_info() -> dict:
    model, flags = platform.processor() or "unknown", set()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip()
                if key == "model name":
                    model = value.strip()
                elif key == "flags":
                    flags = set(value.split())
                if model != "unknown" and flags:
                    break
    except OSError:
        pass
    return {
        "cpu_model": model,
        "cpu_flags": {f: f in flags for f in CPU_FLAGS},
        "matrix_engines": matrix_engines({f: True for f in flags}),
        "cpu_count": os.cpu_count(),
        "cpu_affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "machine": platform.machine(),
    }


def gpu_info() -> dict:
    try:
        import torch
    except ImportError:
        return {"cuda_available": False, "gpu_name": None, "reason": "torch not installed"}
    if not torch.cuda.is_available():
        why = ("torch is a CPU-only build" if torch.version.cuda is None
               else "no CUDA device visible")
        return {"cuda_available": False, "gpu_name": None, "reason": why}
    return {"cuda_available": True, "gpu_name": torch.cuda.get_device_name(0),
            "cuda_version": torch.version.cuda, "gpu_count": torch.cuda.device_count()}


def versions(*dists: str) -> dict[str, str]:
    """Installed versions of the named distributions (PyPI names), those not installed left
    out: what an artifact's metadata records of the libraries that built it."""
    out = {}
    for name in dists:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return out


def library_versions(all_backends: bool = False) -> dict:
    names = libraries(all_backends)
    found = versions(*names)
    return {"python": platform.python_version(), **{name: found.get(name) for name in names}}


def environment(threads: int | None = None, all_backends: bool = False) -> dict:
    return {
        **cpu_info(),
        **{k: v for k, v in gpu_info().items() if k != "reason"},
        "os": f"{platform.system()} {platform.release()}",
        "threads": threads,
        "libraries": library_versions(all_backends),
    }
