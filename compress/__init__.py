"""compress: distill, prune, quantize, export and measure BERT classifiers."""
import logging as _logging
import sys as _sys

__version__ = "0.1.0"


class _KnownImportNoise(_logging.Filter):
    """Drops two warnings that every import of torchao (pulled in by transformers and by the
    torchao INT8 backend) prints and that say nothing a user can act on:

    - torchao's own logger: "Failed to load .../torchao/_C_mxfp8...so" and "..._C_cutlass...so",
      its CUDA-only kernels, on a torch without CUDA (on a CUDA build they stay visible);
    - torch.utils._pytree: "<enum ...> is an Enum subclass and is now natively supported by
      torch.compile ... register_constant() ... deprecated", torchao registering its enums.

    Every other record of those loggers, and every other logger, is untouched."""

    def filter(self, record: _logging.LogRecord) -> bool:
        msg = record.getMessage()
        if record.name == "torchao" and msg.startswith("Failed to load") and "torchao/_C_" in msg:
            torch = _sys.modules.get("torch")
            cpu_only = torch is not None and getattr(torch.version, "cuda", None) is None
            return not (cpu_only and ("_C_mxfp8" in msg or "_C_cutlass" in msg))
        if record.name == "torch.utils._pytree" and "is an Enum subclass and is now natively supported" in msg:
            return False
        return True


for _name in ("torchao", "torch.utils._pytree"):
    _logging.getLogger(_name).addFilter(_KnownImportNoise())
