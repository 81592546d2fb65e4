"""``ig.optimizers``: Keras's SGD and Adam, inside traced code.

``apply_gradients`` updates ``ig.Variable``s with ``assign``, so a traced function that calls it
returns the new values and irgrad writes them back after the call (see ``variables.py``).
Slots (momentum, Adam's moments) are non-trainable variables created the first time a variable
is updated; ``iterations`` counts the steps applied. The update rules and defaults are Keras 3's.
"""
from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from . import dtypes
from .ops import cast, sqrt
from .variables import Variable


class Optimizer:
    """What SGD and Adam share: the learning rate, the step counter, slots, ``minimize``."""

    def __init__(self, learning_rate: float, name: str):
        self.learning_rate = float(learning_rate)
        self.name = name
        self.iterations = Variable(np.int64(0), trainable=False, name=f"{name}/iterations", dtype=dtypes.int64)
        self._slots: dict[tuple[int, str], Variable] = {}

    def slot(self, var: Variable, kind: str) -> Variable:
        """The ``kind`` slot of ``var`` (zeros shaped like it, made on first use)."""
        key = (id(var), kind)
        if key not in self._slots:
            self._slots[key] = Variable(np.zeros_like(var.numpy()), trainable=False,
                                        name=f"{self.name}/{var.name.split(':')[0]}/{kind}")
        return self._slots[key]

    @property
    def variables(self) -> list[Variable]:
        return [self.iterations, *self._slots.values()]

    def apply_gradients(self, grads_and_vars: Iterable) -> None:
        """One step for every ``(gradient, variable)`` pair (a None gradient skips its variable)."""
        pairs = [(g, v) for g, v in grads_and_vars if g is not None]
        for _, v in pairs:
            if not isinstance(v, Variable):
                raise TypeError(f"{self.name}.apply_gradients: expected ig.Variable, got {type(v).__name__}")
        for g, v in pairs:
            self.update(v, cast(g, v.dtype))
        self.iterations.assign_add(np.int64(1))

    def minimize(self, loss, var_list, tape=None) -> None:
        """``apply_gradients`` of ``loss``'s gradients (``tape.gradient`` when a tape is given)."""
        from .gradients import gradients  # gradients imports the frontend that imports us
        var_list = list(var_list)
        grads = tape.gradient(loss, var_list) if tape is not None else gradients(loss, var_list)
        self.apply_gradients(zip(grads, var_list))

    def update(self, var: Variable, grad) -> None:
        raise NotImplementedError


class SGD(Optimizer):
    """``v = momentum·v - lr·g``; ``w += v`` (nesterov: ``w += momentum·v - lr·g``); without
    momentum ``w -= lr·g``."""

    def __init__(self, learning_rate: float = 0.01, momentum: float = 0.0, nesterov: bool = False, name: str = "SGD"):
        if not 0.0 <= momentum <= 1.0:
            raise ValueError(f"`momentum` must be a float between [0, 1], got {momentum}")
        super().__init__(learning_rate, name)
        self.momentum, self.nesterov = float(momentum), bool(nesterov)

    def update(self, var: Variable, grad) -> None:
        lr = self.learning_rate
        if self.momentum == 0.0:
            var.assign_sub(grad * lr)
            return
        m = self.slot(var, "momentum")
        new_m = m.assign(-grad * lr + m.value() * self.momentum)
        var.assign_add(-grad * lr + new_m * self.momentum if self.nesterov else new_m)


class Adam(Optimizer):
    """Keras's Adam: ``m += (g - m)(1 - β1)``, ``v += (g² - v)(1 - β2)``,
    ``w -= m·α / (√v + ε)`` with ``α = lr·√(1 - β2^t) / (1 - β1^t)`` at step ``t``."""

    def __init__(self, learning_rate: float = 0.001, beta_1: float = 0.9, beta_2: float = 0.999,
                 epsilon: float = 1e-7, name: str = "Adam"):
        super().__init__(learning_rate, name)
        self.beta_1, self.beta_2, self.epsilon = float(beta_1), float(beta_2), float(epsilon)

    def update(self, var: Variable, grad) -> None:
        t = cast(self.iterations.value() + 1, var.dtype)
        alpha = self.learning_rate * sqrt(1.0 - self.beta_2 ** t) / (1.0 - self.beta_1 ** t)
        m, v = self.slot(var, "m"), self.slot(var, "v")
        new_m = m.assign_add((grad - m.value()) * (1.0 - self.beta_1))
        new_v = v.assign_add((grad * grad - v.value()) * (1.0 - self.beta_2))
        var.assign_sub(new_m * alpha / (sqrt(new_v) + self.epsilon))


__all__ = ["Optimizer", "SGD", "Adam"]
