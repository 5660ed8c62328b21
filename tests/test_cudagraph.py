"""CUDA-graph replay (issue 15): the capture/replay bookkeeping against a fake device on the
CPU, the capturable forward, and the real capture on a GPU (skipped without CUDA)."""
import numpy as np
import pytest
import torch

from compress.backends.cudagraph import CudaGraphRunner, GraphCache, graph_forward
from compress.backends.base import Artifact
from compress.backends.pytorch import TorchRunner, cuda_unavailable
from conftest import tiny_model


class FakeDevice:
    """Graph semantics on the CPU: capture runs the forward once into a static output;
    replay recomputes it from the (static) input buffers into that same output."""

    def __init__(self):
        self.captures, self.replays = [], 0

    def buffers(self, batch, seq):
        return {k: torch.zeros((batch, seq), dtype=torch.int64)
                for k in ("input_ids", "attention_mask", "token_type_ids")}

    def capture(self, forward, static):
        self.captures.append(tuple(static["input_ids"].shape))
        out = forward(**static).clone()
        return (lambda: out.copy_(forward(**static))), out

    def replay(self, graph):
        self.replays += 1
        graph()

    def synchronize(self):
        pass


def _batch(rows, seq, seed):
    rng = np.random.default_rng(seed)
    ids = rng.integers(1000, 2000, size=(rows, seq), dtype=np.int64)
    mask = np.ones((rows, seq), dtype=np.int64)
    for r in range(rows):  # ragged rows: padding at the end
        n = int(rng.integers(2, seq + 1))
        ids[r, n:], mask[r, n:] = 0, 0
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}


@torch.inference_mode()
def _eager(model, batch):
    return model(**{k: torch.from_numpy(v) for k, v in batch.items()}).logits.numpy()


def test_capturable_forward_matches_the_model():
    model, _ = tiny_model()
    model.eval()
    b = _batch(4, 24, 0)
    with torch.inference_mode():
        got = graph_forward(model)(**{k: torch.from_numpy(v) for k, v in b.items()}).numpy()
    np.testing.assert_allclose(got, _eager(model, b), atol=1e-5)


def test_one_capture_per_bucket_and_replays_return_only_the_rows_asked():
    model, _ = tiny_model()
    model.eval()
    dev = FakeDevice()
    cache = GraphCache(graph_forward(model), dev, seq_multiple=16)
    queries = [_batch(1, 16, 1), _batch(3, 20, 2), _batch(4, 32, 3), _batch(2, 7, 4), _batch(1, 16, 5)]
    with torch.inference_mode():
        for q in queries:
            out = cache(q)
            assert out.shape == (q["input_ids"].shape[0], 2)
            # padding rows and positions (mask 0) leave the real rows' logits unchanged,
            # and nothing of a bigger earlier query in the same bucket leaks in
            np.testing.assert_allclose(out, _eager(model, q), atol=1e-5)
    assert dev.captures == [(1, 16), (4, 32), (2, 16)]  # (3, 20) and (4, 32) share a bucket
    assert dev.replays == cache.replays == len(queries)


def test_runner_through_the_fake_device_agrees_with_eager(tmp_path, tiny_model_dir):
    art = Artifact("tiny", tiny_model_dir)
    graphed = CudaGraphRunner(art, "gpu", threads=2, device=FakeDevice())
    eager = TorchRunner(art, "cpu", threads=2)
    for seed, (rows, seq) in enumerate([(1, 16), (8, 128), (5, 40)]):
        b = _batch(rows, seq, seed)
        np.testing.assert_allclose(graphed(b), eager(b), atol=1e-5)
    assert graphed.num_params == eager.num_params and graphed.num_labels == 2


def test_a_tagger_replays_per_token_logits_of_the_real_positions(conll):
    """A tagger's output is (batch, seq, tags): rows and positions padded up to the captured
    bucket are cut off, and the real positions agree with eager."""
    root, *_ = conll
    art = Artifact("tagger", root / "teacher")
    graphed = CudaGraphRunner(art, "gpu", threads=2, device=FakeDevice())
    eager = TorchRunner(art, "cpu", threads=2)
    for seed, (rows, seq) in enumerate([(3, 20), (1, 7)]):
        b = _batch(rows, seq, seed)
        out = graphed(b)
        assert out.shape == (rows, seq, 9)
        real = b["attention_mask"] == 1
        np.testing.assert_allclose(out[real], eager(b)[real], atol=1e-5)


def test_skip_reasons_without_cuda():
    assert "NVIDIA GPUs only" in CudaGraphRunner.unavailable("cpu")
    reason = cuda_unavailable()
    if reason:
        assert CudaGraphRunner.unavailable("gpu") == reason


@pytest.mark.skipif(cuda_unavailable() is not None, reason=f"no usable GPU: {cuda_unavailable()}")
def test_real_capture_on_the_gpu_agrees_with_eager_fp32(tiny_model_dir):
    fp32 = TorchRunner(Artifact("tiny", tiny_model_dir), "gpu", threads=2)
    graphed = CudaGraphRunner(Artifact("tiny_fp16", tiny_model_dir, precision="fp16"), "gpu", threads=2)
    for seed, (rows, seq) in enumerate([(1, 16), (1, 128), (32, 128), (3, 50)]):
        b = _batch(rows, seq, seed)
        ref, got = fp32(b), graphed(b)
        assert (ref.argmax(-1) == got.argmax(-1)).all()
        np.testing.assert_allclose(got, ref, atol=2e-2)
    assert len(graphed.cache.entries) == 4 and graphed.cache.replays == 4


@pytest.mark.skipif(cuda_unavailable() is None, reason="this machine has CUDA: there the check measures "
                                                        "(run benchmarks/gpu_check.py by hand)")
def test_gpu_check_reports_every_row_skipped_with_the_reason(tmp_path):
    import json
    import sys

    from conftest import REPO

    sys.path.insert(0, str(REPO))
    from benchmarks import gpu_check

    assert gpu_check.main(["--no-tests", "--out", str(tmp_path / "gpu")]) == 0
    result = json.loads((tmp_path / "gpu.json").read_text())
    assert result["cuda"]["usable"] is False
    assert len(result["rows"]) == len(gpu_check.GEOMETRIES) * len(gpu_check.VARIANTS)
    assert all(r["status"] == "skipped" and r["reason"] == cuda_unavailable() for r in result["rows"])
    assert "skipped: " in (tmp_path / "gpu.md").read_text()
