"""The library's layout rules: modules a newcomer can read in minutes, and no import circle."""
import ast

from conftest import REPO

MAX_LINES = 500


def _modules():
    return sorted((REPO / "compress").rglob("*.py"))


def test_no_module_over_500_lines():
    long = [f"{p.relative_to(REPO)}: {n} lines" for p in _modules()
            if (n := len(p.read_text().splitlines())) > MAX_LINES]
    assert not long, f"split these modules (at most {MAX_LINES} lines each):\n" + "\n".join(long)


def _module_name(path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _top_level_imports(path) -> set[str]:
    """compress modules a module imports when it is imported (module-level statements;
    imports inside functions run later and cannot form a circle at import time)."""
    pkg = _module_name(path).split(".")
    if path.name != "__init__.py":
        pkg = pkg[:-1]
    out = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = ".".join(pkg[:len(pkg) - node.level + 1])
                base = f"{up}.{base}" if base else up
            out |= {base} | {f"{base}.{a.name}" for a in node.names}
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
    return out


def test_no_import_circle():
    graph = {}
    names = {_module_name(p) for p in _modules()}
    for p in _modules():
        graph[_module_name(p)] = {m for m in _top_level_imports(p) if m in names and m != _module_name(p)}
    # depth-first search for a back edge
    state, stack, circles = {}, [], []

    def visit(m):
        state[m] = "open"
        stack.append(m)
        for n in sorted(graph[m]):
            if state.get(n) == "open":
                circles.append(" -> ".join(stack[stack.index(n):] + [n]))
            elif n not in state:
                visit(n)
        stack.pop()
        state[m] = "done"

    for m in sorted(graph):
        if m not in state:
            visit(m)
    assert not circles, "import circles:\n" + "\n".join(circles)


def test_the_circle_finder_sees_a_circle(tmp_path, monkeypatch):
    # the finder itself, on a two-module circle written here
    (tmp_path / "compress").mkdir()
    (tmp_path / "compress" / "a.py").write_text("from .b import x\n")
    (tmp_path / "compress" / "b.py").write_text("from .a import y\n")
    monkeypatch.setattr(__import__(__name__), "REPO", tmp_path)
    try:
        test_no_import_circle()
    except AssertionError as e:
        assert "compress.a -> compress.b -> compress.a" in str(e)
    else:
        raise AssertionError("a two-module circle went unseen")


def test_importing_the_backends_prints_no_third_party_noise():
    """torchao's CUDA-kernel load failures and torch's Enum deprecation notes are dropped at
    their loggers (compress/__init__.py); a real warning of those loggers still shows."""
    import subprocess
    import sys

    code = ("import logging, compress.backends.torchao, compress.backends.inc_graph\n"
            "logging.getLogger('torchao').warning('Failed to load /x/torchao/_C_other.so: boom')\n")
    res = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    assert "_C_mxfp8" not in res.stderr and "register_constant" not in res.stderr, res.stderr
    assert "Failed to load /x/torchao/_C_other.so: boom" in res.stderr  # other records pass
