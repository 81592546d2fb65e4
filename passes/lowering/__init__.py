"""Rewrites that make StableHLO from any producer compile well on IREE: ``legalize`` (the IREE
workarounds, applied before every compile), ``summation`` (blocked float sums), ``patches``
(im2col windows), ``dynamic_shapes``, ``lapack`` (producers' LAPACK calls as StableHLO),
``invariance`` (what a value provably does not depend on) and ``choices`` (every shape-dependent
formulation, with the measurements behind it)."""
