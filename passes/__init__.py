"""Reverse-mode, forward-mode and batching passes over StableHLO MLIR.

Works on MLIR alone (it never imports the irgrad frontend), so it serves
modules from any producer. Importing this package registers every adjoint rule.
"""
from . import (chlo, contractions, control_flow, convolution, elementwise, indexing, linalg, normalization,  # noqa: F401
               reductions, regions, shapes, spectral, windows)  # (register rules)
from . import einsum  # noqa: F401  (register rules)
from .backprop import AGGREGATIONS, backprop
from .batching import MissingBatchingRule
from .grad import add_adjoints, differentiate, find_function, function_name, proximal, public_functions, vectorize
from .mlir import IRError, context, parse_module, verify
from .registry import (NONDIFFERENTIABLE, RULES, MissingAdjointError, adjoint, composite_adjoint,
                       nondifferentiable)

__all__ = [
    "AGGREGATIONS", "backprop", "add_adjoints", "differentiate", "proximal", "vectorize", "MissingBatchingRule",
    "find_function", "function_name",
    "public_functions", "IRError", "context", "parse_module", "verify", "NONDIFFERENTIABLE",
    "RULES", "MissingAdjointError", "adjoint", "composite_adjoint", "nondifferentiable",
]
