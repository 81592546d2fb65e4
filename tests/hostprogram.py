"""Reading IREE's host program (``irgrad.runtime.compiler.host_program``) in tests."""
from __future__ import annotations

import re

import irgrad as ig


def largest_buffer(text: str) -> int:
    """The bytes of the largest buffer a call of the module allocates (its
    ``hal.device.queue.alloca`` ops, static sizes), built as ``ig.compile`` builds it."""
    program = ig.runtime.compiler.host_program(text)
    sizes = dict(re.findall(r"(%c\d+) = arith.constant (\d+) : index", program))
    return max(int(sizes[c]) for c in re.findall(r"queue\.alloca.*!hal\.buffer\{(%c\d+)\}", program))


# The most bytes a call of a function has allocated at once, built as ``ig.compile`` builds it.
peak_allocation = ig.runtime.compiler.peak_allocation
