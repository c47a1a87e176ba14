"""pytest plugin for the conformance harness (scripts/conformance.py): mounts the
official wheel's copied test-support modules under ``pyexecutorch``.

The official test files import their helpers by package path
(``executorch.exir.tests.models``, ``executorch.backends.xnnpack.test.tester``);
after the import rewrite those read ``pyexecutorch.exir.tests.models``. Our package
ships no such modules, so this finder serves them from the scratch copy named by
``$CONFORMANCE_OVERLAY``: a module file found there is loaded from there, and a
folder found there that our package lacks becomes a namespace package. Nothing of
our own package is shadowed: only copied test files live in the scratch tree.

Served modules are loaded through a link whose path names the package
(``<scratch>/../pyexecutorch-overlay-<name>``), as their official originals sit under
``site-packages/executorch/``: torch reads caller file names
(``torch/export/_unlift.py::_ok_to_generate_guards_fn``) and leaves the shape
guards out of ``ExportedProgram.module()`` when called from a file whose path holds
"executorch". The official XNNPACK tester's Quantize stage makes such a module and
its Export stage re-exports it with a dynamic batch, which a guarded module refuses
(``ConstraintViolationError``: the batch specialized to the example's size).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
from pathlib import Path

PACKAGE = "pyexecutorch"


class OverlayFinder(importlib.abc.MetaPathFinder):
    def __init__(self, root: Path) -> None:
        self.root = root

    def find_spec(self, fullname: str, path=None, target=None):  # noqa: ANN001
        if not fullname.startswith(PACKAGE + "."):
            return None
        rel = Path(*fullname.split(".")[1:])
        module_file = self.root / rel.with_suffix(".py")
        package_init = self.root / rel / "__init__.py"
        for candidate, is_package in ((package_init, True), (module_file, False)):
            if candidate.is_file() and not _ours_has(fullname, path):
                locations = [str(candidate.parent)] if is_package else None
                return importlib.util.spec_from_file_location(
                    fullname, candidate, submodule_search_locations=locations
                )
        folder = self.root / rel
        if folder.is_dir() and not _ours_has(fullname, path):
            spec = importlib.machinery.ModuleSpec(fullname, None, is_package=True)
            spec.submodule_search_locations = [str(folder)]
            return spec
        return None


def _ours_has(fullname: str, path) -> bool:  # noqa: ANN001
    # Our own module under that name wins: the overlay only fills gaps.
    if path is None:
        return False
    return importlib.machinery.PathFinder.find_spec(fullname, path) is not None


def package_named_root(root: Path) -> Path:
    """A link to ``root`` whose path holds the package name (see the module doc);
    several processes may create it at once, and a stale one is replaced."""
    root = root.resolve()
    link = root.parent / f"{PACKAGE}-overlay-{root.name}"
    if link.is_symlink() and link.resolve() == root:
        return link
    spare = root.parent / f".{link.name}.{os.getpid()}"
    spare.unlink(missing_ok=True)
    spare.symlink_to(root, target_is_directory=True)
    os.replace(spare, link)
    return link


_root = os.environ.get("CONFORMANCE_OVERLAY")
if _root:
    sys.meta_path.insert(0, OverlayFinder(package_named_root(Path(_root))))
