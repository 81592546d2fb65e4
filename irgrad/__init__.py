"""irgrad: TensorFlow-style differentiable programs -> StableHLO -> reverse mode over the IR -> IREE.

    import irgrad as ig

    @ig.function(input_signature=[ig.TensorSpec([3])])
    def loss(x):
        return ig.reduce_sum(ig.tanh(x) ** 2)
"""
from .version import __version__

from . import passes, runtime  # noqa: F401
from .dtypes import (DType, as_dtype, bfloat16, bool_ as bool, double, float16, float32, float64, half,  # noqa: A004
                     int8, int16, int32, int64, uint8, uint16, uint32, uint64)
from .framework import Graph, Operation, Tensor, TensorShape, get_default_graph
from .ops import *  # noqa: F401,F403
from .ops import convert_to_tensor  # noqa: F401
from .function import Function, Lowered, TensorSpec, compile, export, function  # noqa: A004
from .gradients import (AggregationMethod, NotDifferentiable, RegisterGradient, UnconnectedGradients,
                        gradients, no_gradient, recompute_grad)
from .runtime import Artifact, ArtifactError, CompileError, DeviceError, Module, load
from .session import Session, placeholder
from .variables import Variable
from .custom_gradient import custom_gradient, grad_pass_through
from .higher_order import hessian_vector_product, hessians, jacobian
from .tape import GradientTape
from .forwardprop import ForwardAccumulator
from .pfor import vectorized_map
from . import math, nn, optimizers  # noqa: E402

newaxis = None
