"""Lists the official suite tests that read an official private member (a name
starting with ``_`` that the executorch package defines), with the member, as the
TOML of scripts/conformance_exclusions.toml:

    python scripts/conformance_private.py   # rewrites scripts/conformance_exclusions.toml

Found by reading each test function's source (its own body, not the helpers it
calls): a private name imported from ``executorch`` (or from a private module of
it) and used there, an import of one inside the test, or an attribute ``x._name``
read on anything but ``self``/``cls`` where ``_name`` is defined in the package.

A member pyexecutorch provides under the same name (we have the same concept: an
importable ``pyexecutorch...`` private module or name, or an attribute ``_name`` that
our package defines) is not listed: such a test is counted like any other. Each
listed entry says why we do not provide the member (``WHY``).
"""

from __future__ import annotations

import ast
import importlib
import re
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import conformance  # noqa: E402

_DEFINED = re.compile(r"(?:def |class |self\.|^\s*)(_[A-Za-z]\w*)\s*[(:=]", re.MULTILINE)


def package_private_names(wheel: Path) -> set[str]:
    names: set[str] = set()
    for path in wheel.rglob("*.py"):
        if not conformance.is_test_path(path.relative_to(wheel)):
            names.update(_DEFINED.findall(path.read_text(errors="replace")))
    return {n for n in names if not n.startswith("__")}


# Underscore names that are the official bindings' public API, not private members.
_PUBLIC_MODULES = ("executorch.extension.pybindings", "executorch.exir.dialects._ops")


def _reexported(module: str, name: str) -> bool:
    """Whether ``name`` of a private module is also exported by its public parent
    package (``executorch.exir.program._program.to_edge`` is ``exir.program.to_edge``)."""
    parts = module.split(".")
    cut = next(i for i, p in enumerate(parts) if p.startswith("_"))
    init = WHEEL.joinpath(*parts[1:cut], "__init__.py")
    return init.is_file() and re.search(rf"\b{re.escape(name)}\b", init.read_text()) is not None


def _private_import(module: str, name: str) -> str | None:
    if not module.startswith("executorch") or module.startswith(_PUBLIC_MODULES):
        return None
    if name.startswith("_"):
        return f"{module}.{name}"
    if any(p.startswith("_") for p in module.split(".")) and not _reexported(module, name):
        return f"{module}.{name}"
    return None


def _imports(tree: ast.AST) -> dict[str, str]:
    """local name -> private member, for ``from executorch... import`` statements."""
    found = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                member = _private_import(node.module, alias.name)
                if member:
                    found[alias.asname or alias.name] = member
    return found


def _tests(tree: ast.Module) -> list[tuple[str, ast.FunctionDef]]:
    out = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name.startswith("test"):
            out.append((node.name, node))
        if isinstance(node, ast.ClassDef):
            out += [
                (f"{node.name}::{f.name}", f)
                for f in node.body
                if isinstance(f, ast.FunctionDef) and f.name.startswith("test")
            ]
    return out


def _patched(node: ast.AST, top: dict[str, str], private_names: set[str]) -> str | None:
    """The member a ``patch.object(x, "name")`` or ``patch("executorch...")`` call replaces,
    when it is private: an underscore member of the package, any member of a private
    module, or a dotted path through a private module."""
    if not isinstance(node, ast.Call) or not node.args:
        return None
    func = ast.unparse(node.func)
    first = node.args[0]
    if func.endswith("patch.object") and len(node.args) >= 2:
        name = node.args[1]
        if not (isinstance(name, ast.Constant) and isinstance(name.value, str)):
            return None
        if isinstance(first, ast.Name) and first.id in top:
            return f"{top[first.id]}.{name.value}"
        private = name.value.startswith("_") and not name.value.startswith("__")
        if private and name.value in private_names:
            return f"{ast.unparse(first)}.{name.value}"
        return None
    if func.endswith("patch") and isinstance(first, ast.Constant) and isinstance(first.value, str):
        parts = first.value.split(".")
        if parts[0] == "executorch" and any(p.startswith("_") for p in parts[1:]):
            return first.value
    return None


def private_reads(path: Path, rel: str, private_names: set[str]) -> list[tuple[str, str]]:
    tree = ast.parse(path.read_text())
    top = {
        k: v
        for node in tree.body
        if isinstance(node, ast.ImportFrom)
        for k, v in _imports(node).items()
    }
    rows = []
    for test, fn in _tests(tree):
        members = set(_imports(fn).values())
        for node in ast.walk(fn):
            patched = _patched(node, top, private_names)
            if patched:
                members.add(patched)
            if isinstance(node, ast.Name) and node.id in top:
                members.add(top[node.id])
            if (
                isinstance(node, ast.Attribute)
                and node.attr.startswith("_")
                and not node.attr.startswith("__")
                and node.attr in private_names
                and not (
                    isinstance(node.value, ast.Name) and node.value.id in ("self", "cls", "torch")
                )
            ):
                members.add(f"{ast.unparse(node.value)}.{node.attr}")
        rows += [(f"{rel}::{test}", m) for m in sorted(members)]
    return rows


WHEEL = conformance.wheel_root()
OURS = conformance.REPO / "src" / "pyexecutorch"


def ours_private_names() -> set[str]:
    names: set[str] = set()
    for path in OURS.rglob("*.py"):
        names.update(_DEFINED.findall(path.read_text(errors="replace")))
        # properties and methods: "def _name(self" is caught above; so are fields
    return names


def ours_provides(member: str, ours_names: set[str]) -> bool:
    """Whether pyexecutorch has ``member`` under the same name (module path or attribute)."""
    if member.startswith("executorch."):
        path = "py" + member
        module, _, name = path.rpartition(".")
        for candidate, attr in ((path, None), (module, name)):
            try:
                mod = importlib.import_module(candidate)
            except Exception:  # noqa: BLE001 - a module we lack, whatever the reason
                continue
            if attr is None or hasattr(mod, attr):
                return True
        return False
    name = member.rpartition(".")[2]
    # torch's own private members (ExportedProgram._validate) are ours as much as theirs
    return name in ours_names or hasattr(torch.export.ExportedProgram, name)


_EVENT_MODEL = (
    "the official Inspector's event model (event signatures, per-run instruction events) its "
    "events are built through; ours builds Event and EventBlock from the ETDump directly"
)
# Why a member stays unprovided, by the first prefix of the member that matches.
WHY = {
    "executorch.exir.capture._capture.patch_forward": (
        "the legacy exir.capture tracer's forward patching; pyexecutorch exports with "
        "torch.export only"
    ),
    "executorch.exir._serialize": (
        "the official serializer's internals (flatc JSON round trip); our codec is "
        "pyexecutorch.schema"
    ),
    "executorch.exir.dialects.edge._ops": (
        "the official edge dialect's operator wrapper class; our edge programs hold torch operators"
    ),
    "executorch.exir.memory_planning._": (
        "a helper of the official greedy planner's internals with no counterpart in "
        "exir.memory_planning"
    ),
    "MemoryPlanningPass()._": "an internal step of the official MemoryPlanningPass",
    "executorch.exir.program._program._": "an internal step of the official to_edge pipeline",
    "executorch.exir.program._program.lift_constant_tensor_pass": (
        "the official constant-lifting pass; our to_edge lifts constants in exir.passes"
    ),
    "executorch.exir.program._fake_program": "the official fake-program helper",
    "inspector_instance._": (
        "a step of the official Inspector's numeric-gap pipeline; ours computes the gap in "
        "pyexecutorch.devtools.numeric"
    ),
    "EventBlock._": _EVENT_MODEL,
    "Event._": _EVENT_MODEL,
    "ProfileEventSignature._": _EVENT_MODEL,
    "event": _EVENT_MODEL,
    **dict.fromkeys(
        (
            f"executorch.devtools.inspector._inspector.{name}"
            for name in (
                "parse_etrecord",
                "gen_etdump_object",
                "gen_graphs_from_etrecord",
                "create_debug_handle_to_op_node_mapping",
                "is_inference_output_equal",
            )
        ),
        "a collaborator the official Inspector's constructor calls through its private "
        "module (tests replace it with a mock); ours reads the ETRecord and ETDump itself",
    ),
    "executorch.devtools.inspector._inspector": (
        "the official Inspector's internal event classes (signatures, instruction events); "
        "ours builds its event blocks in pyexecutorch.devtools.inspector"
    ),
    "executorch.devtools.inspector._inspector_utils": (
        "a helper of the official Inspector's internals"
    ),
}
DEFAULT_WHY = "an attribute of the official implementation's internals that ours lacks"


DELIBERATE_HEADER = (
    "# Official suite tests asserting a behaviour pyexecutorch deliberately does\n"
    "# otherwise (written by hand; kept when this file is regenerated), with why.\n"
)


def why(member: str) -> str:
    return next((w for prefix, w in WHY.items() if member.startswith(prefix)), DEFAULT_WHY)


def main() -> int:
    wheel = WHEEL
    private_names = package_private_names(wheel)
    ours_names = ours_private_names()
    deliberate = conformance.load_deliberate()  # written by hand: read before rewriting
    out = [
        "# Official suite tests that read an official private member (generated by\n"
        "# scripts/conformance_private.py): not counted against pyexecutorch by\n"
        "# scripts/conformance.py. One entry per test and member we do not provide\n"
        "# (members pyexecutorch has under the same name are not listed).\n"
    ]
    for rel in conformance.suite_files(wheel):
        for test, member in private_reads(wheel / rel, rel, private_names):
            if ours_provides(member, ours_names):
                continue
            out.append(
                f'[[private]]\ntest = "{test}"\nmember = "{member}"\nwhy = "{why(member)}"\n'
            )
    out.append(DELIBERATE_HEADER)
    out += [f'[[deliberate]]\ntest = "{t}"\nwhy = "{w}"\n' for t, w in deliberate.items()]
    conformance.EXCLUSIONS.write_text("\n".join(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
