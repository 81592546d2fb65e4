"""Loading an artifact on a device and calling its functions with numpy arrays.

Arguments are checked against the function's signature before IREE sees
them; results come back as numpy arrays that own their memory. ``DeviceTensor`` objects
(``Module.put``, ``Function.on_device``) keep arrays in the device's memory between
calls, as JAX's arrays do: passed to a function they are used where they are.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import logging
import os
import re
import shutil
import tempfile
import threading
from pathlib import Path
from typing import Any
from collections.abc import Iterator, Sequence

import numpy as np

from .vmfb import read_metadata, read_sidecar, signatures_from_metadata, vm_module
from .devices import Device, compiled_in_drivers, get_device, keep_freed_memory
from .errors import ArtifactError, DeviceError, iree_message
from .options import host_arch, Target
from .signature import Signature, TensorType
from .trainer import Trainer

__all__ = ["load", "Module", "Function", "DeviceTensor"]


@functools.cache
def _element_types() -> dict[str, tuple[np.dtype, Any]]:
    """dtype name -> (numpy storage dtype, HalElementType)."""
    import iree.runtime as rt

    E = rt.HalElementType
    return {
        "float16": (np.dtype(np.float16), E.FLOAT_16),
        "bfloat16": (np.dtype(np.uint16), E.BFLOAT_16),
        "float32": (np.dtype(np.float32), E.FLOAT_32),
        "float64": (np.dtype(np.float64), E.FLOAT_64),
        "bool": (np.dtype(np.int8), E.BOOL_8),
        "int8": (np.dtype(np.int8), E.SINT_8),
        "int16": (np.dtype(np.int16), E.SINT_16),
        "int32": (np.dtype(np.int32), E.SINT_32),
        "int64": (np.dtype(np.int64), E.SINT_64),
        "uint8": (np.dtype(np.uint8), E.UINT_8),
        "uint16": (np.dtype(np.uint16), E.UINT_16),
        "uint32": (np.dtype(np.uint32), E.UINT_32),
        "uint64": (np.dtype(np.uint64), E.UINT_64),
        "complex64": (np.dtype(np.complex64), E.COMPLEX_64),  # complex<f32>: 64 bits in all
        "complex128": (np.dtype(np.complex128), E.COMPLEX_128),
    }


# Result dtypes whose storage is the numpy dtype itself (bool, bfloat16: converted).
_PLAIN_DTYPES = {name: np.dtype(name) for name in ("float16", "float32", "float64", "int8", "int16", "int32",
                                                   "int64", "uint8", "uint16", "uint32", "uint64",
                                                   "complex64", "complex128")}

# Python values (and lists of them) by numpy kind -> the kinds of dtype they convert to: bools fit
# any numeric dtype, ints any integer, float or complex one (range-checked), floats float and
# complex dtypes, complex numbers complex dtypes only.
_PYTHON_KINDS = {"b": "biufcV", "i": "iufcV", "u": "iufcV", "f": "fcV", "c": "c"}


def _bfloat16() -> np.dtype | None:
    try:
        import ml_dtypes
    except ImportError:
        return None
    return np.dtype(ml_dtypes.bfloat16)


def _numpy_dtype(name: str) -> np.dtype | None:
    """The numpy dtype of an argument of dtype ``name`` (None: bfloat16 without ml_dtypes)."""
    return _bfloat16() if name == "bfloat16" else np.dtype(name)


def _fmt_shape(shape: Sequence[int | None]) -> str:
    dims = ["?" if d is None else str(d) for d in shape]
    return "(" + ", ".join(dims) + ("," if len(dims) == 1 else "") + ")"


class Function:
    """A callable public function of a loaded Module."""

    def __init__(self, module: Module, signature: Signature, vm_function: Any) -> None:
        self._module = module
        self._vm_function = vm_function
        self.signature = signature
        # Per argument, what a call needs (read once, not per call): the numpy dtype an array
        # must have (None: bfloat16 without ml_dtypes), its static shape (None: dynamic), and
        # the storage dtype and HAL element type of its upload.
        types = _element_types()
        self._inputs = [(_numpy_dtype(t.dtype), None if None in t.shape else tuple(t.shape), *types[t.dtype])
                        for t in signature.inputs]
        # Arguments the function never reads (the compiler's "unused" metadata) get one
        # placeholder buffer of their shape, made once, instead of a copy per call.
        self._unused = frozenset(module.metadata.get("unused", {}).get(signature.name, ()))
        self._placeholders: dict[int, tuple[tuple[int, ...], Any]] = {}
        self._staging: dict[int, list[Any]] = {}  # host-visible buffers for results, by size
        import iree.runtime as rt

        hal = module._device.hal_device
        self._copy_to_device = module._copy_to_device
        # A function compiled with a transient arena (CompileOptions.transient_arena) takes it
        # as a last argument: one buffer of the size IREE exports, allocated on the first call
        # and reused by every call after it (a call made while another thread's holds it gets
        # one of its own).
        reflection = vm_function.reflection
        self._arena_query = reflection.get("iree.abi.transients.size")
        constant = reflection.get("iree.abi.transients.size.constant")
        self._arena_size = None if constant is None else int(constant)
        self._arena: Any = None
        self._arena_lock = threading.Lock()
        self._allocate = functools.partial(
            hal.allocator.allocate_buffer, memory_type=rt.MemoryType.DEVICE_LOCAL,
            allowed_usage=rt.BufferUsage.DEFAULT)

    @property
    def name(self) -> str:
        return self.signature.name

    def __repr__(self) -> str:
        return f"<irgrad Function {self.signature!r} on {self._module.device}>"

    def __call__(self, *args: Any) -> np.ndarray | tuple[np.ndarray, ...] | None:
        """Runs the function: one array for one result, a tuple for several, None for none."""
        results = self.call_flat(*args)
        if len(results) == 1:
            return results[0]
        return tuple(results) if results else None

    def call_flat(self, *args: Any) -> list[np.ndarray]:
        """Runs the function and returns every result in a list.

        Arguments are numpy arrays (or values numpy converts), copied to the device for the
        call, or ``DeviceTensor`` objects of this device, used where they are.

        Raises:
            TypeError: wrong number of arguments, or an array of the wrong dtype.
            ValueError: an argument of the wrong shape.
            DeviceError: a ``DeviceTensor`` of another device.
        """
        return self._download(self._views(args), self.signature.outputs)

    def on_device(self, *args: Any) -> DeviceTensor | tuple[DeviceTensor, ...] | None:
        """Runs the function and leaves its results in the device's memory: one
        ``DeviceTensor`` for one result, a tuple for several, None for none (as a call).

        Nothing is copied to the host: pass the results to this module's functions (or those
        of another module on the same device) as they are, and read them with
        ``np.asarray(tensor)`` when needed. Raises as ``call_flat``."""
        device = self._module._device
        results = [DeviceTensor(view, device, t.dtype)
                   for view, t in zip(self._views(args), self.signature.outputs)]
        if len(results) == 1:
            return results[0]
        return tuple(results) if results else None

    def _views(self, args: Sequence[Any]) -> list[Any]:
        """Runs the function on ``args``: its results as device buffer views."""
        sig = self.signature
        if len(args) != len(sig.inputs):
            raise TypeError(f"{sig.name} expects {len(sig.inputs)} arguments, got {len(args)}")
        unused = self._unused
        return self._invoke([self._resident(i, arg) if type(arg) is DeviceTensor
                             else self._placeholder(i, arg) if i in unused else self._upload(i, arg)
                             for i, arg in enumerate(args)])

    def _resident(self, index: int, tensor: DeviceTensor) -> Any:
        """A ``DeviceTensor`` argument, checked: its buffer view, as it is."""
        want = self.signature.inputs[index]
        where = f"{self.signature.name} argument {index}"
        if tensor._device is not self._module._device:
            raise DeviceError(f"{where}: the tensor is in the memory of {tensor.device!r}, this module runs on "
                              f"{self._module.device!r}; pass np.asarray(tensor) or put it on this device")
        if tensor.dtype != want.dtype:
            raise TypeError(f"{where}: expected dtype {want.dtype}, got a {tensor.dtype} DeviceTensor")
        if not want.matches_shape(tensor.shape):
            raise ValueError(f"{where}: expected shape {_fmt_shape(want.shape)}, got {_fmt_shape(tensor.shape)}")
        return tensor._view

    def _checked(self, index: int, arg: Any) -> np.ndarray:
        dtype, shape, _, _ = self._inputs[index]
        if type(arg) is np.ndarray and arg.dtype == dtype and arg.shape == shape \
                and not self._module._portable_vulkan:
            return arg  # the common case, already right: nothing to convert or check
        return self._check(index, arg, self.signature.inputs[index])

    def _upload(self, index: int, arg: Any) -> Any:
        """Argument ``index`` checked and copied into a device buffer view."""
        array = self._checked(index, arg)
        _, _, storage, element_type = self._inputs[index]
        if array.dtype != storage or not array.flags.c_contiguous:
            # (np.ascontiguousarray would turn a 0-d array into a 1-d one.)
            array = np.asarray(array, order="C").view(storage)
        return self._copy_to_device(buffer=array, element_type=element_type)

    def _placeholder(self, index: int, arg: Any) -> Any:
        """Argument ``index``, which the function never reads: checked, and stood in for by
        a device buffer of its shape kept from an earlier call."""
        shape = self._checked(index, arg).shape
        kept = self._placeholders.get(index)
        if kept is None or kept[0] != shape:
            kept = self._placeholders[index] = (shape, self._upload(index, np.zeros(shape, self._inputs[index][2])))
        return kept[1]

    def _invoke(self, views: list[Any]) -> list[Any]:
        """Runs the function on device buffer views; its results as device buffer views."""
        if self._arena_query is None:
            return self._run(views)
        if not self._arena_lock.acquire(blocking=False):  # another thread's call holds the arena
            return self._run([*views, self._allocate(allocation_size=self._arena_bytes(views))])
        try:
            size = self._arena_bytes(views)
            if self._arena is None or self._arena.byte_length() < size:
                self._arena = None  # the old one goes before the new one comes
                self._arena = self._allocate(allocation_size=size)
            return self._run([*views, self._arena])
        finally:
            self._arena_lock.release()

    def _arena_bytes(self, views: list[Any]) -> int:
        """The transient arena this call needs: the size IREE exported, or (shapes known only
        at run time) what its size function answers for these arguments."""
        if self._arena_size is not None:
            return max(self._arena_size, 1)
        import iree.runtime as rt

        query = self._module._vm_module.lookup_function(self._arena_query)
        arg_list = rt.VmVariantList(len(views) + 1)
        for view in views:
            arg_list.push_ref(view)
        arg_list.push_ref(self._allocate(allocation_size=1))
        ret_list = rt.VmVariantList(1)
        self._module._context.invoke(query, arg_list, ret_list)
        return max(int(ret_list.get_variant(0)), 1)

    def _run(self, refs: list[Any]) -> list[Any]:
        import iree.runtime as rt

        arg_list = rt.VmVariantList(len(refs))
        for ref in refs:
            arg_list.push_ref(ref)
        n = len(self.signature.outputs)
        ret_list = rt.VmVariantList(n)
        self._module._context.invoke(self._vm_function, arg_list, ret_list)
        view_type = rt.HalBufferView
        return [ret_list.get_as_object(i, view_type) for i in range(n)]

    def _download(self, views: Sequence[Any], types: Sequence[TensorType]) -> list[np.ndarray]:
        """Device buffer views copied into numpy arrays."""
        if self._module._host_memory and all(t.dtype in _PLAIN_DTYPES and v.byte_length
                                             for v, t in zip(views, types)):
            # A CPU device's results are host memory: map and copy, nothing to convert.
            return [v.map().asarray(v.shape, _PLAIN_DTYPES[t.dtype]).copy() for v, t in zip(views, types)]
        return _to_numpy(self._module._device.hal_device, views, [t.dtype for t in types], self._staging)

    def _check(self, index: int, arg: Any, want: TensorType) -> np.ndarray:
        where = f"{self.signature.name} argument {index}"
        dtype = _numpy_dtype(want.dtype)
        if dtype is None:
            raise TypeError(f"{where}: bfloat16 arguments need numpy's bfloat16 dtype from ml_dtypes")
        if isinstance(arg, (np.ndarray, np.generic)):
            array = np.asarray(arg)
            if array.dtype != dtype and array.dtype.newbyteorder("=") == dtype:
                array = array.astype(dtype)  # the other byte order (">f4" data): the same numbers
            if array.dtype != dtype:
                raise TypeError(f"{where}: expected dtype {want.dtype}, got {array.dtype.name}")
        else:
            try:
                given = np.asarray(arg)
            except ValueError as error:  # ragged nested lists
                raise TypeError(f"{where}: cannot convert {type(arg).__name__} to {want.dtype}: {error}") from None
            if given.dtype.kind not in "biufc":
                raise TypeError(f"{where}: cannot convert {type(arg).__name__} to {want.dtype}")
            # (_PYTHON_KINDS: which values convert to which dtypes.)
            if dtype.kind not in _PYTHON_KINDS[given.dtype.kind]:
                raise TypeError(f"{where}: cannot convert {given.dtype.name} values to {want.dtype}")
            try:
                array = np.asarray(arg, dtype=dtype)
            except (OverflowError, ValueError) as error:
                raise TypeError(f"{where}: cannot convert to {want.dtype}: {error}") from None
        if not want.matches_shape(array.shape):
            raise ValueError(f"{where}: expected shape {_fmt_shape(want.shape)}, got {_fmt_shape(array.shape)}")
        self._module._check_width(where, array, want.dtype)
        return array


def _to_numpy(hal_device: Any, views: Sequence[Any], dtypes: Sequence[str],
              staging: dict[int, list[Any]]) -> list[np.ndarray]:
    """Copies result buffer views into numpy arrays that own their memory.

    Results the host cannot map (a GPU's) go through host-visible staging buffers: IREE 3.13's
    DeviceArray.to_host() tries to import a numpy allocation, which Vulkan refuses
    (minImportedHostPointerAlignment 4096). Every copy is queued at once and waited for once,
    and each staging buffer is kept in ``staging`` (by size) for the next call: on CUDA a
    fresh pinned host allocation and a wait per result cost more than the copies."""
    import iree.runtime as rt

    arrays: list[Any] = [None] * len(views)
    queued: list[tuple[int, int, Any, list[int], Any]] = []
    semaphore = None
    for i, (view, dtype) in enumerate(zip(views, dtypes)):
        storage, _ = _element_types()[dtype]
        shape = list(view.shape)
        buffer = view.get_buffer()
        mappable = (buffer.memory_type() & int(rt.MemoryType.HOST_VISIBLE)) and (
            buffer.allowed_usage() & int(rt.BufferUsage.MAPPING_SCOPED))
        if view.byte_length == 0:
            arrays[i] = np.empty(shape, storage)
        elif mappable:
            arrays[i] = np.array(view.map().asarray(shape, storage), copy=True)
        else:
            size = buffer.byte_length()
            kept = staging.get(size)
            target = kept.pop() if kept else hal_device.allocator.allocate_buffer(
                memory_type=int(rt.MemoryType.HOST_LOCAL | rt.MemoryType.DEVICE_VISIBLE),
                allowed_usage=int(rt.BufferUsage.TRANSFER_TARGET | rt.BufferUsage.MAPPING_SCOPED),
                allocation_size=size)
            if semaphore is None:
                semaphore = hal_device.create_semaphore(0)
            n = len(queued)
            hal_device.queue_copy(buffer, target, wait_semaphores=rt.HalFence.create_at(semaphore, n),
                                  signal_semaphores=rt.HalFence.create_at(semaphore, n + 1))
            queued.append((i, size, target, shape, storage))
    if queued:
        rt.HalFence.create_at(semaphore, len(queued)).wait()
        for i, size, target, shape, storage in queued:
            arrays[i] = np.array(target.map().asarray(shape, storage), copy=True)
            staging.setdefault(size, []).append(target)
    return [_host_dtype(array, dtype) for array, dtype in zip(arrays, dtypes)]


def _host_dtype(array: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "bool":
        return array.astype(bool)
    if dtype == "bfloat16":
        bf16 = _bfloat16()
        if bf16 is not None:
            return array.view(bf16)
        # Without ml_dtypes, widen exactly to float32 (bfloat16 is its top half).
        return (array.astype(np.uint32) << 16).view(np.float32)
    return array


class DeviceTensor:
    """An array in a device's memory: ``Module.put(array)``, or a result of
    ``Function.on_device``.

    Passed to a function of a module on the same device it is used where it is, with no
    copy; ``shape`` and ``dtype`` (irgrad's dtype name) say what it holds. ``np.asarray(t)``
    reads it on the host: on a CPU device (``local-task``, ``local-sync``) a read-only view
    of the device buffer itself, which it keeps alive, with no copy; elsewhere (and for
    ``bool``, ``bfloat16``) a copy. ``t.numpy()`` is always a copy the caller owns."""

    __slots__ = ("_view", "_device", "dtype", "shape")

    def __init__(self, view: Any, device: Device, dtype: str) -> None:
        self._view = view
        self._device = device
        self.dtype: str = dtype
        self.shape: tuple[int, ...] = tuple(view.shape)

    @property
    def device(self) -> str:
        """The driver whose memory holds the tensor, e.g. ``local-task``."""
        return self._device.driver

    @property
    def nbytes(self) -> int:
        """The bytes the tensor takes on the device."""
        return int(self._view.byte_length)

    def __repr__(self) -> str:
        return f"<irgrad DeviceTensor {TensorType(self.shape, self.dtype)} on {self.device}>"

    def numpy(self) -> np.ndarray:
        """The tensor copied into a numpy array the caller owns."""
        return _to_numpy(self._device.hal_device, [self._view], [self.dtype], {})[0]

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        if copy or not self._view.byte_length or self.dtype not in _PLAIN_DTYPES \
                or not _host_memory(self._device):
            array = self.numpy()
        else:
            mapping = self._view.map()
            array = np.asarray(_MappedArray(mapping, mapping.asarray(self.shape, _PLAIN_DTYPES[self.dtype])))
        return array if dtype is None else array.astype(dtype, copy=False)


class _MappedArray:
    """What numpy reads a mapped device buffer through: the array's ``base``, it holds the
    mapping (which holds the buffer) for as long as the array lives, and marks the memory
    read-only (IREE maps it for reading; a result may be one of the module's constants)."""

    def __init__(self, mapping: Any, array: np.ndarray) -> None:
        self._mapping = mapping
        interface = dict(array.__array_interface__)
        interface["data"] = (interface["data"][0], True)
        self.__array_interface__ = interface


def _host_memory(device: Device) -> bool:
    """Whether the device's buffers are host memory (a CPU driver's), mapped without a copy."""
    return device.driver in ("local-sync", "local-task")


class Module:
    """An artifact loaded on a device.

    ``module.functions`` maps names to signatures; ``module["f"]`` is the
    callable ``Function``.
    """

    def __init__(self, device: Device, context: Any, vm_module: Any, metadata: dict[str, Any]) -> None:
        self._device = device
        self._context = context
        self._vm_module = vm_module
        self.metadata = metadata
        self.functions: dict[str, Signature] = signatures_from_metadata(metadata)
        flags = metadata.get("flags") or []
        self._portable_vulkan = device.driver == "vulkan" and not any(
            str(f).startswith("--iree-vulkan-target") for f in flags)
        self._callables: dict[str, Function] = {}
        self._host_memory = _host_memory(device)
        import iree.runtime as rt

        hal = device.hal_device
        self._copy_to_device = functools.partial(
            hal.allocator.allocate_buffer_copy, memory_type=rt.MemoryType.DEVICE_LOCAL,
            allowed_usage=rt.BufferUsage.DEFAULT, device=hal)

    @property
    def device(self) -> str:
        """The driver this module runs on, e.g. ``local-task``."""
        return self._device.driver

    @property
    def target(self) -> str | None:
        """The compile target recorded in the artifact."""
        return self.metadata.get("target")

    def __getitem__(self, name: str) -> Function:
        if name not in self.functions:
            raise KeyError(f"no function {name!r}; available: {', '.join(self.functions) or 'none'}")
        if name not in self._callables:
            vm_function = self._vm_module.lookup_function(name)
            self._callables[name] = Function(self, self.functions[name], vm_function)
        return self._callables[name]

    def __contains__(self, name: object) -> bool:
        return name in self.functions

    def put(self, array: Any, dtype: str | None = None) -> DeviceTensor:
        """``array`` copied once into the memory of this module's device: a ``DeviceTensor``
        that calls take without copying it again (weights, a batch used by several calls).

        ``dtype``: irgrad's name of the dtype to store (``float32``, ``bfloat16``...; default:
        the array's own). Raises TypeError for a dtype the runtime has no element type for
        or values that do not convert to ``dtype``."""
        where = "put"
        if dtype is None:
            array = np.asarray(array)
            dtype = "bfloat16" if array.dtype == _bfloat16() else array.dtype.name
        if dtype not in _element_types():
            raise TypeError(f"{where}: no device element type for dtype {dtype}; use one of "
                            f"{', '.join(_element_types())}")
        want = _numpy_dtype(dtype)
        if want is None:
            raise TypeError(f"{where}: bfloat16 arrays need numpy's bfloat16 dtype from ml_dtypes")
        try:
            array = np.asarray(array, dtype=want)
        except (OverflowError, TypeError, ValueError) as error:
            raise TypeError(f"{where}: cannot convert to {dtype}: {error}") from None
        self._check_width(where, array, dtype)
        storage, element_type = _element_types()[dtype]
        view = self._copy_to_device(buffer=np.asarray(array, order="C").view(storage), element_type=element_type)
        return DeviceTensor(view, self._device, dtype)

    def _check_width(self, where: str, array: np.ndarray, dtype: str) -> None:
        if array.itemsize < 4 and array.nbytes % 4 and self._portable_vulkan:
            raise ValueError(
                f"{where}: IREE 3.13's portable Vulkan target (32-bit storage only) reads {dtype} inputs "
                f"of {array.nbytes} bytes (not a multiple of 4) wrongly; recompile with your GPU's Vulkan "
                "target (extra flag --iree-vulkan-target=..., e.g. ampere, rdna3, valhall) or pass a wider dtype")

    def trainer(self, params, function: str | None = None):
        """A ``Trainer`` on this module's training step (``function``: its name, needed when
        the module has several), starting from ``params`` (the arrays of ``args[wrt]``)."""
        return Trainer(self, params, function)

    def __iter__(self):
        return iter(self.functions)

    def __repr__(self) -> str:
        sigs = "; ".join(map(repr, self.functions.values()))
        return f"<irgrad Module {self.metadata.get('module')} ({self.target}) on {self.device}: {sigs}>"


def _major_minor(version: str | None) -> tuple[str, ...] | None:
    match = re.match(r"(\d+)\.(\d+)", version or "")
    return match.groups() if match else None


def runtime_version() -> str:
    """The version of the IREE runtime in use."""
    from iree.runtime.version import VERSION

    return VERSION


def load(path_or_bytes: str | os.PathLike[str] | bytes, device: str | None = None) -> Module:
    """Loads an artifact (a .vmfb path or its bytes) on a device.

    Args:
        path_or_bytes: a .vmfb file (a ``.json`` sidecar next to it is read
            when the artifact does not describe itself) or its bytes.
        device: IREE driver name (``local-task``, ``local-sync``, ``vulkan``,
            ``cuda``, ``hip``); ``None`` picks the one for the artifact's target
            (``default_driver``: local-sync for CPU artifacts of little work).

    Raises:
        ArtifactError: not an IREE artifact, or built by another IREE version.
        DeviceError: the device is missing or cannot run this artifact.
    """
    sidecar = path = None
    if isinstance(path_or_bytes, (bytes, bytearray, memoryview)):
        data = bytes(path_or_bytes)
    else:
        path = Path(path_or_bytes)
        data = path.read_bytes()
        sidecar = read_sidecar(path)
    try:
        metadata = read_metadata(data, sidecar)
    except ArtifactError as error:
        if path is None:
            raise
        raise ArtifactError(f"{path}: {error}") from None
    _check_version(metadata)

    target = metadata.get("target")
    known = compiled_in_drivers()
    driver = device or default_driver(metadata, known)
    if device is None:
        log.info("loading %s on %s, the default for a %s artifact of work %s", path or "an artifact", driver,
                 target or "target-less", metadata.get("work"))
    if not isinstance(driver, str) or driver.split("://")[0] not in known:
        raise DeviceError(f"unknown device {driver!r}; drivers: {', '.join(known)}")
    if target and device is not None:
        allowed = Target.parse(target).drivers
        if device.split("://")[0] not in allowed:
            raise DeviceError(
                f"this artifact was compiled for {target} and cannot run on {device!r}; "
                f"use {' or '.join(allowed)}, or compile for another target"
            )
    dev = get_device(driver)
    if dev.driver.split("://")[0] in ("local-task", "local-sync") \
            and not (metadata.get("options") or {}).get("transient_arena"):
        keep_freed_memory()  # process-wide, once; an artifact with transient arenas does without
    module = vm_module(data, dev.instance, checked=True)  # read_metadata checked these bytes
    import iree.runtime as rt  # lazy, as everywhere in runtime/: loading IREE costs ~100 ms

    try:
        with _private_dylib_folder(b"system-elf-" in data):
            context = rt.VmContext(dev.instance, modules=[dev.hal_module, module])
    except (RuntimeError, ValueError) as error:
        message = iree_message(error)
        if "version" in message.lower():
            raise ArtifactError(
                f"this artifact was built by another IREE version ({metadata.get('iree_compiler') or 'unknown'}; "
                f"runtime is {runtime_version()}): {message}; recompile it"
            ) from None
        raise DeviceError(_incompatible(metadata, message) or f"cannot run this artifact on {driver!r}: {message}") \
            from None
    return Module(dev, context, module, metadata)


# IREE's names for the CPU architectures of its executables -> the triple's.
_IREE_ARCHES = {"arm_64": "aarch64", "arm_32": "arm", "x86_64": "x86_64", "x86_32": "i686",
                "riscv_64": "riscv64", "riscv_32": "riscv32", "wasm_32": "wasm32", "wasm_64": "wasm64"}


def _incompatible(metadata: dict[str, Any], message: str) -> str | None:
    """What to say when IREE finds no device for a CPU artifact's executables (its message is
    the whole target description): built for another architecture, or for CPU features this
    machine lacks. None when neither explains it."""
    if "INCOMPATIBLE" not in message:
        return None
    found = re.search(r'"(?:embedded|system)-(?:elf|dylib)-(\w+)"', message)
    options = metadata.get("options") or {}
    triple = options.get("triple")
    arch = triple.split("-")[0] if triple else _IREE_ARCHES.get(found.group(1)) if found else None
    if arch is None:
        return None
    here = host_arch()
    built = f"built for {arch}" + (f" (IREE's {found.group(1)} executables)" if found else "")
    if arch != here:
        return (f"this artifact was {built} and this machine is {here}: run it on an {arch} device "
                f"(ig.load there, or iree-run-module --device=local-task), or here under qemu-{arch} with "
                f"IREE's {arch} runtime (README: Training on a device), or recompile it for {here} "
                "(without --triple)")
    cpu = options.get("cpu")
    return (f"this artifact was {built} with CPU features this machine lacks"
            + (f" (cpu {cpu})" if cpu else "") + ": recompile it here, or with --cpu generic for any " + arch)


log = logging.getLogger(__name__)

# Work (``compiler.estimate_work``: elements produced, plus multiply-adds / 32) per kernel
# (``compiler.count_kernels``, at least 1, at most ``SYNC_KERNELS``) up to which a CPU artifact
# runs on local-sync: on the calling thread, without local-task's worker wake-ups (~20-40 µs a
# dispatch on this 2-core VM). Measured here, local-sync against local-task: a 6-op elementwise
# chain (one kernel) of 16k elements (work 1.8e5) 20 µs against 59, of 64k (7.2e5) 61 against 81,
# of 256k (2.9e6) 233 against 191; tanh(a @ a) at 128² (9.8e4) 30 against 63, at 256² (6.6e5)
# 190 against 158; the 200×200 Hessian of bench_calls.py (work 1.2e6, 3 kernels) 41 against 107.
# Capped, so that a large model never loses local-task's threads to a long list of kernels.
SYNC_WORK = 1 << 19
SYNC_KERNELS = 8


def default_driver(metadata: dict[str, Any], known: Sequence[str] | None = None) -> str:
    """The driver ``load`` picks when none is given: the target's (``Target.default_driver``),
    except for llvm-cpu artifacts of little work per kernel (``SYNC_WORK``), which run on
    local-sync."""
    target = metadata.get("target")
    if not target:
        return "local-task"
    parsed = Target.parse(target)
    work = metadata.get("work")
    kernels = metadata.get("kernels")
    per_kernel = min(max(kernels if isinstance(kernels, int) else 1, 1), SYNC_KERNELS)
    if parsed is Target.LLVM_CPU and isinstance(work, (int, float)) and work <= SYNC_WORK * per_kernel \
            and "local-sync" in (known if known is not None else compiled_in_drivers()):
        return "local-sync"
    return parsed.default_driver


_TMPDIR_LOCK = threading.Lock()
_DYLIB_FOLDER: list[str] = []


@contextlib.contextmanager
def _private_dylib_folder(system_linked: bool) -> Iterator[None]:
    """Where IREE writes a system-linked executable (a shared library) to ``dlopen`` it:
    a folder of this process's own, emptied after every load and removed at exit. IREE's
    own file (``$TMPDIR/iree_dylib_*``) is otherwise left behind, empty, at every load; a
    device app that reloads its module daily would fill ``/tmp``. IREE reads ``TMPDIR``
    when it first needs it and keeps that folder, so it is always the same one here, set
    for the duration of the load (under a lock: the environment is process-wide)."""
    if not system_linked:
        yield
        return
    with _TMPDIR_LOCK:
        if not _DYLIB_FOLDER:
            _DYLIB_FOLDER.append(tempfile.mkdtemp(prefix="irgrad-dylib-"))
            atexit.register(shutil.rmtree, _DYLIB_FOLDER[0], True)
        folder = _DYLIB_FOLDER[0]
        os.makedirs(folder, exist_ok=True)
        before = os.environ.get("TMPDIR")
        os.environ["TMPDIR"] = folder
        try:
            yield
        finally:
            if before is None:
                del os.environ["TMPDIR"]
            else:
                os.environ["TMPDIR"] = before
            for name in os.listdir(folder):  # the libraries are mapped: their files can go
                with contextlib.suppress(OSError):
                    os.unlink(os.path.join(folder, name))


def _check_version(metadata: dict[str, Any]) -> None:
    built_by = metadata.get("iree_compiler")
    if built_by and _major_minor(built_by) != _major_minor(runtime_version()):
        raise ArtifactError(
            f"this artifact was built by IREE compiler {built_by}, but the runtime is IREE "
            f"{runtime_version()}; IREE artifacts only load in the release that built them: recompile it"
        )
