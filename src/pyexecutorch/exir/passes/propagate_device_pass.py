"""Which device a delegate's tensors live on, and the copies at its boundary.

A partitioner that targets a device other than the host names it in its delegation
compile specs as ``CompileSpec(TARGET_DEVICE_COMPILE_SPEC_KEY, b"cuda:0")``.
:class:`PropagateDevicePass` (the official pass, run by ``to_executorch`` after spec
propagation) reads it and, with ``enable_non_cpu_memory_planning``:

- puts an ``et_copy._h2d_copy`` before each tensor input of the delegate call; its
  result's spec is a fresh one on the device (the input itself stays host memory);
- puts an ``et_copy._d2h_copy`` after each ``getitem`` of the call's outputs, which
  keep the device; the copies' results are host memory and replace them downstream;
- drops ``_h2d_copy(_d2h_copy(x))`` where ``x`` is already on the device the copy
  goes to (two delegates on one device in a row).

Without it only the specs of the delegate's inputs and outputs are tagged. Memory
planning then gives each device's tensors arenas of their own.
"""

from __future__ import annotations

import copy
import operator

from torch.fx import GraphModule, Node
from torch.fx.passes.infra.pass_base import PassBase, PassResult

from pyexecutorch.exir.config import PropagateDeviceConfig
from pyexecutorch.exir.delegate import executorch_call_delegate
from pyexecutorch.exir.lowered_backend_module import LoweredBackendModule
from pyexecutorch.exir.passes._device_copy_ops_registry import D2H_COPY, H2D_COPY
from pyexecutorch.exir.tensor_spec import TensorSpec
from pyexecutorch.schema.program import DeviceType

TARGET_DEVICE_COMPILE_SPEC_KEY = "target_device"

Device = tuple[DeviceType, int]


def parse_device_spec_value(value: bytes | str) -> Device:
    """``b"cuda:1"`` -> ``(DeviceType.CUDA, 1)``; the type is matched without case and
    the index defaults to 0."""
    text = (value.decode() if isinstance(value, bytes) else value).strip().lower()
    type_name, _, index = text.partition(":")
    by_name = {d.name.lower(): d for d in DeviceType}
    if type_name not in by_name:
        raise ValueError(
            f"compile spec {TARGET_DEVICE_COMPILE_SPEC_KEY!r}: unknown device type "
            f"{type_name!r} (known: {', '.join(d.name for d in DeviceType)})"
        )
    if index and not index.isdigit():
        raise ValueError(
            f"compile spec {TARGET_DEVICE_COMPILE_SPEC_KEY!r}: device index {index!r} "
            "is not a non-negative integer"
        )
    return by_name[type_name], int(index or 0)


def target_device(gm: GraphModule, call: Node) -> Device | None:
    """The device a delegate call's compile specs name, or None (host)."""
    lowered = call.args[0] if call.args else None
    module = (
        getattr(gm, lowered.target, None)
        if isinstance(lowered, Node) and lowered.op == "get_attr"
        else None
    )
    if not isinstance(module, LoweredBackendModule):
        raise RuntimeError(
            f"executorch_call_delegate node '{call.name}' does not reference a "
            "LoweredBackendModule: its first argument must be a get_attr of one"
        )
    return device_of_compile_specs(module)


def device_of_compile_specs(module: LoweredBackendModule) -> Device | None:
    """The device a lowered module's compile specs name, or None (host)."""
    for spec in module.compile_specs:
        if spec.key == TARGET_DEVICE_COMPILE_SPEC_KEY:
            return parse_device_spec_value(spec.value)
    return None


# The official module's private names, which its own tests import.
_parse_device_spec_value = parse_device_spec_value
_get_target_device_from_compile_specs = device_of_compile_specs


def _tag(spec: object, device: Device) -> bool:
    specs = spec if isinstance(spec, (list, tuple)) else [spec]
    tagged = [s for s in specs if isinstance(s, TensorSpec)]
    for s in tagged:
        s.device, s.device_index = device
    return bool(tagged)


def _copy_spec(spec: TensorSpec, device: Device) -> TensorSpec:
    """A new tensor like ``spec``'s, unplanned, on ``device``."""
    new = copy.copy(spec)
    new.init_mem_planning_fields()
    new.lifetime = [None, None]
    new.is_user_input = new.is_mutable_buffer = False
    new.fqn = new.storage_base = None
    new.storage_base_offset = 0
    new.device, new.device_index = device
    return new


def _copy_node(gm: GraphModule, op: object, source: Node, device: Device) -> Node:
    node = gm.graph.call_function(op, (source,))
    node.meta["spec"] = _copy_spec(source.meta["spec"], device)
    for key in ("val", "tensor_meta"):
        if key in source.meta:
            node.meta[key] = source.meta[key]
    return node


class PropagateDevicePass(PassBase):
    """See the module docstring. ``skip_h2d_for_method_inputs``: a method input that
    only feeds the delegate is put on the device itself (the caller passes device
    memory), no copy; ``skip_d2h_for_method_outputs``: a delegate output that is only a
    method output stays on the device. Both need ``enable_non_cpu_memory_planning``."""

    def __init__(
        self,
        skip_h2d_for_method_inputs: bool = False,
        skip_d2h_for_method_outputs: bool = False,
        enable_non_cpu_memory_planning: bool = False,
    ) -> None:
        super().__init__()
        if (
            skip_h2d_for_method_inputs or skip_d2h_for_method_outputs
        ) and not enable_non_cpu_memory_planning:
            raise ValueError(
                "PropagateDevicePass: skip_h2d_for_method_inputs and "
                "skip_d2h_for_method_outputs skip host/device copies, which exist only "
                "with enable_non_cpu_memory_planning=True"
            )
        self.skip_h2d_for_method_inputs = skip_h2d_for_method_inputs
        self.skip_d2h_for_method_outputs = skip_d2h_for_method_outputs
        self.enable_non_cpu_memory_planning = enable_non_cpu_memory_planning

    def call(self, graph_module: GraphModule) -> PassResult:
        gm = graph_module
        devices: dict[Node, Device] = {}
        changed = False
        for node in list(gm.graph.nodes):
            if node.op != "call_function" or node.target is not executorch_call_delegate:
                continue
            device = target_device(gm, node)
            if device is None:
                continue
            devices[node] = device
            changed |= self._inputs(gm, node, device)
            changed |= _tag(node.meta.get("spec"), device)
        for node in list(gm.graph.nodes):
            if node.op == "call_function" and node.target is operator.getitem:
                source = node.args[0]
                if source in devices:
                    changed |= self._output(gm, node)
        if changed:
            self._drop_round_trips(gm)
        gm.recompile()
        return PassResult(gm, changed)

    def _inputs(self, gm: GraphModule, call: Node, device: Device) -> bool:
        if not self.enable_non_cpu_memory_planning:
            return any(
                [_tag(a.meta.get("spec"), device) for a in call.args[1:] if isinstance(a, Node)]
            )
        args = list(call.args)
        changed = False
        for i, arg in enumerate(args[1:], start=1):
            if not (isinstance(arg, Node) and isinstance(arg.meta.get("spec"), TensorSpec)):
                continue
            if self.skip_h2d_for_method_inputs and arg.op == "placeholder":
                if len(arg.users) != 1:
                    raise RuntimeError(
                        f"skip_h2d_for_method_inputs: method input '{arg.name}' has "
                        f"{len(arg.users)} users, so it cannot be moved to the device of "
                        f"the delegate call '{call.name}' alone; give the delegate its "
                        "own input or leave skip_h2d_for_method_inputs off"
                    )
                changed |= _tag(arg.meta["spec"], device)
                continue
            with gm.graph.inserting_before(call):
                args[i] = _copy_node(gm, H2D_COPY, arg, device)
            changed = True
        call.args = tuple(args)
        return changed

    def _output(self, gm: GraphModule, item: Node) -> bool:
        """Give a delegate output's ``getitem`` its device and, with planning by device,
        a copy back to the host for its users."""
        spec = item.meta.get("spec")
        sources = item.args[0].meta.get("spec")
        index = item.args[1]
        if not (
            isinstance(spec, TensorSpec)
            and isinstance(sources, (list, tuple))
            and isinstance(index, int)
            and index < len(sources)
            and isinstance(sources[index], TensorSpec)
        ):
            return False
        _tag(spec, (sources[index].device, sources[index].device_index))
        if not self.enable_non_cpu_memory_planning:
            return True
        if self.skip_d2h_for_method_outputs and all(u.op == "output" for u in item.users):
            return True
        with gm.graph.inserting_after(item):
            back = _copy_node(gm, D2H_COPY, item, (DeviceType.CPU, 0))
        item.replace_all_uses_with(back, delete_user_cb=lambda user: user is not back)
        return True

    @staticmethod
    def _drop_round_trips(gm: GraphModule) -> None:
        """``_h2d_copy(_d2h_copy(x))`` -> ``x`` where ``x`` is on the copy's device."""
        dropped = False
        for node in list(gm.graph.nodes):
            if node.op != "call_function" or node.target != H2D_COPY:
                continue
            back = node.args[0]
            if not (isinstance(back, Node) and back.target == D2H_COPY):
                continue
            x = back.args[0]
            x_spec, spec = x.meta.get("spec"), node.meta.get("spec")
            if not (isinstance(x_spec, TensorSpec) and isinstance(spec, TensorSpec)):
                continue
            if (x_spec.device, x_spec.device_index) != (spec.device, spec.device_index):
                continue
            node.replace_all_uses_with(x)
            gm.graph.erase_node(node)
            dropped = True
        if dropped:
            gm.graph.eliminate_dead_code()


__all__ = [
    "TARGET_DEVICE_COMPILE_SPEC_KEY",
    "PropagateDeviceConfig",
    "PropagateDevicePass",
    "device_of_compile_specs",
    "parse_device_spec_value",
    "target_device",
]
