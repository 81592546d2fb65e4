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


def peak_allocation(text: str, function: str) -> int:
    """The most bytes a call of ``function`` has allocated at once: its ``queue.alloca`` and
    ``queue.dealloca`` ops in program order (static sizes), built as ``ig.compile`` builds it."""
    program = ig.runtime.compiler.host_program(text)
    sizes = dict(re.findall(r"(%c\d+) = arith.constant (\d+) : index", program))
    body = program[program.index(f"util.func public @{function}("):]
    end = body.find("\n  util.func", 10)
    live: dict[str, int] = {}
    peak = 0
    for line in body[:end if end > 0 else None].splitlines():
        made = re.search(r"(%[\w]+) = hal\.device\.queue\.alloca.*!hal\.buffer\{(%c\d+)\}", line)
        if made:
            live[made.group(1)] = int(sizes[made.group(2)])
            peak = max(peak, sum(live.values()))
        freed = re.search(r"hal\.device\.queue\.dealloca.*buffer\((%[\w]+)", line)
        if freed:
            live.pop(freed.group(1), None)
    return peak
