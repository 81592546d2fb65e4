"""Building and reading StableHLO: the bindings shim and shared context (``mlir``), op builders
and typed attribute readers (``hlo``), region and symbol helpers (``regions``)."""
