"""GPU acceptance check: one command that validates the GPU side of an installation.

    python benchmarks/gpu_check.py                       # writes reports/gpu_check.{json,md}
    python benchmarks/gpu_check.py --quick --no-tests    # fewer queries, skip the pytest part

1. Is CUDA visible to torch (device name, CUDA and driver versions)?
2. The suite's GPU tests (tests/test_measure.py, test_tensorrt.py, test_cudagraph.py), with
   their skip reasons.
3. Latency at 1x16, 1x128, 1x512, 32x128 and 256x128 of the student, teacher and bert-base
   geometries, as eager FP32, eager FP16 and CUDA-graph FP16 (compress.backends.cudagraph), plus
   TensorRT and ONNX Runtime's CUDA provider where installed, else their skip reasons.
   Trained models come from models/ when present, else random weights of the same
   geometry (latency only). The CUDA-graph rows record their argmax agreement with eager
   FP32 on the same inputs.

Runs from a plain checkout plus `pip install -e .` with a CUDA build of torch, without DVC
outputs. On a machine without CUDA every row is `skipped` with the reason.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402
import torch  # noqa: E402

POINTS = [(1, 16), (1, 128), (1, 512), (32, 128), (256, 128)]
# name: (trained artifact under models/, random geometry (layers, hidden, heads, intermediate))
GEOMETRIES = {"student": ("student", (3, 384, 12, 1536)), "teacher": ("teacher", (6, 384, 12, 1536)),
              "bert-base": (None, (12, 768, 12, 3072))}
VARIANTS = ("eager_fp32", "eager_fp16", "cudagraph_fp16", "tensorrt_fp16", "ort_cuda_fp32")


def cuda_facts() -> dict:
    from compress.backends.pytorch import cuda_unavailable

    reason = cuda_unavailable()
    facts = {"torch": torch.__version__, "cuda_build": torch.version.cuda, "usable": reason is None,
             "reason": reason}
    if reason is None:
        facts.update(device=torch.cuda.get_device_name(0), devices=torch.cuda.device_count(),
                     capability=".".join(map(str, torch.cuda.get_device_capability(0))))
    return facts


def run_gpu_tests() -> dict:
    files = ["tests/test_measure.py", "tests/test_tensorrt.py", "tests/test_cudagraph.py"]
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", *files],
                          cwd=REPO, capture_output=True, text=True)
    lines = proc.stdout.strip().splitlines()
    return {"files": files, "exit_code": proc.returncode, "summary": lines[-1] if lines else "",
            "skips": [ln for ln in lines if ln.startswith("SKIPPED")]}


def model_dir(name: str, geometry: tuple, tmp: Path) -> tuple[Path, str]:
    """A trained artifact from models/ if there is one, else random weights saved to tmp."""
    trained, (layers, hidden, heads, inter) = geometry
    if trained and (REPO / "models" / trained / "config.json").is_file():
        return REPO / "models" / trained, f"models/{trained}"
    from transformers import BertConfig, BertForSequenceClassification

    from compress.training.models import load_classifier, save_classifier

    _, tok, _ = load_classifier("random:tiny", 2)  # the bert-base-uncased vocabulary
    torch.manual_seed(0)
    cfg = BertConfig(num_hidden_layers=layers, hidden_size=hidden, num_attention_heads=heads,
                     intermediate_size=inter, num_labels=2)
    out = tmp / name
    save_classifier(BertForSequenceClassification(cfg), tok, out, ["negative", "positive"])
    return out, f"random weights {layers}x{hidden}"


def make_batch(batch: int, seq: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    ids = rng.integers(1000, 29000, size=(batch, seq), dtype=np.int64)
    ids[:, 0], ids[:, -1] = 101, 102  # [CLS] ... [SEP]
    return {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids)}


def variant_runner(variant: str, path: Path, name: str):
    """(runner, None) or (None, why it cannot run here)."""
    from compress.backends.cudagraph import CudaGraphRunner
    from compress.backends.base import Artifact
    from compress.backends.pytorch import TorchRunner

    if variant == "eager_fp32":
        return TorchRunner(Artifact(name, path), "gpu", 1), None
    if variant == "eager_fp16":
        return TorchRunner(Artifact(name, path, precision="fp16"), "gpu", 1), None
    if variant == "cudagraph_fp16":
        return CudaGraphRunner(Artifact(name, path, precision="fp16"), "gpu", 1), None
    if variant == "tensorrt_fp16":
        engine = REPO / "models" / "trt" / f"{name}-fp16"
        try:
            import tensorrt  # noqa: F401
        except ImportError:
            return None, "the tensorrt package is not installed (pip install tensorrt)"
        if not engine.is_dir():
            return None, f"no engine at {engine.relative_to(REPO)}: build it with `dvc repro tensorrt`"
        from compress.backends.tensorrt_runner import TrtRunner

        return TrtRunner(Artifact(f"{name}_trt_fp16", engine, format="tensorrt", precision="fp16"), "gpu", 1), None
    if variant == "ort_cuda_fp32":
        import onnxruntime as ort

        if "CUDAExecutionProvider" not in ort.get_available_providers():
            return None, (f"onnxruntime {ort.__version__} has no CUDAExecutionProvider "
                          "(pip install onnxruntime-gpu)")
        onnx_dir = REPO / "models" / f"{name}_onnx"
        if not onnx_dir.is_dir():
            return None, f"no ONNX export at {onnx_dir.relative_to(REPO)}: build it with `dvc repro export_onnx`"
        from compress.backends.onnx_runtime import OrtRunner

        return OrtRunner(Artifact(f"{name}_onnx", onnx_dir, format="onnx"), "gpu", 1), None
    raise ValueError(variant)


def measure_variant(runner, points, warmup: int, min_queries: int, min_s: float) -> list[dict]:
    from compress.measure.harness import _is_oom, latency_point, time_queries

    out = []
    for batch, seq in points:
        try:
            times = time_queries(runner, make_batch(batch, seq), warmup, min_queries, min_s, 30.0,
                                 runner.synchronize)
            p = latency_point(times, batch, seq)
            out.append({"point": f"{batch}x{seq}", "status": "ok", "latency_ms_p50": p.latency_ms_p50,
                        "latency_ms_p99": p.latency_ms_p99, "throughput_seq_per_s": p.throughput_seq_per_s})
        except RuntimeError as e:
            if not _is_oom(e):
                raise
            torch.cuda.empty_cache()
            out.append({"point": f"{batch}x{seq}", "status": "does_not_fit", "reason": str(e).splitlines()[0]})
    return out


def agreement(runner, reference, rows: int = 256) -> float:
    """Argmax agreement with eager FP32 on the same random-token batches (seq 128)."""
    same = 0
    for k in range(rows // 32):
        b = make_batch(32, 128, seed=100 + k)
        same += int((runner(b).argmax(-1) == reference(b).argmax(-1)).sum())
    return round(same / rows, 4)


def render(result: dict) -> str:
    lines = ["# GPU check", "", f"CUDA: {json.dumps(result['cuda'])}", ""]
    if result.get("tests"):
        lines += [f"Suite GPU tests: {result['tests']['summary']}", ""]
        lines += [f"- {s}" for s in result["tests"]["skips"]] + [""]
    head = "| geometry | variant | " + " | ".join(f"p50 {b}x{s}" for b, s in POINTS) + \
           " | seq/s 256x128 | agreement vs FP32 | note |"
    lines += [head, "|" + "---|" * (len(POINTS) + 5)]
    for row in result["rows"]:
        if row["status"] != "ok":
            lines.append(f"| {row['geometry']} | {row['variant']} | " + " | ".join("-" for _ in POINTS) +
                         f" | - | - | skipped: {row['reason']} |")
            continue
        pts = {p["point"]: p for p in row["points"]}
        cells = [f"{pts[f'{b}x{s}']['latency_ms_p50']} ms" if pts[f"{b}x{s}"]["status"] == "ok" else "does not fit"
                 for b, s in POINTS]
        big = pts.get("256x128", {})
        lines.append(f"| {row['geometry']} | {row['variant']} | " + " | ".join(cells) +
                     f" | {big.get('throughput_seq_per_s', '-')} | {row.get('agreement_vs_eager_fp32', '-')} "
                     f"| {row['source']} |")
    if result.get("speedups"):
        lines += ["", "CUDA-graph FP16 vs eager FP32 at 1x128 (same run): " +
                  ", ".join(f"{k} {v}x" for k, v in result["speedups"].items())]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(REPO / "reports" / "gpu_check"), help="writes OUT.json and OUT.md")
    ap.add_argument("--geometries", nargs="+", default=list(GEOMETRIES), choices=list(GEOMETRIES))
    ap.add_argument("--quick", action="store_true", help="fewer queries per point")
    ap.add_argument("--no-tests", action="store_true", help="skip running the suite's GPU tests")
    args = ap.parse_args(argv)
    warmup, min_q, min_s = (3, 10, 0.2) if args.quick else (10, 50, 1.0)
    result = {"cuda": cuda_facts(), "points": [f"{b}x{s}" for b, s in POINTS], "rows": [], "speedups": {}}
    if not args.no_tests:
        result["tests"] = run_gpu_tests()
    with tempfile.TemporaryDirectory() as tmp:
        for geom in args.geometries:
            path = source = None
            for variant in VARIANTS:
                row = {"geometry": geom, "variant": variant}
                if not result["cuda"]["usable"]:
                    result["rows"].append({**row, "status": "skipped", "reason": result["cuda"]["reason"]})
                    continue
                if path is None:
                    path, source = model_dir(geom, GEOMETRIES[geom], Path(tmp))
                    reference = variant_runner("eager_fp32", path, geom)[0]
                runner, why = variant_runner(variant, path, geom)
                if runner is None:
                    result["rows"].append({**row, "status": "skipped", "reason": why})
                    continue
                t0 = time.perf_counter()
                row.update(status="ok", source=source, points=measure_variant(runner, POINTS, warmup, min_q, min_s))
                if variant != "eager_fp32":
                    row["agreement_vs_eager_fp32"] = agreement(runner, reference)
                row["wall_s"] = round(time.perf_counter() - t0, 1)
                result["rows"].append(row)
                print(f"{geom} {variant}: " + ", ".join(
                    f"{p['point']} {p.get('latency_ms_p50', p['status'])}" for p in row["points"]), flush=True)
                del runner
                torch.cuda.empty_cache()
            by = {r["variant"]: r for r in result["rows"] if r["geometry"] == geom and r["status"] == "ok"}
            if "eager_fp32" in by and "cudagraph_fp16" in by:
                p50 = {v: next(p for p in by[v]["points"] if p["point"] == "1x128") for v in ("eager_fp32", "cudagraph_fp16")}
                if all(p["status"] == "ok" for p in p50.values()):
                    result["speedups"][geom] = round(p50["eager_fp32"]["latency_ms_p50"] /
                                                     p50["cudagraph_fp16"]["latency_ms_p50"], 2)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n")
    out.with_suffix(".md").write_text(render(result))
    print(render(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
