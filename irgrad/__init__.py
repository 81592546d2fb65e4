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
from __future__ import annotations

import importlib.util
import logging
from typing import TYPE_CHECKING

from .version import __version__
from . import runtime
from .runtime import (Artifact as Artifact, ArtifactError as ArtifactError, CompileError as CompileError,
                      DeviceError as DeviceError, Module as Module, load as load)

# The library logs under the "irgrad" logger (irgrad.runtime.compiler, ...); quiet unless the
# application configures logging.
logging.getLogger(__name__).addHandler(logging.NullHandler())

newaxis = None
# Submodules that run without the compiler (they import only irgrad.runtime and their own extras).
_RUNTIME_MODULES = ("fleet",)

# Type checkers see the whole toolchain (the frontend's names, never the fallback below).
# irgrad-runtime (runtime-dist/) ships no frontend; the full irgrad without the compiler has one
# it cannot import.
_FRONTEND = importlib.util.find_spec(f"{__name__}.frontend") is not None
if TYPE_CHECKING or (_FRONTEND and importlib.util.find_spec("iree.compiler") is not None):
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
            return importlib.import_module(f"{__name__}.{name}")
        need = "pip install iree-base-compiler" if _FRONTEND else "pip install irgrad (this is irgrad-runtime)"
        raise ImportError(
            f"irgrad.{name} is part of irgrad's frontend, which needs the compiler: {need}. "
            "This install runs artifacts only (ig.load, Module, ig.runtime)."
        )
