"""The package's layers, read from its source: who may import whom (DESIGN.md's table).

Every import statement of ``src/pyexecutorch`` counts, at module level or inside a
function, relative ones resolved; an import of a package counts as an import of every
package above it too (Python runs their ``__init__`` first). Two checks:

- each import from one layer into another is one the table allows, or one of the few
  listed exceptions (each with its reason);
- the runtime side (what a device-like host with numpy alone runs: the schema, the
  compiled tier's machinery, kernels, runtime, portable_lib, backends' runtime halves,
  the ETDump/Inspector/bundled-program readers, the LLM runner) reaches no torch
  through any chain of imports.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
ROOT = "pyexecutorch"

# Each layer and the layers it may import besides itself (DESIGN.md, "Layers and who may
# import whom"). ``schema`` is the bottom every layer may read. ``backends`` and
# ``devtools`` list their ahead-of-time halves' reach; their runtime halves are held to
# the torch-free closure below.
MAY_IMPORT: dict[str, frozenset[str]] = {
    "schema": frozenset(),
    "jit": frozenset({"schema"}),
    "kernels": frozenset({"schema", "jit"}),
    "runtime": frozenset({"schema", "jit", "kernels", "backends"}),
    "portable_lib": frozenset({"schema", "runtime", "devtools"}),
    "backends": frozenset({"schema", "jit", "kernels", "runtime", "exir"}),
    "exir": frozenset({"schema", "kernels"}),
    "export": frozenset({"schema", "exir", "backends"}),  # the one-call export over exir
    "extension.llm": frozenset({"schema", "jit", "kernels", "runtime", "exir", "backends"}),
    "extension.pybindings": frozenset({"portable_lib"}),
    "extension.pytree": frozenset(),
    "data": frozenset({"schema", "runtime", "extension.llm"}),
    "devtools": frozenset({"schema", "runtime", "exir"}),
    "examples": frozenset({"schema", "runtime", "exir", "extension.llm", "backends"}),
    "cli": None,  # everything, lazily
    "__main__": frozenset({"cli"}),
    "__init__": frozenset(),
}

# Third-party libraries only the ahead-of-time side may import.
TORCH_SIDE = frozenset({"torch", "torchao", "transformers", "torchvision"})
MAY_IMPORT_TORCH = frozenset(
    {"exir", "export", "backends", "extension.llm", "devtools", "examples", "cli", "data"}
)

# Imports the table does not allow, each kept on purpose: (importing module, imported
# module) -> why.
EXCEPTIONS: dict[tuple[str, str], str] = {
    ("pyexecutorch.runtime.outputs", "torch"): (
        "torch outputs asked for by the caller (PYEXECUTORCH_OUTPUT=torch), imported then"
    ),
    ("pyexecutorch.exir.backend.backend_details", "pyexecutorch.backends"): (
        "to_backend finds a backend by its name among the backends' ahead-of-time halves"
    ),
}

# The modules a host without torch runs, and the packages whose every module is such.
RUNTIME_SIDE_PACKAGES = ("schema", "jit", "kernels", "runtime", "portable_lib")
RUNTIME_SIDE_MODULES = (
    "pyexecutorch.backends.xnnpack.runtime",
    "pyexecutorch.backends.example.runtime",
    "pyexecutorch.devtools.etdump",
    "pyexecutorch.devtools.inspector",
    "pyexecutorch.devtools.bundled_program.runtime",
    "pyexecutorch.extension.llm.runner",
)


@functools.cache
def modules() -> dict[str, Path]:
    """Every module of the package by its dotted name."""
    found = {}
    for path in sorted((SRC / ROOT).rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _resolved(module: str, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    is_package = modules()[module].name == "__init__.py"
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _with_parents(name: str) -> Iterator[str]:
    parts = name.split(".")
    for i in range(1, len(parts) + 1):
        yield ".".join(parts[:i])


@functools.cache
def imports() -> dict[str, frozenset[tuple[str, int, bool]]]:
    """Each module's imports: (imported module, line, at module level)."""
    known = modules()
    found = {}
    for module, path in known.items():
        tree = ast.parse(path.read_text(), str(path))
        top_level = {id(n) for n in tree.body}
        # (an import under a module-level if/try runs at import too)
        for n in tree.body:
            if isinstance(n, (ast.If, ast.Try)):
                top_level |= {id(c) for c in ast.walk(n)}
        targets = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _resolved(module, node)
                names = [
                    f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names
                ]
            else:
                continue
            for name in names:
                for each in _with_parents(name):
                    targets.add((each, node.lineno, id(node) in top_level))
        found[module] = frozenset(targets)
    return found


def layer(module: str) -> str:
    """The layer of a module of the package (its first part below ``pyexecutorch``, two
    parts under ``extension``)."""
    parts = module.split(".")
    if len(parts) == 1:
        return "__init__"
    if parts[1] == "extension" and len(parts) > 2:
        return f"extension.{parts[2]}"
    return parts[1]


def test_every_layer_is_in_the_table():
    assert {layer(m) for m in modules() if m != "pyexecutorch.extension"} <= set(MAY_IMPORT)


def _violations() -> list[str]:
    found = []
    for module, targets in imports().items():
        mine = layer(module)
        for target, line, _ in sorted(targets):
            top = target.split(".")[0]
            if (module, target) in EXCEPTIONS:
                continue
            if top == ROOT and target != ROOT and target != "pyexecutorch.extension":
                theirs = layer(target)
                allowed = MAY_IMPORT[mine]
                if theirs != mine and allowed is not None and theirs not in allowed:
                    found.append(f"{module}:{line} imports {target} ({mine} -> {theirs})")
            elif top in TORCH_SIDE and mine not in MAY_IMPORT_TORCH:
                found.append(f"{module}:{line} imports {target} ({mine} -> {top})")
    return found


def test_imports_follow_the_layer_table():
    assert _violations() == []


def test_the_exceptions_are_still_needed():
    every = {(m, t) for m, targets in imports().items() for t, _, _ in targets}
    assert set(EXCEPTIONS) <= every


def _runtime_side() -> set[str]:
    """The runtime side's roots: every module of its packages, and its listed modules."""
    return {m for m in modules() if layer(m) in RUNTIME_SIDE_PACKAGES or m in RUNTIME_SIDE_MODULES}


def _torch_reached() -> list[str]:
    """Each module-level import of a torch-side library that importing the runtime side
    runs, with the runtime-side module it is reached from. (A function's import of torch
    is held to the layer table instead.)"""
    table = imports()
    via: dict[str, str] = {m: m for m in _runtime_side()}  # module -> the root importing it
    stack = list(via)
    reached = set()
    while stack:
        module = stack.pop()
        for target, line, at_import in table.get(module, ()):
            if not at_import or (module, target) in EXCEPTIONS or target in via:
                continue
            if target.split(".")[0] in TORCH_SIDE:
                reached.add(f"{module}:{line} imports {target} (reached from {via[module]})")
            elif target in table:
                via[target] = via[module]
                stack.append(target)
    return sorted(reached)


def test_the_runtime_side_reaches_no_torch():
    assert _torch_reached() == []


@pytest.mark.parametrize(
    ("module", "expected"),
    [
        ("pyexecutorch.jit.simd", "jit"),
        ("pyexecutorch.extension.llm.runner", "extension.llm"),
        ("pyexecutorch", "__init__"),
    ],
)
def test_layer_names(module, expected):
    assert layer(module) == expected


def test_the_walk_sees_function_level_relative_and_indirect_imports(tmp_path, monkeypatch):
    package = tmp_path / ROOT
    (package / "kernels").mkdir(parents=True)
    (package / "runtime").mkdir()
    for init in (package, package / "kernels", package / "runtime"):
        (init / "__init__.py").write_text("")
    (package / "runtime" / "errors.py").write_text("class E(Exception): ...\n")
    (package / "kernels" / "a.py").write_text(
        "from ..runtime import errors\n\ndef f():\n    import torch\n    return torch\n"
    )
    (package / "kernels" / "b.py").write_text("import numpy\nif numpy:\n    import torch.nn\n")
    (package / "runtime" / "uses_b.py").write_text("from pyexecutorch.kernels import b\n")
    monkeypatch.setitem(globals(), "SRC", tmp_path)
    modules.cache_clear()
    imports.cache_clear()
    try:
        assert sorted(_violations()) == [
            "pyexecutorch.kernels.a:1 imports pyexecutorch.runtime (kernels -> runtime)",
            "pyexecutorch.kernels.a:1 imports pyexecutorch.runtime.errors (kernels -> runtime)",
            "pyexecutorch.kernels.a:4 imports torch (kernels -> torch)",
            "pyexecutorch.kernels.b:3 imports torch (kernels -> torch)",
            "pyexecutorch.kernels.b:3 imports torch.nn (kernels -> torch)",
        ]
        # (kernels.a's torch is inside a function: not run by importing the runtime side)
        assert _torch_reached() == [
            "pyexecutorch.kernels.b:3 imports torch (reached from pyexecutorch.kernels.b)",
            "pyexecutorch.kernels.b:3 imports torch.nn (reached from pyexecutorch.kernels.b)",
        ]
    finally:
        modules.cache_clear()
        imports.cache_clear()
