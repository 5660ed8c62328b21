"""What every part of the peer check shares: its two errors, the install hint of the extra
they name, the verdict on interleaved latency rounds, and a JSON-friendly copy of a
library's config values.

Exit statuses: InputError -> 2 (a bad argument or input file), PeerBuildError -> 1 (Optimum's
route could not be built). Neither is raised for what the numbers say: the check is a
benchmark, not a gate.
"""
from __future__ import annotations

INSTALL_HINT = 'pip install -e ".[peer]"'


class InputError(Exception):
    """A bad argument or input file; the message names it. Exit status 2."""


class PeerBuildError(Exception):
    """Optimum's route could not be built from --model. Exit status 1."""


def speed_verdict(round_ratios: list[float], peer: str) -> str:
    """How the per-round p50 ratios (peer / project: > 1, the project was faster) read."""
    if min(round_ratios) >= 1.0:
        return "project as fast or faster in every round"
    if max(round_ratios) < 1.0:
        return f"{peer} faster in every round"
    return "mixed across rounds: the difference is within run-to-run noise"


def plain(value):
    """A JSON-friendly copy of a quantization config field (enums -> their names)."""
    if isinstance(value, (list, tuple, set)):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return getattr(value, "name", None) or str(value)
