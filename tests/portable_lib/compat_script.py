# ruff: noqa: B023 - the lambdas run before the loop moves on
# One script, run unchanged against the official bindings and against
# pyexecutorch.portable_lib: test_compat.py replaces only the import line below.
# It uses the API subset that the official 1.5.1 build has (torch tensor
# inputs, torch outputs) and records what it observes in OBSERVED.
#
# Given: PROGRAMS = {name: (path, data, calls)}, where calls is a list of
# (method, inputs) run in order on one module.

import torch
from executorch.extension.pybindings import portable_lib as pl

OBSERVED = {}


def observe(key, value):
    OBSERVED[key] = value


def value_of(x):
    if isinstance(x, torch.Tensor):
        return ("tensor", str(x.dtype), tuple(x.shape), x.detach().clone().numpy())
    return (type(x).__name__, x)


def error_of(fn):
    """The exception type and the start of its message (up to the first colon)."""
    try:
        fn()
    except Exception as e:  # noqa: BLE001
        return (type(e).__name__, str(e).split(":")[0])
    return None


def describe_meta(key, meta):
    observe(key + ("repr",), error_of(lambda: repr(meta)) or repr(meta))
    observe(key + ("str",), error_of(lambda: str(meta)) or str(meta))
    observe(
        key + ("counts",),
        (meta.name(), meta.num_inputs(), meta.num_outputs(), meta.num_attributes()),
    )
    for what, count, get in (
        ("input", meta.num_inputs(), meta.input_tensor_meta),
        ("output", meta.num_outputs(), meta.output_tensor_meta),
    ):
        for i in range(count + 1):  # one past the end
            info = None
            try:
                info = get(i)
            except IndexError as e:
                observe(key + (what, i), ("IndexError", str(e).split(":")[0]))
            if info is not None:
                observe(
                    key + (what, i),
                    (
                        repr(info),
                        str(info),
                        info.sizes(),
                        info.dtype(),
                        info.nbytes(),
                        info.is_memory_planned(),
                    ),
                )


KEEP = []  # the official 1.5.1 build reads inputs after the call that passed them


def clone_inputs(inputs):
    cloned = [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]
    KEEP.append(cloned)
    return cloned


for name, (path, data, calls) in PROGRAMS.items():  # noqa: F821 - given by the test
    module = pl._load_for_executorch(path)
    observe((name, "method_names"), sorted(module.method_names()))
    for method in sorted(module.method_names()):
        describe_meta((name, "module", method), module.method_meta(method))
    for n, (method, inputs) in enumerate(calls):
        observe(
            (name, "call", n),
            [value_of(o) for o in module.run_method(method, clone_inputs(inputs))],
        )
    # Fewer inputs reuse the previous call's.
    last_method, last_inputs = calls[-1]
    if last_inputs:
        fresh = pl._load_for_executorch_from_buffer(data)
        first = [value_of(o) for o in fresh.run_method(last_method, clone_inputs(last_inputs))]
        observe((name, "fresh"), first)
        stateless = name not in ("mutable_buffer", "kv_cache", "counter")
        if stateless:
            observe((name, "reuse"), [value_of(o) for o in fresh.run_method(last_method, [])])
            observe((name, "reuse_plan"), [value_of(o) for o in fresh.plan_execute(last_method)])
            views = fresh.run_method(last_method, clone_inputs(last_inputs), clone_outputs=False)
            observe((name, "no_clone"), [value_of(o) for o in views])
        observe(
            (name, "too_many"),
            error_of(lambda: fresh.run_method(last_method, last_inputs + [last_inputs[0]])),
        )
    observe((name, "unknown_method"), (error_of(lambda: module.run_method("nope", [])) or ("",))[0])
    observe((name, "unknown_meta"), error_of(lambda: module.method_meta("nope")))
    observe((name, "has_etdump"), module.has_etdump())
    observe(
        (name, "write_etdump"),
        error_of(lambda: module.write_etdump_result_to_file("/nonexistent/x")),
    )

    program = pl._load_program_from_buffer(data)
    observe(
        (name, "program", "names"),
        sorted(program.get_method_name(i) for i in range(program.num_methods())),
    )
    observe(
        (name, "program", "past_end"),
        error_of(lambda: program.get_method_name(program.num_methods())),
    )
    observe((name, "program", "unknown"), error_of(lambda: program.load_method("nope")))
    observe((name, "program", "unknown_meta"), error_of(lambda: program.method_meta("nope")))
    observe((name, "program", "has_etdump"), program.has_etdump())
    for method in sorted(program.get_method_name(i) for i in range(program.num_methods())):
        describe_meta((name, "program", method), program.method_meta(method))
    loaded = {}
    for n, (method, inputs) in enumerate(calls):
        if method not in loaded:
            loaded[method] = program.load_method(method)
        m = loaded[method]
        m.set_inputs(clone_inputs(inputs))
        m.execute()
        observe((name, "program_call", n), [value_of(o) for o in m.get_outputs()])
        observe(
            (name, "program_call_again", n),
            [value_of(o) for o in m.get_outputs(clone_outputs=False)],
        )
    for method, m in loaded.items():
        describe_meta((name, "method", method), m.method_meta())
    if name not in ("mutable_buffer", "kv_cache", "counter"):
        method, inputs = calls[-1]
        m = program.load_method(method)
        observe((name, "method_call"), [value_of(o) for o in m.call(clone_inputs(inputs))])
        observe(
            (name, "method___call__"),
            [value_of(o) for o in m(clone_inputs(inputs), clone_outputs=False)],
        )
        if inputs:
            observe((name, "method_set_wrong_count"), error_of(lambda: m.set_inputs([])))
        observe((name, "attribute_missing"), error_of(lambda: m.get_attribute("nope")))

    if name == "alias":
        x, y = torch.arange(6.0).reshape(2, 3) / 7, torch.ones(2, 3)
        alias_module = pl._load_for_executorch_from_buffer(
            data
        )  # views need their module alive in 1.5.1
        same, total = alias_module.forward([x, y], clone_outputs=False)
        observe((name, "alias_is_input"), same.data_ptr() == x.data_ptr())
        observe((name, "alias_values"), (value_of(same), value_of(total - y)))

observe("verification", sorted(pl.Verification.__members__))
observe(
    "verification_values", (int(pl.Verification.Minimal), int(pl.Verification.InternalConsistency))
)
observe("thread_count_type", type(pl._threadpool_get_thread_count()).__name__)
observe("is_available_unknown", pl._is_available("NoSuchBackend"))
observe("operator_names_type", type(pl._get_operator_names()).__name__)
observe("profile_dump_type", type(pl._dump_profile_results()).__name__)
