"""Typed compile options and the iree-compile flags they stand for."""

from __future__ import annotations

import dataclasses
import enum
import os
import platform
import re
import shlex
from collections.abc import Iterable

__all__ = ["Target", "CompileOptions", "TARGET_FLAGS"]


class Target(str, enum.Enum):
    """An IREE compile target backend (its value is IREE's backend name)."""

    LLVM_CPU = "llvm-cpu"
    VMVX = "vmvx"
    VULKAN_SPIRV = "vulkan-spirv"
    CUDA = "cuda"
    ROCM = "rocm"

    def __str__(self) -> str:
        return self.value

    @classmethod
    def parse(cls, value: str | Target) -> Target:
        """Returns the target named by ``value`` (aliases ``cpu`` and ``vulkan`` accepted).

        Raises ValueError listing the allowed names.
        """
        if isinstance(value, Target):
            return value
        if isinstance(value, str):
            name = value.strip().lower()
            name = _TARGET_ALIASES.get(name, name)
            for target in cls:
                if target.value == name:
                    return target
        raise ValueError(f"unknown target {value!r}; allowed: {allowed_targets()}")

    @property
    def default_driver(self) -> str:
        """The IREE runtime driver that runs this target's artifacts."""
        return _DEFAULT_DRIVER[self]

    @property
    def drivers(self) -> tuple[str, ...]:
        """Every IREE runtime driver that can run this target's artifacts."""
        return _DRIVERS[self]


_TARGET_ALIASES = {"cpu": "llvm-cpu", "vulkan": "vulkan-spirv"}
_DEFAULT_DRIVER = {
    Target.LLVM_CPU: "local-task",
    Target.VMVX: "local-task",
    Target.VULKAN_SPIRV: "vulkan",
    Target.CUDA: "cuda",
    Target.ROCM: "hip",
}
_DRIVERS = {
    Target.LLVM_CPU: ("local-task", "local-sync"),
    Target.VMVX: ("local-task", "local-sync"),
    Target.VULKAN_SPIRV: ("vulkan",),
    Target.CUDA: ("cuda",),
    Target.ROCM: ("hip",),
}


def allowed_targets() -> str:
    """The allowed target names, aliases in parentheses, for error messages."""
    alias_of = {v: k for k, v in _TARGET_ALIASES.items()}
    return ", ".join(
        f"{t.value} ({alias_of[t.value]})" if t.value in alias_of else t.value for t in Target
    )


# The command-line flags (irgrad compile --cpu ...) of the CompileOptions fields each
# target takes; --cuda-arch sets cuda_arch and so on.
TARGET_FLAGS: dict[str, tuple[str, ...]] = {
    "llvm-cpu": ("--cpu", "--triple"),
    "vmvx": (),
    "vulkan-spirv": (),
    "cuda": ("--cuda-arch",),
    "rocm": ("--rocm-arch",),
}

# Architectures of --iree-llvmcpu-target-triple that irgrad has checked.
_TRIPLE_ARCHES = ("x86_64", "aarch64", "riscv64")
_TRIPLE = re.compile(r"^(?P<arch>[a-z0-9_]+)(-[A-Za-z0-9_.]+){0,3}$")
_CPU = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$")
_CUDA_ARCH = re.compile(r"^sm_[0-9]{2,3}[a-z]?$")
_ROCM_ARCH = re.compile(r"^gfx[0-9][0-9a-f]{1,3}$")

# riscv64's "generic" CPU has no F/D extensions, so every float op would
# become a soft-float libcall that the embedded linker cannot resolve.
_RISCV64_GENERIC = (
    "--iree-llvmcpu-target-cpu=generic-rv64",
    "--iree-llvmcpu-target-cpu-features=+m,+a,+f,+d,+c",
    "--iree-llvmcpu-target-abi=lp64d",
)


def _system_link_flags() -> list[str]:
    """Link with IREE's bundled lld in GNU mode, so no system linker is needed."""
    # lazy: options are built and checked without loading the IREE compiler package
    from iree.compiler.tools.binaries import find_tool

    # iree-compile runs this "path" through the shell, so flags can ride along.
    lld = shlex.quote(find_tool("iree-lld"))
    return ["--iree-llvmcpu-link-embedded=false", f"--iree-llvmcpu-system-linker-path={lld} -flavor gnu"]


_BYTES = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?\s*$", re.IGNORECASE)


def parse_bytes(value: int | str | None, what: str) -> int | None:
    """``12G``, ``512M``, ``1.5g`` or a number of bytes -> bytes (``None`` stays ``None``)."""
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    match = _BYTES.match(value) if isinstance(value, str) else None
    if match is None or float(match.group(1)) <= 0:
        raise ValueError(f"bad {what} {value!r}; allowed: bytes > 0, or a size such as 12G or 512M")
    scale = 1 << (10 * " kmgt".index(match.group(2).lower() or " "))
    return int(float(match.group(1)) * scale)


def format_bytes(n: int) -> str:
    """``12884901888`` -> ``12 GiB``."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):.3g} {unit}"
    return f"{n} bytes"


def host_arch() -> str:
    machine = platform.machine().lower()
    return {"amd64": "x86_64", "arm64": "aarch64"}.get(machine, machine)


@dataclasses.dataclass(frozen=True)
class CompileOptions:
    """What to compile for. String fields are validated and normalised on construction.

    Attributes:
        target: compile target (``Target`` or its name; ``cpu`` and ``vulkan`` are aliases).
        cpu: llvm-cpu only: ``"host"``, ``"generic"`` or an LLVM CPU name
            (``skylake``, ``znver4``, ``neoverse-v2``). With a cross ``triple``,
            ``"host"`` means ``"generic"``.
        triple: llvm-cpu only: target triple such as ``aarch64-linux-gnu``;
            ``None`` compiles for this machine.
        cuda_arch: cuda only: ``sm_<NN>`` such as ``sm_80`` or ``sm_90a``.
        rocm_arch: rocm only: ``gfx<N>`` such as ``gfx942`` or ``gfx1100``.
        extra_flags: more iree-compile flags, appended last.
        memory_limit: the most memory (address space) iree-compile may take, in bytes or as
            ``"12G"``/``"512M"``; ``None``: ``$IRGRAD_COMPILE_MEMORY``, else half of this
            machine's memory (at least 2 GiB). A compile past it is a ``CompileError``.
        time_limit: the most seconds a compile may take; ``None``: ``$IRGRAD_COMPILE_TIMEOUT``,
            else 1800. Neither limit changes the artifact or its cache key.
        transient_arena: llvm-cpu only: each public function takes its transient buffers from
            one arena that the loaded function allocates once and reuses every call (IREE's
            ``iree.abi.transients``), instead of allocating them per call. A call then neither
            allocates nor page-faults its transients, and loading the artifact leaves malloc as it
            is (``devices.keep_freed_memory``); the arena is held while the module is, and IREE
            lays it out with non-overlapping lifetimes, so it can exceed the per-call peak
            (benchmarks/README.md, "The second call's peak"). A module with a loop or a
            conditional (``stablehlo.while``/``case``/``if``) compiles without arenas: IREE
            3.13's emplacement fails on them.
    """

    target: Target = Target.LLVM_CPU
    cpu: str = "host"
    triple: str | None = None
    cuda_arch: str = "sm_80"
    rocm_arch: str = "gfx942"
    extra_flags: tuple[str, ...] = ()
    memory_limit: int | str | None = None
    time_limit: float | None = None
    transient_arena: bool = False

    def __post_init__(self) -> None:
        set_ = lambda name, value: object.__setattr__(self, name, value)  # noqa: E731
        set_("target", Target.parse(self.target))
        if not isinstance(self.cpu, str) or not _CPU.match(self.cpu):
            raise ValueError(
                f"bad cpu {self.cpu!r}; allowed: host, generic, or an LLVM CPU name "
                "(e.g. skylake, znver4, neoverse-v2)"
            )
        if self.triple is not None:
            match = _TRIPLE.match(self.triple) if isinstance(self.triple, str) else None
            if match is None or match.group("arch") not in _TRIPLE_ARCHES:
                raise ValueError(
                    f"bad triple {self.triple!r}; allowed: <arch>-<os>[-<env>] with arch one of "
                    f"{', '.join(_TRIPLE_ARCHES)} (e.g. aarch64-linux-gnu)"
                )
            if self.target is not Target.LLVM_CPU:
                raise ValueError(f"triple applies to target llvm-cpu only, not {self.target.value}")
        if not isinstance(self.cuda_arch, str) or not _CUDA_ARCH.match(self.cuda_arch):
            raise ValueError(
                f"bad cuda_arch {self.cuda_arch!r}; allowed: sm_<NN> (e.g. sm_80, sm_90, sm_90a)"
            )
        if not isinstance(self.rocm_arch, str) or not _ROCM_ARCH.match(self.rocm_arch):
            raise ValueError(
                f"bad rocm_arch {self.rocm_arch!r}; allowed: gfx<N> (e.g. gfx90a, gfx942, gfx1100)"
            )
        flags = (self.extra_flags,) if isinstance(self.extra_flags, str) else self.extra_flags
        flags = tuple(flags)
        for flag in flags:
            if not isinstance(flag, str) or not flag.startswith("-"):
                raise ValueError(f"bad extra flag {flag!r}; allowed: iree-compile flags starting with '-'")
        set_("extra_flags", flags)
        set_("memory_limit", parse_bytes(self.memory_limit, "memory_limit"))
        if self.time_limit is not None and (isinstance(self.time_limit, bool) or not isinstance(
                self.time_limit, int | float) or not self.time_limit > 0):
            raise ValueError(f"bad time_limit {self.time_limit!r}; allowed: a number of seconds > 0")
        if not isinstance(self.transient_arena, bool):
            raise ValueError(f"bad transient_arena {self.transient_arena!r}; allowed: True or False")
        if self.transient_arena and self.target is not Target.LLVM_CPU:
            raise ValueError(f"transient_arena applies to target llvm-cpu only, not {self.target.value}")

    @property
    def compile_memory_limit(self) -> int:
        """The memory limit in force for this compile, in bytes (``memory_limit``)."""
        if self.memory_limit is not None:
            return self.memory_limit
        env = os.environ.get("IRGRAD_COMPILE_MEMORY")
        if env:
            return parse_bytes(env, "IRGRAD_COMPILE_MEMORY")
        try:
            physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (ValueError, OSError, AttributeError):
            physical = 16 << 30
        return max(2 << 30, physical // 2)

    @property
    def compile_time_limit(self) -> float:
        """The time limit in force for this compile, in seconds (``time_limit``)."""
        if self.time_limit is not None:
            return float(self.time_limit)
        env = os.environ.get("IRGRAD_COMPILE_TIMEOUT")
        if env:
            try:
                value = float(env)
            except ValueError:
                value = -1.0
            if not value > 0:
                raise ValueError(f"bad IRGRAD_COMPILE_TIMEOUT {env!r}; allowed: a number of seconds > 0")
            return value
        return 1800.0

    @property
    def is_cross(self) -> bool:
        """True when compiling llvm-cpu code for another architecture than this machine's."""
        return self.triple is not None and self.triple.split("-")[0] != host_arch()

    @property
    def effective_cpu(self) -> str:
        """The CPU passed to IREE: ``host`` turns into ``generic`` for a cross triple."""
        return "generic" if self.cpu == "host" and self.is_cross else self.cpu

    def flags(self, *, system_link: bool = False) -> list[str]:
        """The iree-compile argument list (without input and output files).

        ``system_link`` (llvm-cpu on Linux only) links executables as system
        shared objects whose math calls the process's libm resolves; irgrad
        turns it on for float64 modules, see ``compiler.needs_system_link``.
        """
        return [
            "--iree-input-type=stablehlo",
            f"--iree-hal-target-backends={self.target.value}",
            *self.backend_flags(system_link=system_link),
        ]

    def backend_flags(self, *, system_link: bool = False) -> list[str]:
        """``flags()`` without input type and target backend (what ``compile_str`` takes as ``extra_args``)."""
        # Without this IREE silently turns float64 into float32, changing signatures.
        flags = ["--iree-input-demote-f64-to-f32=false"]
        if self.target is Target.LLVM_CPU:
            if self.triple is not None:
                flags.append(f"--iree-llvmcpu-target-triple={self.triple}")
            arch = self.triple.split("-")[0] if self.triple else host_arch()
            if arch == "riscv64" and self.effective_cpu == "generic":
                flags.extend(_RISCV64_GENERIC)
            else:
                # Passing a CPU explicitly also silences IREE's long warning.
                flags.append(f"--iree-llvmcpu-target-cpu={self.effective_cpu}")
            if system_link:
                flags.extend(_system_link_flags())
        elif self.target is Target.CUDA:
            flags.append(f"--iree-cuda-target={self.compiled_cuda_arch}")
        elif self.target is Target.ROCM:
            flags.append(f"--iree-rocm-target={self.rocm_arch}")
        flags.extend(self.extra_flags)
        return flags

    @property
    def compiled_cuda_arch(self) -> str:
        """The architecture IREE compiles for: IREE 3.13 has no target description past
        sm_89 (iree-org/iree#22147), so newer GPUs get sm_80 PTX, which the CUDA driver
        compiles for the GPU when the artifact loads (PTX is forward compatible)."""
        number = int(re.match(r"sm_(\d+)", self.cuda_arch).group(1))
        return "sm_80" if number > 89 else self.cuda_arch

    def replace(self, **changes: object) -> CompileOptions:
        """A copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)

    @classmethod
    def from_strings(
        cls,
        target: str = "llvm-cpu",
        *,
        cpu: str | None = None,
        triple: str | None = None,
        cuda_arch: str | None = None,
        rocm_arch: str | None = None,
        extra_flags: Iterable[str] = (),
    ) -> CompileOptions:
        """Builds options from command-line style values; ``None`` keeps a default."""
        given = {"cpu": cpu, "cuda_arch": cuda_arch, "rocm_arch": rocm_arch}
        return cls(
            target=Target.parse(target),
            triple=triple,
            extra_flags=tuple(extra_flags),
            **{k: v for k, v in given.items() if v is not None},
        )

    @classmethod
    def for_target(
        cls,
        target: str,
        *,
        cpu: str | None = None,
        triple: str | None = None,
        cuda_arch: str | None = None,
        rocm_arch: str | None = None,
    ) -> CompileOptions:
        """``from_strings`` for a command line, which also rejects a flag the target does not take.

        Raises ValueError, e.g. ``--cpu applies to target llvm-cpu only, not vulkan-spirv``
        (flag names from ``TARGET_FLAGS``).
        """
        canonical = Target.parse(target).value
        given = {"--cpu": cpu, "--triple": triple, "--cuda-arch": cuda_arch, "--rocm-arch": rocm_arch}
        for flag, value in given.items():
            if value is not None and flag not in TARGET_FLAGS[canonical]:
                takes = ", ".join(t for t, flags in TARGET_FLAGS.items() if flag in flags)
                raise ValueError(f"{flag} applies to target {takes} only, not {canonical}")
        return cls.from_strings(target, cpu=cpu, triple=triple, cuda_arch=cuda_arch, rocm_arch=rocm_arch)

    def describe(self) -> str:
        """What is compiled for, in words: ``llvm-cpu, cpu host``, ``cuda sm_86``, ``rocm gfx942``."""
        if self.target is Target.LLVM_CPU:
            return f"llvm-cpu, cpu {self.effective_cpu}" + (f", {self.triple}" if self.triple else "")
        if self.target is Target.CUDA:
            compiled = self.compiled_cuda_arch
            if compiled != self.cuda_arch:  # IREE 3.13 knows no newer target: forward-compatible PTX
                return f"cuda {self.cuda_arch} (as {compiled} PTX, compiled for the GPU when loaded)"
            return f"cuda {self.cuda_arch}"
        if self.target is Target.ROCM:
            return f"rocm {self.rocm_arch}"
        return self.target.value
