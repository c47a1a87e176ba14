"""Helpers compiled only as LLVM IR for their callers to link: no module passes, no
machine code of their own.

numba compiles a function called from compiled code on its own first: it links the
function's callees' IR into its module, optimises that whole module and makes machine code
for it, and then its caller links the optimised IR and optimises and generates code for
it again. A kernel whose helpers nest four deep (the dense convolution's job, strip, tile
forms, dot products) thus optimised and generated its leaves' code four times, and a
kernel reached only from a whole-method function never runs any of that machine code
(ResNet-18's cold load: about half of its LLVM time). A helper made by :func:`link_only`
keeps only numba's per-function passes; the function that links it (a kernel, a job
called by symbol) optimises the linked whole once, LLVM's inliner simplifying each callee
before it inlines it, as it did at every level before.

Such a helper cannot be called from Python (it has no machine code): it raises TypeError
saying so. Only compiled-form modules, which need numba, use it.
"""

from __future__ import annotations

import ctypes
from typing import Any

import numba
from llvmlite import binding as llvm
from llvmlite import ir
from numba.core import compiler, types
from numba.core.codegen import JITCodeLibrary
from numba.core.registry import CPUDispatcher


class LinkOnlyLibrary(JITCodeLibrary):
    """A code library whose finalisation links its callees and stops: no module passes, no
    machine code. numba's compiler still asks it for the function's Python entry and
    writes the function's environment pointer: a small stand-in module defines both
    (:func:`_stand_in`)."""

    def _optimize_final_module(self) -> None:
        pass  # (the caller's module passes optimise this code, inlined)

    def _finalize_final_module(self) -> None:
        self._finalize_dynamic_globals()
        self._verify_declare_only_symbols()
        self._finalized = True

    def get_pointer_to_function(self, name: str) -> int:
        self._ensure_finalized()
        engine = self._codegen._engine
        if not engine.is_symbol_defined(name):
            environments = [
                g.name
                for g in self._final_module.global_variables
                if g.name.startswith(_ENVIRONMENT) and not g.is_declaration
            ]
            stand_in = _stand_in(name, environments, self.name)
            self._codegen._add_module(llvm.parse_assembly(str(stand_in)))
            engine.finalize_object()
        return engine.get_function_address(name)


# numba's mangled names of functions' environment pointers
_ENVIRONMENT = "_ZN08NumbaEnv"


def _stand_in(entry_name: str, environments: list[str], name: str) -> ir.Module:
    """IR of a stand-in: the environment pointers numba's ``set_env`` fills, and a Python
    entry ``PyObject *entry_name(PyObject *, PyObject *, PyObject *)`` that sets
    TypeError."""
    module = ir.Module(name=f"link_only.{name}")
    module.triple = llvm.get_process_triple()
    pointer = ir.IntType(8).as_pointer()
    for environment in environments:
        env = ir.GlobalVariable(module, pointer, name=environment)
        env.linkage = "common"
        env.initializer = ir.Constant(pointer, None)
    text = f"{name} is compiled only into the compiled code that calls it\0".encode()
    text_type = ir.ArrayType(ir.IntType(8), len(text))
    message = ir.GlobalVariable(module, text_type, name="message")
    message.global_constant = True
    message.linkage = "internal"
    message.initializer = ir.Constant(text_type, bytearray(text))
    # (this process's addresses: a stand-in is never cached)
    set_string_type = ir.FunctionType(ir.VoidType(), [pointer, pointer])
    set_string = ir.Constant(ir.IntType(64), _address(ctypes.pythonapi.PyErr_SetString))
    type_error = ir.Constant(ir.IntType(64), id(TypeError)).inttoptr(pointer)
    entry = ir.Function(module, ir.FunctionType(pointer, [pointer] * 3), name=entry_name)
    builder = ir.IRBuilder(entry.append_basic_block())
    function = builder.inttoptr(set_string, set_string_type.as_pointer())
    builder.call(function, [type_error, builder.bitcast(message, pointer)])
    builder.ret(ir.Constant(pointer, None))
    return module


def _address(function: Any) -> int:
    return ctypes.cast(function, ctypes.c_void_p).value


class _LinkOnlyCompiler(compiler.Compiler):
    """numba's nopython pipeline into a :class:`LinkOnlyLibrary`, without the Python and C
    wrappers (no caller uses them)."""

    def compile_extra(self, func: Any) -> Any:
        if self.state.library is None:
            codegen = self.state.targetctx.codegen()
            self.state.library = LinkOnlyLibrary(codegen, func.__qualname__)
        self.state.flags.no_cpython_wrapper = True
        self.state.flags.no_cfunc_wrapper = True
        return super().compile_extra(func)


class _ConstantsUnspecialized(CPUDispatcher):
    """A dispatcher that compiles one form for a call whatever constants its arguments are:
    numba types a literal argument (``0``, a module constant) as its value and compiles a
    form per value (the pooling kernels' fold, six forms of one helper). For an always
    inlined helper the constants come back in its caller's code once inlined."""

    def get_call_template(self, args: Any, kws: Any) -> Any:
        args = tuple(types.unliteral(a) for a in args)
        kws = {k: types.unliteral(v) for k, v in kws.items()}
        return super().get_call_template(args, kws)


def link_only(**options: Any) -> Any:
    """``numba.njit(**options)`` for a helper only compiled code calls (see the module's
    docstring); ``cache`` is refused: its callers keep its code, in theirs. With
    ``forceinline=True`` the helper is also compiled once for all constant arguments (see
    :class:`_ConstantsUnspecialized`)."""
    if "cache" in options:
        raise TypeError("a link-only helper has no machine code to cache")
    if not options.get("forceinline"):
        return numba.njit(pipeline_class=_LinkOnlyCompiler, **options)

    def decorate(function: Any) -> Any:
        return _ConstantsUnspecialized(
            py_func=function,
            locals={},
            targetoptions={**options, "nopython": True},
            pipeline_class=_LinkOnlyCompiler,
        )

    return decorate
