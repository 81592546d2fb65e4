"""Reading .vmfb files: the metadata irgrad embeds (or IREE's own declaration for a
.vmfb built elsewhere), the sidecar, integrity checks, executable formats.

irgrad writes its metadata into the artifact itself: every public function
carries an ``iree.reflection`` dictionary with ``irgrad.signature`` (its input
and output types) and ``irgrad.artifact`` (target, flags, compiler version,
producer), which the runtime exposes as ``VmFunction.reflection``. A .vmfb
built elsewhere still describes itself through IREE's own
``iree.abi.declaration``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import struct
import tempfile
from pathlib import Path
from typing import Any

from .errors import ArtifactError, iree_message, not_an_artifact
from .signature import Signature, parse_declaration

__all__ = ["executable_formats", "read_metadata", "read_sidecar", "seal", "signatures_from_metadata", "vm_module"]

SCHEMA = 1
SIGNATURE_KEY = "irgrad.signature"
ARTIFACT_KEY = "irgrad.artifact"
TRAIN_KEY = "irgrad.train"  # a training step's state layout (passes.train), on its function
UNUSED_KEY = "irgrad.unused"  # the arguments a function never reads (a call passes a placeholder)
PEAK_KEY = "irgrad.estimated_peak"  # passes.memory's estimate of a function's peak (JSON), where irgrad made one
SIDECAR_SUFFIX = ".json"

# Executable format name -> compile target, for artifacts without metadata.
_FORMAT_TARGETS = (
    (b"vulkan-spirv-fb", "vulkan-spirv"),
    (b"cuda-nvptx-fb", "cuda"),
    (b"rocm-hsaco-fb", "rocm"),
    (b"vmvx-bytecode-fb", "vmvx"),
    (b"embedded-elf-", "llvm-cpu"),
    (b"system-elf-", "llvm-cpu"),
)


def signatures_from_metadata(metadata: dict[str, Any]) -> dict[str, Signature]:
    """The ``functions`` entry of artifact metadata as Signature objects."""
    return {name: Signature.from_json(name, data) for name, data in metadata["functions"].items()}


_INSTANCE: Any = None


def vm_module(data: bytes, instance: Any = None, *, checked: bool = False) -> Any:
    """Parses .vmfb bytes into an IREE VmModule, ArtifactError when they are not one.
    ``checked``: the caller has already passed these very bytes through the integrity
    checks (``read_metadata`` does), so the digest is not computed twice."""
    import iree.runtime as rt

    global _INSTANCE
    if instance is None:
        if _INSTANCE is None:
            _INSTANCE = rt.VmInstance()
        instance = _INSTANCE
    if not checked:
        _check_archive(data)
    try:
        return rt.VmModule.copy_buffer(instance, data)
    except (ValueError, RuntimeError) as error:
        raise not_an_artifact(data, iree_message(error)) from None


_DIGEST = b"irgrad-sha256:"
_END_OF_DIRECTORY = b"PK\x05\x06"  # the zip record that ends the archive; its comment follows it


def _comment_at(data: bytes) -> int:
    """Where the zip comment's 2-byte length field is (-1 when there is no end record)."""
    end = data.rfind(_END_OF_DIRECTORY, max(0, len(data) - 22 - 0xFFFF))
    return end + 20 if end >= 0 and end + 22 <= len(data) else -1


def seal(vmfb: bytes) -> bytes:
    """The artifact with a SHA-256 of its bytes as its zip comment: ``ig.load``, ``irgrad
    run`` and ``irgrad inspect`` refuse a file whose bytes no longer match (damage the zip's
    own CRCs miss: headers, alignment padding). IREE ignores the comment, so
    ``iree-run-module`` runs a sealed artifact as before. Other layouts are returned as they are."""
    at = _comment_at(vmfb)
    if not vmfb.startswith(b"PK\x03\x04") or at < 0 or at + 2 != len(vmfb):
        return vmfb
    comment = _DIGEST + hashlib.sha256(vmfb[:at]).hexdigest().encode()
    return vmfb[:at] + struct.pack("<H", len(comment)) + comment


def _check_digest(data: bytes) -> None:
    """ArtifactError when a sealed artifact's bytes do not match its digest, or when its seal
    itself is damaged. An archive whose comment is empty is not sealed (built elsewhere)."""
    at = _comment_at(data)
    if at < 0:
        return
    comment = bytes(data[at + 2:])
    declared = struct.unpack("<H", data[at:at + 2])[0]
    if not comment and declared == 0:
        return  # not sealed by irgrad: the archive checks still apply
    if not bytes(data[:4]) == b"PK\x03\x04" and not comment.startswith(_DIGEST[:6]):
        return  # neither an archive nor sealed: let IREE judge
    if declared != len(comment) or not comment.startswith(_DIGEST) or len(comment) != len(_DIGEST) + 64:
        raise ArtifactError("not a valid IREE artifact (.vmfb): damaged: its seal (the archive comment) is broken")
    if comment[len(_DIGEST):] != hashlib.sha256(data[:at]).hexdigest().encode():
        raise ArtifactError("not a valid IREE artifact (.vmfb): damaged: digest mismatch")


def _check_archive(data: bytes) -> None:
    """Catches truncation and corruption that IREE's loader would miss.

    A .vmfb is a zip archive (the module flatbuffer, then one entry per
    executable); IREE reads the flatbuffer only, so a file cut inside the
    executables would load and fail later. The zip directory at the end and
    the CRC of every entry tell; an artifact irgrad compiled also carries a
    digest of all its bytes (``seal``).
    """
    import io
    import zipfile

    _check_digest(data)  # first: a seal covers every byte, the archive's header included
    if not bytes(data[:4]) == b"PK\x03\x04":
        return  # not the archive layout: let IREE judge
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            bad = archive.testzip()
    except (zipfile.BadZipFile, EOFError, ValueError) as error:
        raise ArtifactError(f"not a valid IREE artifact (.vmfb): truncated or damaged ({error})") from None
    if bad is not None:
        raise ArtifactError(f"not a valid IREE artifact (.vmfb): checksum mismatch in {bad!r}")


def exported_functions(module: Any) -> list[Any]:
    """The VmFunctions a user can call (not IREE's ``__init`` and friends)."""
    names = [n for n in module.function_names if not n.startswith("__")]
    return [module.lookup_function(n) for n in names]


def guess_target(data: bytes) -> str | None:
    """The compile target implied by the executable formats inside ``data``."""
    for needle, target in _FORMAT_TARGETS:
        if needle in data:
            return target
    return None


def read_metadata(data: bytes, sidecar: dict[str, Any] | None = None, *, module: Any = None) -> dict[str, Any]:
    """Metadata of .vmfb bytes, from the artifact itself.

    Signatures come from irgrad's reflection entries, or IREE's declaration for
    artifacts built elsewhere; target, flags and versions from irgrad's entry,
    else from ``sidecar`` (the saved ``.json``), else what can be inferred.
    Raises ArtifactError for bytes that are not an IREE module.
    """
    module = module if module is not None else vm_module(data)
    functions: dict[str, Any] = {}
    training: dict[str, Any] = {}
    unused: dict[str, list[int]] = {}
    peaks: dict[str, Any] = {}
    embedded: dict[str, Any] | None = None
    for fn in exported_functions(module):
        reflection = fn.reflection
        if SIGNATURE_KEY in reflection:
            functions[fn.name] = json.loads(reflection[SIGNATURE_KEY])
        else:
            declaration = reflection.get("iree.abi.declaration", "")
            try:
                functions[fn.name] = parse_declaration(fn.name, declaration).to_json()
            except ValueError as error:
                raise ArtifactError(f"cannot read the signature of {fn.name!r}: {error}") from None
        if embedded is None and ARTIFACT_KEY in reflection:
            embedded = json.loads(reflection[ARTIFACT_KEY])
        if TRAIN_KEY in reflection:
            training[fn.name] = json.loads(reflection[TRAIN_KEY])
        if UNUSED_KEY in reflection:
            unused[fn.name] = json.loads(reflection[UNUSED_KEY])
        if PEAK_KEY in reflection:
            peaks[fn.name] = json.loads(reflection[PEAK_KEY])
    info = embedded or sidecar or {}
    return {
        "schema": info.get("schema", SCHEMA),
        "module": module.name,
        "target": info.get("target") or guess_target(bytes(data)),
        "flags": info.get("flags"),
        "options": info.get("options"),
        "iree_compiler": info.get("iree_compiler"),
        "producer": info.get("producer"),
        "work": info.get("work"),
        "kernels": info.get("kernels"),
        "functions": functions,
        "training": training,
        "unused": unused,
        "estimated_peak": peaks,
    }


def read_sidecar(path: Path) -> dict[str, Any] | None:
    """The ``path + '.json'`` sidecar next to a saved .vmfb, if there is one."""
    sidecar = Path(str(path) + SIDECAR_SUFFIX)
    if not sidecar.is_file():
        return None
    try:
        data = json.loads(sidecar.read_text())
    except (OSError, ValueError) as error:
        raise ArtifactError(f"{sidecar} is not valid artifact metadata: {iree_message(error)}") from None
    if not isinstance(data, dict):
        raise ArtifactError(f"{sidecar} is not valid artifact metadata: expected a JSON object")
    return data


def executable_formats(vmfb: bytes | str | os.PathLike[str]) -> list[str]:
    """Executable formats inside an artifact, e.g. ``["embedded-elf-x86_64"]``.

    Reads ``iree-dump-module``'s listing: ``cuda-nvptx-fb``, ``vulkan-spirv-fb``,
    ``rocm-hsaco-fb``, ``vmvx-bytecode-fb``, ``embedded-elf-arm_64``, ...
    """
    import subprocess

    if isinstance(vmfb, (bytes, bytearray, memoryview)):
        with tempfile.NamedTemporaryFile(suffix=".vmfb") as f:
            f.write(vmfb)
            f.flush()
            return executable_formats(f.name)
    result = subprocess.run([runtime_tool("iree-dump-module"), os.fspath(vmfb)], capture_output=True, text=True)
    if result.returncode != 0:
        reason = (result.stderr.strip().splitlines() or ["iree-dump-module failed"])[-1]
        raise ArtifactError(f"not a valid IREE artifact (.vmfb): {reason}")
    found: list[str] = []
    for listed in re.findall(r"available formats: \[([^\]]*)\]", result.stdout):
        found.extend(f.strip() for f in listed.split(","))
    # The format string the module queries the device with sits right after the key.
    after_key = r"`hal\.executable\.format`\n\s*\.rodata\[\s*\d+\] embedded\s+\d+ bytes `([^`]+)`"
    found.extend(re.findall(after_key, result.stdout))
    return list(dict.fromkeys(f for f in found if f))


def runtime_tool(name: str) -> str:
    """The path of one of IREE's runtime tools (``iree-dump-module``, ``iree-benchmark-module``):
    the installed runtime's own copy, else the one on PATH."""
    import shutil

    try:
        import iree._runtime_libs as libs

        tool = Path(libs.__file__).parent / name
        if tool.is_file():
            return str(tool)
    except ImportError:
        pass
    tool = shutil.which(name)
    if tool is None:
        raise FileNotFoundError(f"{name} not found; install iree-base-runtime")
    return tool
