"""The backend registry: one `Backend` descriptor per artifact format.

Each backend module registers its descriptor when it is imported (`register(Backend(...))`
at module level). Everything that needs to know the formats asks this registry: the
runner lookup (`compress.backends.base.runner_class`), artifact recognition
(`recognise`, used by `compress predict`), the weight files a size is measured over, the
model card's usage snippet (`compress.report.select`), the colour on the HTML page and the
libraries whose versions the environment table records.

In:  a format name (`get`, `known`) or an artifact directory (`recognise`, `read_manifest`).
Out: the format's descriptor; `(format, precision)` of a directory.
Refused: an unknown format (ValueError naming the known ones), a second descriptor for a
format already registered by another module, a manifest that is not a JSON object.

Importing a backend is lazy: `BUILTIN` maps each in-tree format to the module that
registers it, imported on first use, so `compress predict` on an ONNX artifact imports the
ONNX Runtime backend and no other (no torch). A backend outside this package registers
through the same `register` call (the Optimum peer check, the fake backend of
tests/test_registry.py); `plugin_modules` lists the modules that did, so a measurement
child process (spawned, a fresh interpreter) imports them again before it looks a format up.

This module imports nothing beyond the standard library.
"""
from __future__ import annotations

import importlib
import json
from dataclasses import dataclass, replace
from pathlib import Path

PRECISIONS = ("fp32", "fp16", "bf16", "int8")
MANIFEST = "manifest.json"  # written by every stage into every artifact directory it builds

# format -> the module whose import registers it (in recognition order: a directory is the
# first format whose marker file it holds; pytorch, with no marker, is the fallback)
BUILTIN: dict[str, str] = {
    "tensorrt": "compress.backends.tensorrt_runner",
    "openvino": "compress.backends.openvino_runner",
    "pytorch_int8": "compress.backends.torchao",
    "pytorch_inc": "compress.backends.inc_artifact",
    "onnx": "compress.backends.onnx_runtime",
    "pytorch_cudagraph": "compress.backends.cudagraph",
    "pytorch": "compress.backends.pytorch",
}


@dataclass(frozen=True)
class Backend:
    """What the rest of the project needs to know of one artifact format.

    runners: target ("cpu", "gpu") -> "module:Class" of its runner (the interface in
        compress.backends.base), or "skip:<why it cannot run there>".
    marker: a file whose presence marks a directory of this format when it has no manifest
        (None: recognised by manifest only, or the fallback).
    precision_of: "module:function" taking the directory and returning its precision, for a
        directory recognised by its marker; None: `default_precision`.
    weight_globs: the files an artifact's size and hash are measured over, in that order.
    usage: the model card's "how to load it" line.
    libraries: PyPI distributions whose versions the environment table records.
    color: the format's colour on the HTML page.
    """
    format: str
    runners: dict[str, str]
    weight_globs: tuple[str, ...]
    usage: str
    color: str
    libraries: tuple[str, ...] = ()
    marker: str | None = None
    precision_of: str | None = None
    default_precision: str = "fp32"
    module: str = ""  # filled in by register(): where the descriptor came from

    def __post_init__(self):
        if not self.format or not self.format.replace("_", "").isalnum():
            raise ValueError(f"backend format must be a word (letters, digits, _), got {self.format!r}")
        for target, spec in self.runners.items():
            if not (spec.startswith("skip:") or (":" in spec and all(spec.split(":", 1)))):
                raise ValueError(f"backend {self.format}: runner for {target} must be 'module:Class' or "
                                 f"'skip:<reason>', got {spec!r}")
        if not self.weight_globs:
            raise ValueError(f"backend {self.format}: weight_globs must name at least one pattern")
        if self.default_precision not in PRECISIONS:
            raise ValueError(f"backend {self.format}: default_precision must be one of {PRECISIONS}")


_REGISTRY: dict[str, Backend] = {}


def register(backend: Backend, module: str | None = None) -> Backend:
    """Add a descriptor (at the registering module's import). Registering the same format
    again from the same module (a re-import) replaces it; from another module is an error."""
    import sys

    module = module or sys._getframe(1).f_globals.get("__name__", "")
    old = _REGISTRY.get(backend.format)
    if old is not None and old.module != module:
        raise ValueError(f"backend format {backend.format!r} is already registered by {old.module}")
    backend = replace(backend, module=module)
    _REGISTRY[backend.format] = backend
    return backend


def unregister(fmt: str) -> None:
    """Remove a plugin's descriptor (tests, the peer check's context); built-ins stay."""
    if fmt in BUILTIN:
        raise ValueError(f"{fmt} is a built-in backend; it cannot be unregistered")
    _REGISTRY.pop(fmt, None)


def known(fmt: str) -> bool:
    return fmt in _REGISTRY or fmt in BUILTIN


def formats() -> list[str]:
    """Every format: the built-ins in recognition order, then plugins in registration order."""
    return [*BUILTIN, *(f for f in _REGISTRY if f not in BUILTIN)]


def get(fmt: str) -> Backend:
    """The descriptor of `fmt`, importing its built-in module on first use."""
    if fmt not in _REGISTRY and fmt in BUILTIN:
        importlib.import_module(BUILTIN[fmt])
    if fmt not in _REGISTRY:
        raise ValueError(f"unknown artifact format {fmt!r}: registered formats are {', '.join(formats())}")
    return _REGISTRY[fmt]


def backends() -> list[Backend]:
    """Every descriptor (imports every built-in backend module: for reports, not hot paths)."""
    return [get(f) for f in formats()]


def plugin_modules() -> list[str]:
    """Modules outside BUILTIN that registered a backend: what a spawned child re-imports."""
    return [b.module for f, b in _REGISTRY.items() if f not in BUILTIN and b.module not in ("", "__main__")]


def load_plugins(modules: list[str]) -> None:
    for name in modules:
        importlib.import_module(name)


def resolve(spec: str):
    """The object a "module:attribute" spec names."""
    module, attr = spec.split(":", 1)
    return getattr(importlib.import_module(module), attr)


# --- artifact manifests ------------------------------------------------------------------

def write_manifest(directory: str | Path, fmt: str, precision: str, parent: str | None = None,
                   stage: str | None = None) -> dict:
    """Record what a built directory is (format, precision, parent, stage) in manifest.json,
    so later stages and `compress predict` read it instead of guessing from names or files."""
    if not known(fmt):
        raise ValueError(f"{directory}: unknown artifact format {fmt!r}: registered formats are {', '.join(formats())}")
    if precision not in PRECISIONS:
        raise ValueError(f"{directory}: unknown precision {precision!r}, choose from {PRECISIONS}")
    meta = {"format": fmt, "precision": precision, "parent": parent, "stage": stage,
            "backend": BUILTIN.get(fmt) or _REGISTRY[fmt].module}
    Path(directory, MANIFEST).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    return meta


def read_manifest(directory: str | Path) -> dict | None:
    path = Path(directory, MANIFEST)
    if not path.is_file():
        return None
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{path}: unreadable manifest ({e}); rebuild the artifact with `dvc repro`") from None
    if not isinstance(meta, dict) or not isinstance(meta.get("format"), str):
        raise ValueError(f"{path}: a manifest must be a JSON object with a 'format'")
    return meta


def recognise(directory: str | Path) -> tuple[str, str]:
    """(format, precision) of an artifact directory: its manifest when it has one (imports
    only that format's backend), else the first format whose marker file it holds, else
    pytorch (a saved Hugging Face model)."""
    directory = Path(directory)
    meta = read_manifest(directory)
    if meta is not None:
        if meta.get("backend") and meta["format"] not in BUILTIN and meta["format"] not in _REGISTRY:
            importlib.import_module(meta["backend"])  # a plugin's directory names its module
        backend = get(meta["format"])
        return backend.format, meta.get("precision") or backend.default_precision
    for fmt in formats():
        backend = get(fmt)
        if backend.marker and (directory / backend.marker).is_file():
            precision = resolve(backend.precision_of)(directory) if backend.precision_of else backend.default_precision
            return fmt, precision
    return "pytorch", "fp32"


def libraries(loaded_only: bool = False) -> tuple[str, ...]:
    """The libraries of every backend (loaded_only: of those this process has imported, the
    ones a stage used), each once, in registry order."""
    out: list[str] = []
    for b in ([_REGISTRY[f] for f in formats() if f in _REGISTRY] if loaded_only else backends()):
        out += [lib for lib in b.libraries if lib not in out]
    return tuple(out)
