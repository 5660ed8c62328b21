"""GPU acceptance check: one command that validates the GPU side of an installation.

    python benchmarks/gpu_check.py                       # writes reports/gpu/gpu_check.{json,md}
    python benchmarks/gpu_check.py --quick --no-tests    # fewer queries, skip the pytest part

1. Is CUDA visible to torch (device name, CUDA and driver versions)?
2. The suite's GPU tests (tests/test_measure.py, test_tensorrt.py, test_cudagraph.py), with
   their skip reasons.
3. Latency at 1x16, 1x128, 1x512, 32x128 and 256x128 of the student, teacher and bert-base
   geometries, as eager FP32, eager FP16 and CUDA-graph FP16 (compress.backends.cudagraph), plus
   TensorRT and ONNX Runtime's CUDA provider where installed, else their skip reasons.
   Each point records torch's CUDA peak (`peak_gpu_mem_mb`), reset before the point, so a
   point that did not fit leaves nothing in the next one's figure.
   Trained models come from models/ when present, else random weights of the same
   geometry (latency only). Every non-FP32 row records its argmax agreement with eager
   FP32 on real dev sentences (`--dev`, a GLUE-style TSV with a `sentence` column; by
   default the shared SST-2 dev split when it is there), padded to 128 tokens in batches
   of 32; random token ids only when no dev file is found (the record says which).

Runs from a plain checkout plus `pip install -e .` with a CUDA build of torch, without DVC
outputs. On a machine without CUDA every row is `skipped` with the reason.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
SHARED_DATA = Path(os.environ.get("COMPRESS_SHARED_DATA", REPO.parent / "shared" / "data"))

import numpy as np  # noqa: E402
import torch  # noqa: E402

POINTS = [(1, 16), (1, 128), (1, 512), (32, 128), (256, 128)]
# name: (trained artifact under models/, random geometry (layers, hidden, heads, intermediate))
GEOMETRIES = {"student": ("student", (3, 384, 12, 1536)), "teacher": ("teacher", (6, 384, 12, 1536)),
              "bert-base": (None, (12, 768, 12, 3072))}
VARIANTS = ("eager_fp32", "eager_fp16", "cudagraph_fp16", "tensorrt_fp16", "ort_cuda_fp32")
# A published yardstick for the bert-base row, not measured here: NVIDIA's TensorRT FP16
# BERT-base inference at batch 1, sequence 128 on an A100 (the figure issue 25 quotes).
PUBLISHED_TRT_BERT_BASE_1X128_MS = {"gpu": "A100", "latency_ms": 0.64, "engine": "TensorRT FP16"}


def cuda_facts() -> dict:
    from compress.backends.pytorch import cuda_unavailable

    reason = cuda_unavailable()
    facts = {"torch": torch.__version__, "cuda_build": torch.version.cuda, "usable": reason is None,
             "reason": reason}
    if reason is None:
        facts.update(device=torch.cuda.get_device_name(0), devices=torch.cuda.device_count(),
                     capability=".".join(map(str, torch.cuda.get_device_capability(0))))
    return facts


def run_gpu_tests(timeout_s: float = 300) -> dict:
    files = ["tests/test_measure.py", "tests/test_tensorrt.py", "tests/test_cudagraph.py"]
    # only the GPU-facing tests: the CPU ones are the suite's business, and need the CPU
    # backends (OpenVINO, torchao) a GPU box may lack
    cmd = [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider",
           "-k", "gpu or cuda or cudagraph or tensorrt", *files]
    try:
        proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        return {"files": files, "exit_code": None, "summary": f"timed out after {timeout_s:.0f} s",
                "skips": [], "tail": out.splitlines()[-20:]}
    lines = proc.stdout.strip().splitlines()
    failed = [ln for ln in lines if ln.startswith(("FAILED", "ERROR"))]
    return {"files": files, "selection": "-k 'gpu or cuda or cudagraph or tensorrt'", "exit_code": proc.returncode,
            "summary": lines[-1] if lines else proc.stderr.strip()[-300:],
            "skips": [ln for ln in lines if ln.startswith("SKIPPED")], "failures": failed,
            "tail": lines[-60:] if proc.returncode not in (0, 5) else []}


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
    if variant == "compile_fp16":
        return CompiledRunner(TorchRunner(Artifact(name, path, precision="fp16"), "gpu", 1)), None
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


class CompiledRunner:
    """torch.compile(mode="reduce-overhead") of an eager FP16 runner's model: inductor
    kernels replayed from CUDA graphs, one compile per shape (dynamic=False). Measured
    beside the project's own capture (`--compile`) to check cudagraph.py's choice."""

    def __init__(self, eager):
        self.eager, self.device = eager, eager.device
        self.model = torch.compile(eager.model, mode="reduce-overhead", dynamic=False)

    @torch.inference_mode()
    def __call__(self, batch: dict[str, np.ndarray]) -> np.ndarray:
        inputs = {k: torch.from_numpy(v).to(self.device) for k, v in batch.items()}
        return self.model(**inputs).logits.float().cpu().numpy()

    def synchronize(self) -> None:
        torch.cuda.synchronize()


def measure_variant(runner, points, warmup: int, min_queries: int, min_s: float) -> list[dict]:
    from compress.measure.harness import _is_oom, latency_point, time_queries

    out = []
    for batch, seq in points:
        # the peak is reset per point: a point that ran out of memory must not leave its
        # failed allocations in the next point's figure
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        try:
            times = time_queries(runner, make_batch(batch, seq), warmup, min_queries, min_s, 30.0,
                                 runner.synchronize)
            p = latency_point(times, batch, seq)
            out.append({"point": f"{batch}x{seq}", "status": "ok", "latency_ms_p50": p.latency_ms_p50,
                        "latency_ms_p99": p.latency_ms_p99, "throughput_seq_per_s": p.throughput_seq_per_s,
                        "peak_gpu_mem_mb": round(torch.cuda.max_memory_allocated() / 2**20, 1)})
        except RuntimeError as e:
            if not _is_oom(e):
                raise
            torch.cuda.empty_cache()
            out.append({"point": f"{batch}x{seq}", "status": "does_not_fit", "reason": str(e).splitlines()[0],
                        "peak_gpu_mem_mb": None})
    return out


def dev_sentences(path: Path | None) -> list[str]:
    """The texts of a labelled table (GLUE-style TSV with `sentence` and `label` columns,
    or CSV / JSON Lines with those keys), read by the project's own reader; [] when there
    is no file."""
    if path is None or not path.is_file():
        return []
    from compress.tasks.formats import format_of, read_table

    return [row.text for row in read_table(path, format_of(path, None, False), "sentence", None, "label")]


def agreement_batches(model_path: Path, sentences: list[str], rows: int = 256) -> tuple[list[dict], str]:
    """Batches of 32 at seq 128 for the agreement check: the real sentences tokenized
    by the model's own tokenizer (padded with mask 0), else random token ids."""
    if not sentences:
        return [make_batch(32, 128, seed=100 + k) for k in range(rows // 32)], f"{rows} random token rows"
    from compress.training.models import load_tokenizer

    tok = load_tokenizer(model_path)
    out = []
    for i in range(0, len(sentences), 32):
        enc = tok(sentences[i:i + 32], padding="max_length", truncation=True, max_length=128, return_tensors="np")
        out.append({k: enc[k].astype(np.int64) for k in ("input_ids", "attention_mask", "token_type_ids")})
    return out, f"{len(sentences)} dev sentences"


def agreement(runner, reference, batches: list[dict]) -> float:
    """Argmax agreement with eager FP32 on the same batches."""
    same = total = 0
    for b in batches:
        same += int((runner(b).argmax(-1) == reference(b).argmax(-1)).sum())
        total += len(b["input_ids"])
    return round(same / total, 4)


def render(result: dict, source: str = "reports/gpu/gpu_check.json") -> str:
    """The Markdown page: the comparison page's GPU-check table (one renderer for both)."""
    from compress.report.gpu_check import standalone_markdown

    return standalone_markdown(result, source)


def measure_geometry(geom: str, result: dict, tmp: Path, timing: tuple, sentences: list[str],
                     variants=VARIANTS) -> None:
    """Every variant of one geometry into result['rows'] (skipped rows with their reason)."""
    path = source = reference = batches = None
    for variant in variants:
        row = {"geometry": geom, "variant": variant}
        if not result["cuda"]["usable"]:
            result["rows"].append({**row, "status": "skipped", "reason": result["cuda"]["reason"]})
            continue
        if path is None:
            path, source = model_dir(geom, GEOMETRIES[geom], tmp)
            reference = variant_runner("eager_fp32", path, geom)[0]
            batches, result["agreement_inputs"] = agreement_batches(path, sentences)
        runner, why = variant_runner(variant, path, geom)
        if runner is None:
            result["rows"].append({**row, "status": "skipped", "reason": why})
            continue
        t0 = time.perf_counter()
        row.update(status="ok", source=source, points=measure_variant(runner, POINTS, *timing))
        if variant != "eager_fp32":
            row["agreement_vs_eager_fp32"] = agreement(runner, reference, batches)
        row["wall_s"] = round(time.perf_counter() - t0, 1)
        result["rows"].append(row)
        print(f"{geom} {variant}: " + ", ".join(
            f"{p['point']} {p.get('latency_ms_p50', p['status'])}" for p in row["points"]), flush=True)
        del runner
        torch.cuda.empty_cache()


def p50_at(result: dict, geom: str, variant: str, point: str = "1x128") -> float | None:
    for r in result["rows"]:
        if r["geometry"] == geom and r["variant"] == variant and r["status"] == "ok":
            p = next((p for p in r["points"] if p["point"] == point), None)
            return p["latency_ms_p50"] if p and p["status"] == "ok" else None
    return None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(REPO / "reports" / "gpu" / "gpu_check"), help="writes OUT.json and OUT.md")
    ap.add_argument("--geometries", nargs="+", default=list(GEOMETRIES), choices=list(GEOMETRIES))
    ap.add_argument("--dev", type=Path, default=SHARED_DATA / "sst2" / "dev.tsv",
                    help="GLUE-style TSV whose sentences the agreement check runs on (default: shared SST-2 dev)")
    ap.add_argument("--quick", action="store_true", help="fewer queries per point")
    ap.add_argument("--no-tests", action="store_true", help="skip running the suite's GPU tests")
    ap.add_argument("--compile", action="store_true",
                    help="also torch.compile(mode='reduce-overhead') FP16 of the student (a compile per shape)")
    args = ap.parse_args(argv)
    timing = (3, 10, 0.2) if args.quick else (10, 50, 1.0)
    import transformers

    result = {"command": "python benchmarks/gpu_check.py " + " ".join(argv if argv is not None else sys.argv[1:]),
              "cuda": cuda_facts(), "libraries": {"torch": torch.__version__, "transformers": transformers.__version__},
              "points": [f"{b}x{s}" for b, s in POINTS], "rows": [], "speedups": {}}
    if not args.no_tests:
        result["tests"] = run_gpu_tests()
    sentences = dev_sentences(args.dev)
    with tempfile.TemporaryDirectory() as tmp:
        for geom in args.geometries:
            extra = ("compile_fp16",) if args.compile and geom == "student" else ()
            measure_geometry(geom, result, Path(tmp), timing, sentences, VARIANTS + extra)
            eager, graph = p50_at(result, geom, "eager_fp32"), p50_at(result, geom, "cudagraph_fp16")
            if eager and graph:
                result["speedups"][geom] = round(eager / graph, 2)
    graph_bb = p50_at(result, "bert-base", "cudagraph_fp16")
    if graph_bb is not None:
        result["published_reference"] = {**PUBLISHED_TRT_BERT_BASE_1X128_MS, "measured_ms": graph_bb,
                                          "here": result["cuda"].get("device", "?")}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n")
    page = render(result, str(out.with_suffix(".json")))
    out.with_suffix(".md").write_text(page)
    print(page)
    return 0


if __name__ == "__main__":
    sys.exit(main())
