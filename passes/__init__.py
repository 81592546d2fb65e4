"""Reverse-mode, forward-mode and batching passes over StableHLO MLIR.

Works on MLIR alone (it never imports the irgrad frontend), so it serves modules from any
producer. The folders show the architecture:

- ``grad.py``, ``train.py``: the public entry (``differentiate``, ``vectorize``, training steps);
- ``transforms/``: the three program transformations (reverse, forward, batching) and the
  registry of rules they consult;
- ``rules/``: one file per op family, each op's adjoint, tangent and batching rules side by side
  (and its lowering where IREE needs one);
- ``lowering/``: rewrites that make modules compile well on IREE (legalization, blocked sums,
  im2col patches, dynamic shapes, the shape-dependent choices);
- ``ir/``: the MLIR bindings shim, op builders and typed attribute readers, region helpers.

Importing this package registers every rule.
"""
from .rules import (chlo, composites, contractions, control_flow, convolution, einsum,  # noqa: F401
                    elementwise, indexing, linalg, normalization, reductions, shapes, spectral, windows)
from .transforms.backprop import AGGREGATIONS, backprop
from .transforms.batching import MissingBatchingRule
from .grad import (add_adjoints, annotate_estimates, differentiate, estimate_peak, find_function, function_name,
                   proximal, public_functions, vectorize)
from .memory import Estimate, MemoryLimitError
from .ir.mlir import IRError, context, parse_module, verify
from .transforms.registry import (NONDIFFERENTIABLE, RULES, MissingAdjointError, adjoint, composite_adjoint,
                                  nondifferentiable)

__all__ = [
    "AGGREGATIONS", "backprop", "add_adjoints", "differentiate", "estimate_peak", "annotate_estimates", "Estimate",
    "MemoryLimitError",
    "proximal", "vectorize", "MissingBatchingRule",
    "find_function", "function_name",
    "public_functions", "IRError", "context", "parse_module", "verify", "NONDIFFERENTIABLE",
    "RULES", "MissingAdjointError", "adjoint", "composite_adjoint", "nondifferentiable",
]
