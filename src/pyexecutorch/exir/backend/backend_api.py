"""``to_backend``: hand parts of an edge program (or all of it) to backends.

Three forms, chosen by the first argument:

- ``to_backend(exported_program, partitioner) -> ExportedProgram``: the
  partitioner tags nodes; each tag becomes a delegate (also inside
  ``torch.cond`` branches) and the program calls it through
  ``executorch_call_delegate``.
- ``to_backend(backend_id, exported_program, compile_specs) -> LoweredBackendModule``:
  the whole program, preprocessed by one backend.
- ``to_backend(MethodProgramsPartitionerSpec(programs, partitioners)) -> dict``:
  several methods at once, so a backend's ``preprocess_multimethod`` sees every
  partition of every method.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind, OutputKind
from torch.fx import GraphModule

from pyexecutorch.exir.backend._partition import (
    DelegationError,
    Partition,
    PartitionerChangedGraphError,
    _max_debug_handle,
    lower_partition_children,
    make_partition,
    replace_with_delegate,
    tagged_groups,
)
from pyexecutorch.exir.backend.backend_details import (
    PreprocessError,
    PreprocessResult,
    get_backend_details,
)
from pyexecutorch.exir.backend.compile_spec_schema import CompileSpec
from pyexecutorch.exir.backend.lowered_module import LoweredBackendModule
from pyexecutorch.exir.backend.partitioner import DELEGATION_TAG, DelegationSpec, Partitioner
from pyexecutorch.exir.graph_utils import (
    copy_graph_module,
    graph_modules,
    rebuild,
    updated_signature,
)


@dataclass
class MethodProgramsPartitionerSpec:
    """Programs and partitioners by method name, for the multi-method ``to_backend``."""

    method_to_edge_program: Mapping[str, ExportedProgram]
    method_to_partitioner: Mapping[str, Partitioner]


def to_backend(*args: Any, **kwargs: Any) -> Any:
    """See the module documentation for the three forms."""
    first = args[0] if args else None
    if isinstance(first, str) or (first is None and "backend_id" in kwargs):
        return _lower_whole(*args, **kwargs)
    if isinstance(first, MethodProgramsPartitionerSpec):
        return to_backend_multimethod(first.method_to_edge_program, first.method_to_partitioner)
    if isinstance(first, ExportedProgram) or (first is None and "edge_program" in kwargs):
        return _lower_with_partitioner(*args, **kwargs)
    raise TypeError(
        "to_backend expects (edge_program, partitioner), (backend_id, edge_program, "
        f"compile_specs) or (MethodProgramsPartitionerSpec); got {type(first).__name__} first"
    )


# --------------------------------------------------------------------------------------
# Whole-program lowering


def _check_specs(compile_specs: Any, who: str) -> list[CompileSpec]:
    if compile_specs is None:
        return []
    specs = list(compile_specs)
    for s in specs:
        if not (
            isinstance(getattr(s, "key", None), str)
            and isinstance(getattr(s, "value", None), (bytes, str))
        ):
            raise TypeError(
                f"{who}: compile specs must be CompileSpec(key: str, value: bytes | str), got {s!r}"
            )
    return specs


def _lower_whole(
    backend_id: str, edge_program: ExportedProgram, compile_specs: list[CompileSpec] | None = None
) -> LoweredBackendModule:
    if not isinstance(edge_program, ExportedProgram):
        raise TypeError(
            f"to_backend({backend_id!r}, ...): expected an ExportedProgram, got {type(edge_program).__name__}"
        )
    specs = _check_specs(compile_specs, f"to_backend({backend_id!r}, ...)")
    cls = get_backend_details(backend_id)
    program_copy = cls.copy_exported_program_for_preprocess(edge_program, specs)
    try:
        result = cls.preprocess(program_copy, specs)
    except PreprocessError:
        raise
    except Exception as e:
        raise PreprocessError(
            f"backend {backend_id!r} failed to preprocess the program: {e}"
        ) from e
    _check_result(result, backend_id, "the program")
    return _lowered(edge_program, backend_id, result, specs)


def _check_result(result: Any, backend_id: str, what: str) -> None:
    if not isinstance(result, PreprocessResult) and not hasattr(result, "processed_bytes"):
        raise PreprocessError(
            f"backend {backend_id!r}: preprocess of {what} returned {type(result).__name__}, "
            "expected a PreprocessResult"
        )
    data = result.processed_bytes
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise PreprocessError(
            f"backend {backend_id!r}: preprocess of {what} returned processed_bytes of type "
            f"{type(data).__name__}, expected bytes"
        )


def _lowered(
    program: ExportedProgram, backend_id: str, result: Any, specs: list[CompileSpec]
) -> LoweredBackendModule:
    data = result.processed_bytes
    lowered = LoweredBackendModule(
        program,
        backend_id,
        bytes(data) if not isinstance(data, bytes) else data,
        specs,
        getattr(result, "data_store_output", None),
    )
    lowered.meta = {"debug_handle_map": getattr(result, "debug_handle_map", None)}
    info = getattr(result, "_delegate_info_meta", None)
    if info is not None:
        lowered.meta["_delegate_info_meta"] = info
    return lowered


# --------------------------------------------------------------------------------------
# Partitioner-driven lowering


def _lower_with_partitioner(edge_program: ExportedProgram, partitioner: Any) -> ExportedProgram:
    return to_backend_multimethod({"forward": edge_program}, {"forward": partitioner})["forward"]


def _same_graph(a: GraphModule, b: GraphModule) -> bool:
    na, nb = list(a.graph.nodes), list(b.graph.nodes)
    if len(na) != len(nb):
        return False
    for x, y in zip(na, nb, strict=True):
        if x.op != y.op or x.target != y.target or x.name != y.name:
            return False
        if [i.name for i in x.all_input_nodes] != [i.name for i in y.all_input_nodes]:
            return False
    return True


def _same_graphs(a: GraphModule, b: GraphModule) -> bool:
    ga, gb = list(graph_modules(a)), list(graph_modules(b))
    return len(ga) == len(gb) and all(_same_graph(x, y) for x, y in zip(ga, gb, strict=True))


# Whether to_backend checks that a partitioner left the graph as it was (only tagged
# it); validation_disabled() turns the check off for partitioners known to rewrite.
_validate_partitioners = True


@contextlib.contextmanager
def validation_disabled() -> Iterator[None]:
    """Within the block, ``to_backend`` does not refuse a partitioner that changed the
    graph it was given (the official escape hatch, same name)."""
    global _validate_partitioners
    previous, _validate_partitioners = _validate_partitioners, False
    try:
        yield
    finally:
        _validate_partitioners = previous


def _partition_name(partitioner: Any) -> str:
    return type(partitioner).__name__


def _run_partitioner(
    method: str, ep: ExportedProgram, partitioner: Any
) -> tuple[ExportedProgram, dict]:
    """The tagged copy of ``ep`` and the tags' delegation specs."""
    if not callable(partitioner) and not hasattr(partitioner, "partition"):
        raise TypeError(
            f"method {method!r}: expected a Partitioner, got {type(partitioner).__name__}"
        )
    working = rebuild(ep, copy_graph_module(ep.graph_module), ep.graph_signature)
    for g in graph_modules(working.graph_module):
        for node in g.graph.nodes:
            node.meta.pop(DELEGATION_TAG, None)
    run = partitioner.partition if hasattr(partitioner, "partition") else partitioner
    result = run(working)
    name = _partition_name(partitioner)
    tagged = getattr(result, "tagged_exported_program", None)
    tags = getattr(result, "partition_tags", None)
    if not isinstance(tagged, ExportedProgram):
        raise DelegationError(
            f"partitioner {name}: partition() must return a PartitionResult with the tagged "
            f"ExportedProgram, got {type(result).__name__}"
        )
    if tags is None or not isinstance(tags, Mapping):
        raise DelegationError(
            f"partitioner {name}: PartitionResult.partition_tags must map each tag to a "
            "DelegationSpec(backend_id, compile_specs)"
        )
    if _validate_partitioners and not _same_graphs(tagged.graph_module, ep.graph_module):
        raise PartitionerChangedGraphError(
            f"partitioner {name} changed the graph of method {method!r}; a partitioner may only "
            "set node.meta['delegation_tag'] (rewrite graphs with transform passes before to_backend)"
        )
    _check_tagged_nodes(name, method, tagged)
    specs: dict[str, DelegationSpec] = {}
    for tag, spec in tags.items():
        backend_id = getattr(spec, "backend_id", None)
        if not isinstance(backend_id, str):
            raise DelegationError(
                f"partitioner {name}: tag {tag!r} maps to {spec!r}, not a DelegationSpec"
            )
        compile_specs = _check_specs(
            getattr(spec, "compile_specs", None), f"partitioner {name}, tag {tag!r}"
        )
        specs[tag] = DelegationSpec(backend_id, compile_specs)
    return tagged, specs


_WEIGHT_KINDS = (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR)


def _check_tagged_nodes(name: str, method: str, tagged: ExportedProgram) -> None:
    """Only operators and weights may be tagged: a user input or the output belongs to
    the method, not to a delegate (messages worded as the official checks')."""
    weights = {s.arg.name for s in tagged.graph_signature.input_specs if s.kind in _WEIGHT_KINDS}
    for node in tagged.graph_module.graph.nodes:
        if DELEGATION_TAG not in node.meta:
            continue
        if node.op == "output":
            raise DelegationError(
                f"partitioner {name}, method {method!r}: output node {node.name} should not be "
                "tagged (only operators and weights go to a delegate)"
            )
        if node.op == "placeholder" and node.name not in weights:
            raise DelegationError(
                f"partitioner {name}, method {method!r}: input {node.name!r} is tagged; "
                "placeholder node for non-params, non-buffer, and non-tensor constants "
                "should not be tagged"
            )
        if node.op == "placeholder" and node.meta.get("no_copy", False):
            # A weight marked no_copy is not duplicated for users outside its delegate.
            tag = node.meta[DELEGATION_TAG]
            for user in node.users:
                users_tag = user.meta.get(DELEGATION_TAG)
                if users_tag != tag:
                    raise DelegationError(
                        f"partitioner {name}, method {method!r}: constant data node ({node}) "
                        f"is tagged with ({tag}) but has user ({user}) which has tag "
                        f"({users_tag}); it is marked no_copy, so it cannot be copied for "
                        "that user: tag the user too, or drop no_copy"
                    )


def _collect(method: str, ep: ExportedProgram, specs: dict[str, DelegationSpec]) -> list[Partition]:
    parts: list[Partition] = []

    def visit(gm: GraphModule, top: bool) -> None:
        here: list[Partition] = []
        for tag, nodes in tagged_groups(gm, specs).items():
            part = make_partition(method, tag, specs[tag], gm, nodes, ep, top)
            if part is not None:
                here.append(part)
        parts.extend(here)
        for sub in lower_partition_children(gm, here):
            visit(sub, False)

    visit(ep.graph_module, True)
    return parts


def _preprocess_all(parts: list[Partition]) -> list[Any]:
    """Preprocess every partition, one ``preprocess_multimethod`` call per backend."""
    results: dict[int, Any] = {}
    by_backend: dict[str, list[Partition]] = {}
    for p in parts:
        by_backend.setdefault(p.spec.backend_id, []).append(p)
    for backend_id, group in by_backend.items():
        cls = get_backend_details(backend_id)
        programs: dict[str, list[ExportedProgram]] = {}
        compile_specs: dict[str, list[list[CompileSpec]]] = {}
        members: dict[str, list[Partition]] = {}
        for p in group:
            copy_ = cls.copy_exported_program_for_preprocess(p.program, p.spec.compile_specs)
            programs.setdefault(p.method, []).append(copy_)
            compile_specs.setdefault(p.method, []).append(list(p.spec.compile_specs))
            members.setdefault(p.method, []).append(p)
        try:
            out = cls.preprocess_multimethod(programs, compile_specs)
        except PreprocessError:
            raise
        except Exception as e:
            where = ", ".join(f"{m!r}: {[p.tag for p in ps]}" for m, ps in members.items())
            raise PreprocessError(
                f"backend {backend_id!r} failed to preprocess partitions ({where}): {e}"
            ) from e
        for method, ps in members.items():
            got = list(out.get(method, ()))
            if len(got) != len(ps):
                raise PreprocessError(
                    f"backend {backend_id!r}: preprocess_multimethod returned {len(got)} results for "
                    f"method {method!r}, which has {len(ps)} partitions"
                )
            for p, r in zip(ps, got, strict=True):
                _check_result(r, backend_id, f"partition {p.tag!r} of method {method!r}")
                results[id(p)] = r
    return [results[id(p)] for p in parts]


def _finish(
    ep: ExportedProgram, tagged: ExportedProgram, parts: list[Partition], results: list[Any]
) -> ExportedProgram:
    gm = tagged.graph_module
    next_handle = _max_debug_handle(gm) + 1
    consumed: dict[str, Any] = {}
    replaced: dict[Any, Any] = {}
    for p, r in zip(parts, results, strict=True):
        lowered = _lowered(p.program, p.spec.backend_id, r, list(p.spec.compile_specs))
        replace_with_delegate(p, lowered, next_handle, replaced)
        next_handle += 1
        consumed.update(p.consumed)
    for g in graph_modules(gm):
        for node in g.graph.nodes:
            node.meta.pop(DELEGATION_TAG, None)
        g.recompile()
    sig = tagged.graph_signature
    from torch.export.graph_signature import ExportGraphSignature

    input_specs = [s for s in sig.input_specs if getattr(s.arg, "name", None) not in consumed]
    owned = {fqn for p in parts for fqn in p.mutations.values()}
    output_specs = [
        s
        for s in sig.output_specs
        if not (s.kind == OutputKind.BUFFER_MUTATION and s.target in owned)
    ]
    targets = {s.target for s in consumed.values()}
    still_used = {s.target for s in input_specs}
    gone = targets - still_used
    state_dict = {k: v for k, v in ep.state_dict.items() if k not in gone}
    constants = {k: v for k, v in ep.constants.items() if k not in gone}
    signature = updated_signature(ExportGraphSignature(input_specs, output_specs), gm)
    return rebuild(ep, gm, signature, constants=constants, state_dict=state_dict)


def to_backend_multimethod(
    programs: Mapping[str, ExportedProgram], partitioners: Mapping[str, Any]
) -> dict[str, ExportedProgram]:
    """Each method of ``programs`` lowered with its partitioner (methods without one
    are returned as they are)."""
    unknown = sorted(set(partitioners) - set(programs))
    if unknown:
        raise KeyError(
            f"partitioners given for methods {unknown}, which the program does not have ({sorted(programs)})"
        )
    staged: list[tuple[str, ExportedProgram, list[Partition]]] = []
    tagged_by_method: dict[str, ExportedProgram] = {}
    all_parts: list[Partition] = []
    for method, partitioner in partitioners.items():
        ep = programs[method]
        if not isinstance(ep, ExportedProgram):
            raise TypeError(
                f"method {method!r}: expected an ExportedProgram, got {type(ep).__name__}"
            )
        tagged, specs = _run_partitioner(method, ep, partitioner)
        for tag, spec in specs.items():
            if any(
                node.meta.get(DELEGATION_TAG) == tag
                for g in graph_modules(tagged.graph_module)
                for node in g.graph.nodes
            ):
                get_backend_details(spec.backend_id)  # fail early, before any preprocess
        parts = _collect(method, tagged, specs)
        staged.append((method, tagged, parts))
        tagged_by_method[method] = tagged
        all_parts.extend(parts)
    results = _preprocess_all(all_parts)
    by_part = {id(p): r for p, r in zip(all_parts, results, strict=True)}
    out = dict(programs)
    for method, tagged, parts in staged:
        out[method] = _finish(programs[method], tagged, parts, [by_part[id(p)] for p in parts])
    return out


__all__ = [
    "LoweredBackendModule",
    "MethodProgramsPartitionerSpec",
    "to_backend",
    "to_backend_multimethod",
    "validation_disabled",
]
