"""irgrad.runtime: compile StableHLO with IREE, load the artifacts, call them with numpy.

This package knows only IREE (``iree.compiler``, ``iree.runtime``) and numpy;
it never imports the irgrad frontend or ``passes``. It logs under ``irgrad.runtime``
(compiles, cache hits and evictions, IREE workarounds, the default device).
"""

from .artifact import Artifact
from .vmfb import executable_formats, read_metadata
from .cache import CacheInfo, cache_info, cache_root, cache_size_limit, clear_cache
from .compiler import cache_dir, cache_stats, clear_memory_cache, compile, compiler_version
from .devices import DriverProbe, TargetInfo, available_drivers, probe_drivers, targets
from .errors import ArtifactError, CompileError, DeviceError, IRParseError
from .loader import DeviceTensor, Function, Module, load, runtime_version
from .options import CompileOptions, Target
from .signature import DTYPES, Signature, TensorType, parse_signatures

__all__ = [
    "Artifact",
    "ArtifactError",
    "CacheInfo",
    "CompileError",
    "CompileOptions",
    "DTYPES",
    "DeviceError",
    "DeviceTensor",
    "DriverProbe",
    "Function",
    "IRParseError",
    "Module",
    "Signature",
    "Target",
    "TargetInfo",
    "TensorType",
    "available_drivers",
    "cache_dir",
    "cache_info",
    "cache_root",
    "cache_size_limit",
    "cache_stats",
    "clear_cache",
    "clear_memory_cache",
    "compile",
    "compiler_version",
    "executable_formats",
    "load",
    "parse_signatures",
    "probe_drivers",
    "read_metadata",
    "runtime_version",
    "targets",
]
