"""The task kinds: one registry of three kinds behind one interface, and no code outside
compress/tasks/ naming a dataset (presets live in params.yaml)."""
import ast

import numpy as np
import pytest

from compress.core.errors import DataError
from compress.measure.metrics import bootstrap_ci, classification_metrics
from compress.tasks.base import KINDS, Task, get_kind
from conftest import REPO

TASK_NAMES = ("sst2", "mrpc", "conll2003", "banking77", "ncbi_disease")


def test_three_kinds_are_registered_with_their_heads_and_metrics():
    get_kind("classification")
    assert set(KINDS) == {"classification", "pair_classification", "token_classification"}
    assert [KINDS[k].head for k in sorted(KINDS)] == ["sequence", "sequence", "token"]
    assert KINDS["classification"].metrics(77) == ("accuracy", "macro_f1")
    assert KINDS["pair_classification"].metrics(2) == ("accuracy", "f1")
    assert KINDS["pair_classification"].metrics(3) == ("accuracy", "macro_f1")
    assert KINDS["token_classification"].primary_metric == "f1"
    with pytest.raises(DataError, match="unknown task kind 'regression'"):
        get_kind("regression")


def test_a_task_round_trips_through_its_record():
    t = Task("intents", "classification", ("a", "b", "c"), ("A", "B", "C"))
    assert Task.from_dict(t.to_dict(), "here") == t and t.num_labels == 3 and not t.token_level
    with pytest.raises(DataError, match="2 labels but 1 label names"):
        Task("x", "classification", ("a", "b"), ("A",))


def test_macro_f1_and_its_interval():
    labels = np.array([0, 0, 1, 1, 2, 2, 2, 2])
    pred = np.array([0, 1, 1, 1, 2, 2, 0, 2])
    logits = np.eye(3)[pred]
    m = classification_metrics(logits, labels, ("accuracy", "macro_f1"))
    f1 = [2 / 4, 4 / 5, 6 / 7]  # per class: 2tp / (2tp + fp + fn)
    assert m["accuracy"] == 0.75 and m["macro_f1"] == pytest.approx(np.mean(f1), abs=1e-6)
    low, high = bootstrap_ci(pred, labels, "macro_f1", num_classes=3)
    assert 0 <= low <= m["macro_f1"] <= high <= 1
    assert bootstrap_ci(pred, labels, "macro_f1", num_classes=3) == (low, high)  # seeded


def _code_strings(path):
    """String constants of a module that are not docstrings."""
    tree = ast.parse(path.read_text())
    docs = {id(n.body[0].value) for n in ast.walk(tree)
            if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and n.body
            and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    return [(n.lineno, n.value) for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs]


def test_no_code_outside_the_task_kinds_names_a_dataset():
    """Datasets are params presets: code asks the task (kind, labels, metrics) instead
    (PrepareConfig has no default dataset: params.yaml names it)."""
    allowed = set()
    found = []
    for path in [*(REPO / "compress").rglob("*.py"), *(REPO / "pipelines").glob("*.py")]:
        rel = str(path.relative_to(REPO))
        if rel.startswith("compress/tasks/"):
            continue
        for line, text in _code_strings(path):
            if any(name in text.lower() for name in TASK_NAMES) and (rel, text) not in allowed:
                found.append(f"{rel}:{line}: {text!r}")
    assert not found, "code names a dataset:\n" + "\n".join(found)


KIND_FLAGS = {"token_level", "is_pair", "pair", "_token_level"}


def _kind_branches(path):
    """Places that branch on a task kind: an `if`/`while`/conditional expression or boolean
    operand reading a kind flag (token_level, is_pair, pair), an isinstance test against an
    example type (Sentence, Example), or a test of an output's rank (`.ndim == 3`)."""
    tree = ast.parse(path.read_text())
    found = []

    def flags(node):
        for n in ast.walk(node):
            if isinstance(n, ast.Attribute) and n.attr in KIND_FLAGS:
                yield n.attr
            if isinstance(n, ast.Call) and getattr(n.func, "id", None) == "isinstance" and len(n.args) == 2:
                if {getattr(t, "id", None) for t in ast.walk(n.args[1])} & {"Sentence", "Example"}:
                    yield "isinstance"
            if (isinstance(n, ast.Compare) and isinstance(n.left, ast.Attribute) and n.left.attr == "ndim"
                    and not isinstance(n.ops[0], ast.NotEq)):  # `ndim != 2`: a shape check, not a branch
                yield "ndim"

    for node in ast.walk(tree):
        if isinstance(node, (ast.If, ast.While, ast.IfExp, ast.Assert)):
            found += [(node.lineno, f) for f in flags(node.test)]
        elif isinstance(node, ast.BoolOp):
            found += [(node.lineno, f) for v in node.values for f in flags(v) if f != "ndim"]
        elif isinstance(node, ast.comprehension):
            found += [(node.target.lineno, f) for c in node.ifs for f in flags(c)]
    return sorted(set(found))


def test_no_code_outside_the_task_kinds_branches_on_a_kind():
    """Stages, backends and commands ask the task's kind (compress.tasks) to read, encode,
    score and print; they never test which kind it is. compress/data/tokens.py's encoders are
    chosen by a table of example types (ENCODERS), not by a test."""
    found = []
    for path in [*(REPO / "compress").rglob("*.py"), *(REPO / "pipelines").glob("*.py")]:
        rel = str(path.relative_to(REPO))
        if not rel.startswith("compress/tasks/"):
            found += [f"{rel}:{line}: {what}" for line, what in _kind_branches(path)]
    assert not found, "code branches on a task kind:\n" + "\n".join(found)


def test_the_kind_branch_finder_finds_branches(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("def f(task, ex, out):\n    if task.token_level:\n        pass\n"
                   "    x = 1 if isinstance(ex, Sentence) else 2\n    y = [o for o in out if o.ndim == 3]\n"
                   "    return task.is_pair and x\n")
    assert [w for _, w in _kind_branches(bad)] == ["token_level", "isinstance", "ndim", "is_pair"]
