"""No import cycle among studyqueue's modules, imports inside functions included: a lazy
import that closes a cycle hides behaviour at the call site (a model's ``save()`` that wrote
other tables was one)."""

from __future__ import annotations

import ast
import functools
import os
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import studyqueue

ROOT = Path(studyqueue.__file__).parent


@functools.cache
def tree(path: Path) -> ast.Module:
    """``path``'s syntax tree, parsed once per process. CPython 3.11 keeps the AST builder's
    depth in one place for all threads: when another thread parses meanwhile (3.11's
    traceback module parses to place its carets, e.g. a test server's thread printing a
    broken pipe), it raises a spurious "AST constructor recursion depth mismatch"
    (python/cpython#106905). Parsed again, it reads."""
    source = path.read_text(encoding="utf-8")
    try:
        return ast.parse(source)
    except SystemError:
        return ast.parse(source)


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports() -> dict[str, set[str]]:
    """Each module's studyqueue imports, wherever in the module they are written."""
    paths = [p for p in ROOT.rglob("*.py") if "migrations" not in p.parts]
    modules = {module_name(p): p for p in paths}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found: set[str] = set()
        for node in ast.walk(tree(path)):
            if isinstance(node, ast.Import):
                found |= {alias.name for alias in node.names if alias.name in modules}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*up, *([node.module] if node.module else [])])
                for alias in node.names:
                    if f"{base}.{alias.name}" in modules:
                        found.add(f"{base}.{alias.name}")
                    elif base in modules:
                        found.add(base)
        # A package's __init__ importing its own modules is no cycle of concepts.
        graph[name] = {m for m in found if m != name and not name.startswith(f"{m}.")}
    return graph


def test_the_import_graph_has_no_cycle():
    graph = imports()
    assert len(graph) > 50  # the walk found the app
    try:
        tuple(TopologicalSorter(graph).static_order())
    except CycleError as exc:
        raise AssertionError(f"import cycle: {' -> '.join(exc.args[1])}") from None


# The folders in the order of a job's path (docs/architecture.md): each imports only from
# those after it. The operator's surfaces share the first rank; the leaves the last.
LAYERS = [
    {"management", "admin", "adminsite", "templatetags", "views", "urls", "apps", "checks"},
    {"forms", "monitoring"},
    {"consumer"},
    {"workers"},
    {"sessions"},
    {"sets"},
    {"explanations"},
    {"services"},
    {"queue"},
    {"models"},
    {"conf", "exceptions", "times", "formats"},
]


def layer(module: str) -> int:
    top = module.split(".")[1] if "." in module else module
    (rank,) = [rank for rank, names in enumerate(LAYERS) if top in names]
    return rank


def test_no_folder_imports_upward():
    upward = sorted(
        f"{source} imports {target}"
        for source, targets in imports().items()
        for target in targets
        if source != "studyqueue" and target != "studyqueue" and layer(target) < layer(source)
    )
    assert upward == []


# A kind is its module: beside the enum that declares it and its worker, one module at most
# may name it (what queues it). The operator's surfaces and the schema's history aside.
SURFACES = ("studyqueue.admin", "studyqueue.management", "studyqueue.migrations")


def test_every_kind_but_the_explanation_is_named_in_at_most_three_modules():
    from studyqueue.models import JobKind

    naming: dict[str, set[str]] = {kind.name: set() for kind in JobKind}
    for path in ROOT.rglob("*.py"):
        name = module_name(path)
        for node in ast.walk(tree(path)):
            named = isinstance(node, ast.Attribute) and node.attr in naming
            named = named and isinstance(node.value, ast.Name) and node.value.id == "JobKind"
            if named and not name.startswith(SURFACES):
                naming[node.attr].add(name)
            elif isinstance(node, ast.ClassDef) and node.name == "JobKind":
                for kind in naming.values():
                    kind.add(name)  # the enum names every kind
    spread = {kind: sorted(modules) for kind, modules in naming.items() if len(modules) > 3}
    assert set(spread) <= {"EXPLANATION"}, spread


def test_no_module_is_over_650_lines_and_the_consumer_class_is_at_most_300():
    """Small modules with one concern: one that outgrows this is two concerns."""
    long = {
        module_name(path): lines
        for path in ROOT.rglob("*.py")
        if "migrations" not in path.parts
        and (lines := len(path.read_text(encoding="utf-8").splitlines())) > 650
    }
    assert not long, long
    (consumer,) = [
        node
        for node in tree(ROOT / "consumer" / "consumer.py").body
        if isinstance(node, ast.ClassDef) and node.name == "Consumer"
    ]
    assert consumer.end_lineno is not None
    assert consumer.end_lineno - consumer.lineno + 1 <= 300


def test_make_test_asks_whether_postgresql_is_up_before_django_is_set_up(python):
    """``make test``'s ``tests.helpers.pg_ready`` runs with no settings: what it imports of the
    app (``queue.pg``) must not import the models."""
    import subprocess

    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    done = subprocess.run(
        [python, "-m", "tests.helpers.pg_ready", "postgres://nobody@127.0.0.1:1/none"],
        cwd=ROOT.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (done.returncode, done.stderr) == (1, "")  # not reachable, and no traceback
