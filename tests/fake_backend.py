"""A backend from outside compress/: the whole of what adding one takes (its module, here;
a params section and a dvc.yaml stage for a pipeline stage that builds it). Used by
tests/test_registry.py. It runs a saved PyTorch model through numpy-fed torch calls, but
the project only knows it by its descriptor."""
from __future__ import annotations

import numpy as np

from compress.backends.base import Artifact
from compress.backends.registry import Backend, register

FORMAT = "fake_numpy"

BACKEND = register(Backend(
    format=FORMAT,
    runners={"cpu": "fake_backend:FakeRunner", "gpu": "skip:the fake backend runs on the CPU only"},
    weight_globs=("*.safetensors",),
    usage="fake_backend.FakeRunner(Artifact(name, path, 'fake_numpy'), 'cpu', threads)",
    color="#abcdef",
    libraries=("pytest",),
    marker="fake.json",
))


class FakeRunner:
    """The runner interface of compress.backends.base over a saved PyTorch classifier."""
    backend = "fake-cpu"

    def __init__(self, artifact: Artifact, target: str, threads: int):
        from compress.backends.pytorch import TorchRunner

        self.inner = TorchRunner(Artifact(artifact.name, artifact.path), target, threads)
        self.tokenizer, self.num_labels, self.num_params = (self.inner.tokenizer, self.inner.num_labels,
                                                            self.inner.num_params)

    @staticmethod
    def unavailable(target: str) -> str | None:
        return None if target == "cpu" else "the fake backend runs on the CPU only"

    def __call__(self, batch: dict[str, np.ndarray]) -> np.ndarray:
        return self.inner(batch)

    def synchronize(self) -> None:
        pass
