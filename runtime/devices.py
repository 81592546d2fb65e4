"""IREE runtime devices: one per driver per process, created on first use and destroyed
when nothing loaded on it is left (``get_device``).

Vulkan: the Vulkan loader finds Mesa's lavapipe (a CPU implementation) by
itself when no GPU driver works. irgrad never sets ``VK_ICD_FILENAMES``: doing
so would hide a real GPU. CI sets it to the lavapipe ICD only to skip probing
the other installed ICDs (1.3 s -> 0.04 s to create the device).
"""

from __future__ import annotations

import ctypes
import dataclasses
import functools
import logging
import os
import platform
import weakref
from typing import Any

from .errors import DeviceError, iree_message
from .options import Target

__all__ = ["DriverProbe", "TargetInfo", "available_drivers", "probe_drivers", "targets", "get_device"]

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Device:
    """A created IREE device with the VM instance and HAL module that go with it."""

    driver: str
    hal_device: Any
    instance: Any
    hal_module: Any


@dataclasses.dataclass(frozen=True)
class DriverProbe:
    """Whether a runtime driver can create a device here, and which one (or why not)."""

    driver: str
    ok: bool
    detail: str


@dataclasses.dataclass(frozen=True)
class TargetInfo:
    """A compile target, its aliases and the runtime drivers that run its artifacts."""

    name: str
    aliases: tuple[str, ...]
    drivers: tuple[str, ...]
    default_driver: str


# Held weakly: a device lives while something loaded on it does (a Module, a DeviceTensor).
# IREE's Vulkan driver waits on its queues with vkWaitSemaphores, which Mesa's lavapipe answers
# by polling: a Vulkan device on the CPU, idle, keeps a whole core busy until it is destroyed.
_devices: weakref.WeakValueDictionary[str, Device] = weakref.WeakValueDictionary()
_probes: dict[str, DriverProbe] = {}


def targets() -> list[TargetInfo]:
    """Every compile target irgrad knows (no probing; see ``available_drivers``)."""
    aliases = {Target.LLVM_CPU: ("cpu",), Target.VULKAN_SPIRV: ("vulkan",)}
    return [TargetInfo(t.value, aliases.get(t, ()), t.drivers, t.default_driver) for t in Target]


def compiled_in_drivers() -> list[str]:
    """Drivers this IREE runtime was built with (present or not on this machine)."""
    import iree.runtime as rt

    return list(rt.query_available_drivers())


def probe_drivers() -> dict[str, DriverProbe]:
    """Tries to create a device for every compiled-in driver; the answer is cached."""
    for driver in compiled_in_drivers():
        if driver not in _probes:
            try:
                _probes[driver] = DriverProbe(driver, True, _device_name(_create(driver)))
            except (RuntimeError, ValueError) as error:
                _probes[driver] = DriverProbe(driver, False, iree_message(error))
    return dict(_probes)


def available_drivers() -> list[str]:
    """Drivers that can create a device on this machine, e.g. ``['local-sync', 'local-task', 'vulkan']``."""
    return [name for name, probe in probe_drivers().items() if probe.ok]


def get_device(driver: str) -> Device:
    """The device for ``driver`` (an IREE driver name or device URI), one per driver in the
    process: shared by everything loaded on it, and destroyed once nothing loaded on it is left.

    Raises DeviceError when the driver is unknown or its device cannot be created.
    """
    device = _devices.get(driver)
    if device is not None:
        return device
    known = compiled_in_drivers()
    if not isinstance(driver, str) or driver.split("://")[0] not in known:
        raise DeviceError(f"unknown device {driver!r}; drivers: {', '.join(known)}")
    try:
        return _create(driver)
    except (RuntimeError, ValueError) as error:
        reason = iree_message(error)
        _probes.setdefault(driver, DriverProbe(driver, False, reason))
        usable = [d for d in available_drivers() if d != driver]
        raise DeviceError(
            f"cannot create a {driver!r} device: {reason}; available here: {', '.join(usable) or 'none'}"
        ) from None


# glibc's mallopt parameters.
_M_TRIM_THRESHOLD, _M_MMAP_MAX = -1, -4
# Free memory glibc keeps for reuse instead of returning it to the system (a call's transients).
KEPT_HEAP = 512 << 20


@functools.cache
def keep_freed_memory() -> bool:
    """Has glibc's malloc keep memory freed by a CPU call for the next one (once per process;
    ``IRGRAD_KEEP_HEAP=0`` leaves malloc as it is). True when it was set. ``loader.load`` calls
    it for a CPU artifact compiled without transient arenas (``CompileOptions.transient_arena``).

    IREE's CPU devices allocate a call's transient buffers (a gradient's saved activations:
    65 MiB for Keras' MobileNetV2 at batch 8) with malloc and free them at its end (local-task:
    those over its pool's 64 MiB slabs; local-sync: all). Past glibc's mmap threshold (at most
    32 MB) each is a fresh mapping, so every call first-touches every page again: 18,600 page
    faults and 31 ms of system time a call of that gradient, half its time (an IREE caching
    allocator does not cover transients). With mmap off for malloc and up to ``KEPT_HEAP`` of
    freed memory kept, they are reused: 33 ms a call became 16 (its forward, 6.2 ms,
    unchanged), no faults. The price: the process keeps its peak heap, up to 512 MB free, and
    smaller allocations placed in a freed block can make the next call take another (that
    gradient's second call: 135 MiB against 70; benchmarks/README.md).
    """
    if os.environ.get("IRGRAD_KEEP_HEAP", "1") == "0" or platform.system() != "Linux" \
            or platform.libc_ver()[0] != "glibc":
        return False
    try:
        libc = ctypes.CDLL(None)
        kept = libc.mallopt(_M_MMAP_MAX, 0) == 1 and libc.mallopt(_M_TRIM_THRESHOLD, KEPT_HEAP) == 1
    except (OSError, AttributeError):
        return False
    log.info("malloc keeps freed memory for reuse (mmap off, trim threshold %d MB): a CPU call's transient "
             "buffers are not faulted in again each call; IRGRAD_KEEP_HEAP=0 turns this off", KEPT_HEAP >> 20)
    return kept


def _create(driver: str) -> Device:
    device = _devices.get(driver)
    if device is None:
        import iree.runtime as rt

        hal_device = rt.get_device(driver, cache=False)  # IREE's own cache would keep it for good
        instance = rt.VmInstance()
        device = Device(driver, hal_device, instance, rt.create_hal_module(instance, hal_device))
        _devices[driver] = device
    return device


def _device_name(device: Device) -> str:
    import iree.runtime as rt

    try:
        infos = rt.get_driver(device.driver.split("://")[0]).query_available_devices()
    except (RuntimeError, ValueError):
        return device.driver
    return ", ".join(str(info.get("name", "")) for info in infos) or device.driver
