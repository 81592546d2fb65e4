"""The frontend's public names, which ``import irgrad`` re-exports where the compiler is installed.

Importing this module loads the compiler's MLIR bindings (``iree.compiler``, 350 MB on
disk): the graph API traces to StableHLO and the pass differentiates it. Without them,
the package imports only the runtime, so a device with ``iree-base-runtime`` and numpy
alone can ``import irgrad`` and run artifacts.
"""
from . import ops, passes
from .dtypes import (DType, as_dtype, bfloat16, bool_ as bool, double, float16, float32, float64, half,  # noqa: A004
                     int8, int16, int32, int64, uint8, uint16, uint32, uint64)
from .framework import Graph, Operation, Tensor, TensorShape, get_default_graph
from .ops import *  # noqa: F403
from .ops import convert_to_tensor
from .function import Function, Lowered, TensorSpec, compile, export, function  # noqa: A004
from .gradients import (AggregationMethod, NotDifferentiable, RegisterGradient, UnconnectedGradients,
                        gradients, no_gradient, recompute_grad)
from .session import Session, placeholder
from .variables import Variable
from .custom_gradient import custom_gradient, grad_pass_through
from .higher_order import hessian_vector_product, hessians, jacobian
from .tape import GradientTape
from .forwardprop import ForwardAccumulator
from .pfor import vectorized_map
from .linalg import tensordot
from . import image, initializers, keras, linalg, math, nn, optimizers, random


# The public names (a type checker re-exports only these; tests/test_typing.py keeps the list whole).
__all__ = [
    "AggregationMethod", "as_dtype", "bfloat16", "bool", "compile", "custom_gradient", "double", "DType", "export",
    "float16", "float32", "float64", "ForwardAccumulator", "Function", "function", "get_default_graph",
    "grad_pass_through", "gradients", "GradientTape", "Graph", "half", "hessian_vector_product", "hessians",
    "image", "initializers", "int16", "int32", "int64", "int8", "jacobian", "keras", "linalg", "Lowered", "math",
    "nn", "no_gradient", "NotDifferentiable", "Operation", "optimizers", "passes", "placeholder", "random",
    "recompute_grad", "RegisterGradient", "Session", "tensordot", "TensorShape", "TensorSpec", "uint16", "uint32",
    "uint64", "uint8", "UnconnectedGradients", "Variable", "vectorized_map"
]
__all__ += ops.__all__
