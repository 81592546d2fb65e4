"""``ig.initializers`` (also ``ig.keras.initializers``): Keras' variance-scaling initializers
on ``ig.random``'s stateless ops, with Keras 3's seeding (an int ``seed`` is the stateless seed
``[seed, 0]``), so a seeded initializer gives TensorFlow's numbers.

``GlorotUniform`` / ``GlorotNormal`` (``scale = 1``, ``fan_avg``), ``HeUniform`` / ``HeNormal``
(``scale = 2``, ``fan_in``), ``LecunUniform`` / ``LecunNormal`` (``scale = 1``, ``fan_in``) are
``VarianceScaling``: uniform in ``±√(3 scale / fan)``, or truncated normal with standard
deviation ``√(scale / fan) / 0.87962566103423978``. Fans as Keras computes them: for a shape
``[..., in, out]`` ``fan_in = in · receptive field``, ``fan_out = out · receptive field``.
An initializer is called with ``(shape, dtype=float32)`` and returns a tensor (inside a traced
function) of that shape; ``seed=None`` draws seed 0.
"""
from __future__ import annotations

import math

from . import dtypes
from .random import stateless_normal, stateless_truncated_normal, stateless_uniform


def _fans(shape) -> tuple[float, float]:
    shape = [int(d) for d in shape]
    if len(shape) == 0:
        return 1.0, 1.0
    if len(shape) == 1:
        return float(shape[0]), float(shape[0])
    if len(shape) == 2:
        return float(shape[0]), float(shape[1])
    receptive = math.prod(shape[:-2])
    return float(shape[-2] * receptive), float(shape[-1] * receptive)


class Initializer:
    """The base class: ``init(shape, dtype=None)`` returns a tensor."""

    def __call__(self, shape, dtype=None):  # pragma: no cover - overridden
        raise NotImplementedError

    def get_config(self) -> dict:
        return {}


class VarianceScaling(Initializer):
    """Keras' ``VarianceScaling(scale, mode, distribution, seed)``: ``mode`` ``fan_in``,
    ``fan_out`` or ``fan_avg``; ``distribution`` ``truncated_normal``, ``untruncated_normal``
    or ``uniform``."""

    def __init__(self, scale=1.0, mode="fan_in", distribution="truncated_normal", seed=None):
        if scale <= 0.0:
            raise ValueError(f"VarianceScaling: scale must be positive, got {scale}")
        if mode not in ("fan_in", "fan_out", "fan_avg"):
            raise ValueError(f"VarianceScaling: mode must be fan_in, fan_out or fan_avg, got {mode!r}")
        if distribution not in ("truncated_normal", "untruncated_normal", "uniform", "normal"):
            raise ValueError(f"VarianceScaling: unknown distribution {distribution!r}")
        self.scale, self.mode, self.seed = float(scale), mode, seed
        self.distribution = "truncated_normal" if distribution == "normal" else distribution

    def __call__(self, shape, dtype=None):
        dtype = dtypes.as_dtype(dtype or dtypes.float32)
        fan_in, fan_out = _fans(shape)
        fan = {"fan_in": fan_in, "fan_out": fan_out, "fan_avg": (fan_in + fan_out) / 2.0}[self.mode]
        scale = self.scale / max(1.0, fan)
        seed = [int(self.seed or 0), 0]
        if self.distribution == "truncated_normal":
            return stateless_truncated_normal(shape, seed, 0.0, math.sqrt(scale) / 0.87962566103423978, dtype)
        if self.distribution == "untruncated_normal":
            return stateless_normal(shape, seed, 0.0, math.sqrt(scale), dtype)
        limit = math.sqrt(3.0 * scale)
        return stateless_uniform(shape, seed, -limit, limit, dtype)

    def get_config(self) -> dict:
        return {"scale": self.scale, "mode": self.mode, "distribution": self.distribution, "seed": self.seed}


class GlorotUniform(VarianceScaling):
    """Uniform in ``±√(6 / (fan_in + fan_out))`` (``tf.keras.initializers.GlorotUniform``)."""

    def __init__(self, seed=None):
        super().__init__(1.0, "fan_avg", "uniform", seed)


class GlorotNormal(VarianceScaling):
    """Truncated normal, ``stddev = √(2 / (fan_in + fan_out)) / 0.8796…``."""

    def __init__(self, seed=None):
        super().__init__(1.0, "fan_avg", "truncated_normal", seed)


class HeUniform(VarianceScaling):
    """Uniform in ``±√(6 / fan_in)`` (``tf.keras.initializers.HeUniform``)."""

    def __init__(self, seed=None):
        super().__init__(2.0, "fan_in", "uniform", seed)


class HeNormal(VarianceScaling):
    """Truncated normal, ``stddev = √(2 / fan_in) / 0.8796…``."""

    def __init__(self, seed=None):
        super().__init__(2.0, "fan_in", "truncated_normal", seed)


class LecunUniform(VarianceScaling):
    def __init__(self, seed=None):
        super().__init__(1.0, "fan_in", "uniform", seed)


class LecunNormal(VarianceScaling):
    def __init__(self, seed=None):
        super().__init__(1.0, "fan_in", "truncated_normal", seed)


class RandomUniform(Initializer):
    """Uniform in ``[minval, maxval)`` (``tf.keras.initializers.RandomUniform``)."""

    def __init__(self, minval=-0.05, maxval=0.05, seed=None):
        self.minval, self.maxval, self.seed = minval, maxval, seed

    def __call__(self, shape, dtype=None):
        return stateless_uniform(shape, [int(self.seed or 0), 0], self.minval, self.maxval,
                                 dtypes.as_dtype(dtype or dtypes.float32))


class RandomNormal(Initializer):
    """Normal with ``mean`` and ``stddev`` (``tf.keras.initializers.RandomNormal``)."""

    def __init__(self, mean=0.0, stddev=0.05, seed=None):
        self.mean, self.stddev, self.seed = mean, stddev, seed

    def __call__(self, shape, dtype=None):
        return stateless_normal(shape, [int(self.seed or 0), 0], self.mean, self.stddev,
                                dtypes.as_dtype(dtype or dtypes.float32))


class TruncatedNormal(RandomNormal):
    """Truncated normal (``tf.keras.initializers.TruncatedNormal``)."""

    def __call__(self, shape, dtype=None):
        return stateless_truncated_normal(shape, [int(self.seed or 0), 0], self.mean, self.stddev,
                                          dtypes.as_dtype(dtype or dtypes.float32))


glorot_uniform, glorot_normal, he_uniform, he_normal = GlorotUniform, GlorotNormal, HeUniform, HeNormal
lecun_uniform, lecun_normal = LecunUniform, LecunNormal
random_uniform, random_normal, truncated_normal = RandomUniform, RandomNormal, TruncatedNormal

__all__ = ["GlorotNormal", "GlorotUniform", "HeNormal", "HeUniform", "Initializer", "LecunNormal", "LecunUniform",
           "RandomNormal", "RandomUniform", "TruncatedNormal", "VarianceScaling", "glorot_normal", "glorot_uniform",
           "he_normal", "he_uniform", "lecun_normal", "lecun_uniform", "random_normal", "random_uniform",
           "truncated_normal"]
