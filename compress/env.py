"""The environment a number was measured in: CPU model and ISA flags, GPU, library
versions, threads. Written beside every measurement."""
from __future__ import annotations

import os
import platform
from importlib import metadata

# ISA features that decide which kernels (and so which speed) a backend gets.
CPU_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "avx_vnni", "amx_tile", "amx_int8", "amx_bf16")

LIBRARIES = ("torch", "transformers", "tokenizers", "onnx", "onnxruntime", "onnxruntime-gpu",
             "optimum", "optimum-onnx", "neural-compressor-pt", "torchao", "tensorrt", "numpy", "dvc")


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


def library_versions() -> dict:
    out = {"python": platform.python_version()}
    for name in LIBRARIES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def environment(threads: int | None = None) -> dict:
    return {
        **cpu_info(),
        **{k: v for k, v in gpu_info().items() if k != "reason"},
        "os": f"{platform.system()} {platform.release()}",
        "threads": threads,
        "libraries": library_versions(),
    }
