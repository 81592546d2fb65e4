"""irgrad: TensorFlow-style differentiable programs -> StableHLO -> reverse mode over the IR -> IREE.

    import irgrad as ig

    @ig.function(input_signature=[ig.TensorSpec([3])])
    def loss(x):
        return ig.reduce_sum(ig.tanh(x) ** 2)

The frontend (``irgrad.frontend``: tracing, ops, gradients) needs the compiler's MLIR
bindings. Where ``iree-base-compiler`` is not installed, ``import irgrad`` gives the runtime
alone (``ig.load``, ``Module``, the errors): a device that only runs artifacts needs
``iree-base-runtime`` and numpy.
"""
# Standard-library names under private aliases: dir(irgrad) is the public API (``__dir__`` below).
import logging as _logging
import os as _os
import typing as _typing
from importlib import import_module as _import_module, util as _importlib_util
from types import ModuleType as _ModuleType

from .version import __version__
from . import runtime
from .runtime import (Artifact as Artifact, ArtifactError as ArtifactError, CompileError as CompileError,
                      DeviceError as DeviceError, Module as Module, load as load)

# The library logs under the "irgrad" logger (irgrad.runtime.compiler, ...); quiet unless the
# application configures logging.
_logging.getLogger(__name__).addHandler(_logging.NullHandler())

newaxis = None
# Submodules that run without the compiler (they import only irgrad.runtime and their own extras).
_RUNTIME_MODULES = ("fleet",)

# Type checkers see the whole toolchain (the frontend's names, never the fallback below).
# irgrad-runtime (runtime-dist/) ships no frontend; the full irgrad without the compiler has one
# it cannot import.
_FRONTEND = _importlib_util.find_spec(f"{__name__}.frontend") is not None
# IRGRAD_RUNTIME_ONLY=1: the runtime alone where the compiler is installed too (a Flower SuperNode
# starts a Python per message, and the frontend with the compiler's bindings is most of the
# import: docs/guides/fleet.md).
_RUNTIME_ONLY = _os.environ.get("IRGRAD_RUNTIME_ONLY", "") not in ("", "0")
if _typing.TYPE_CHECKING or (_FRONTEND and not _RUNTIME_ONLY
                             and _importlib_util.find_spec("iree.compiler") is not None):
    from .frontend import *  # noqa: F403
    from .ops import *  # noqa: F403  (already in frontend's names; said again for type checkers)
    # Named again: irgrad.function and irgrad.gradients are also submodules, which type checkers prefer.
    from .frontend import function as function, gradients as gradients
else:
    def __getattr__(name: str) -> object:
        """Runtime-only install: a frontend name says what is missing (PEP 562)."""
        if name.startswith("__"):
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        if name in _RUNTIME_MODULES:  # `from irgrad import fleet`: a submodule that needs no compiler
            return _import_module(f"{__name__}.{name}")
        if _FRONTEND and _RUNTIME_ONLY:
            raise ImportError(f"irgrad.{name} is part of irgrad's frontend, not imported: IRGRAD_RUNTIME_ONLY is set "
                              "(this process runs artifacts only: ig.load, Module, ig.runtime)")
        need = "pip install iree-base-compiler" if _FRONTEND else "pip install irgrad (this is irgrad-runtime)"
        raise ImportError(
            f"irgrad.{name} is part of irgrad's frontend, which needs the compiler: {need}. "
            "This install runs artifacts only (ig.load, Module, ig.runtime)."
        )


def __dir__() -> list[str]:
    """``dir(irgrad)``: the public API (PEP 562), without the modules it is built from; a submodule
    is listed where it is public (``ig.nn``, ``ig.runtime``: in the frontend's ``__all__``)."""
    public = {"runtime", *_RUNTIME_MODULES, *getattr(globals().get("frontend"), "__all__", ())}
    return sorted(name for name, value in globals().items() if name == "__version__" or (
        not name.startswith("_") and (not isinstance(value, _ModuleType) or name in public)))
