"""The three program transformations and the registry of rules they consult: reverse mode
(``backprop``), forward mode (``forward``, with the general tangent forms) and batching
(``batching``, with its loop fallback). Each op's rules live in ``passes/rules``."""
