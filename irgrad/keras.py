"""``ig.keras``: the part of ``tf.keras`` irgrad has: ``ig.keras.initializers``."""
from . import initializers

__all__ = ["initializers"]
