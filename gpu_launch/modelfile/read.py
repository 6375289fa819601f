"""The one entry point the rest of gpulaunch calls: :func:`read_model`.

``source`` is a file (a GGUF file, any part of a split GGUF set, a ``.safetensors`` file), a
directory (config.json + safetensors, an MLC-LLM compiled folder, or a folder holding one GGUF
model), or a Hugging Face id (``org/name`` or ``org/name@revision``) already in the local cache.
Nothing is downloaded, ever; only headers are read.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

from gpu_launch.errors import ModelFileError
from gpu_launch.modelfile.bounded import joined, look, user_path
from gpu_launch.modelfile.facts import ModelFacts, checked
from gpu_launch.base.text import printable
from gpu_launch.base.units import shown

__all__ = ["read_model"]

_LATER_PART = re.compile(r"-(\d{5})-of-\d{5}\.gguf$", re.IGNORECASE)


def read_model(source: str | os.PathLike[str], *, environ: Mapping[str, str] | None = None) -> ModelFacts:
    """The facts of the model ``source`` names, read from its headers only.

    ``environ`` (default ``os.environ``) is where the Hugging Face cache location is looked up.
    Raises :class:`~gpu_launch.errors.ModelFileError` (exit 7) with one line and a hint when the
    model cannot be found or read.
    """
    source = _text(source)
    env = os.environ if environ is None else environ
    return checked(_facts(source, env))


def _text(source: object) -> str:
    """The model's name as text: a str, bytes (decoded as the file system does) or an os.PathLike."""
    try:
        name = os.fspath(source)  # type: ignore[call-overload]
    except TypeError:
        raise ModelFileError(f"model: {shown(source)} is not a path (a {type(source).__name__})",
                             hint="name a model file, folder or cached id as text or a Path") from None
    name = os.fsdecode(name) if isinstance(name, bytes) else name
    if not name or "\0" in name:
        raise ModelFileError("model: the name is empty or holds a NUL byte", hint="name a model file, folder or id")
    return name


def _facts(source: str, env: Mapping[str, str]) -> ModelFacts:
    label = f"model {printable(source)}"
    path = user_path(source, label)
    kind = look(path, label)
    if kind == "dir":
        return _read_dir(source, path)
    if kind or _looks_like_path(source):
        return _read_file(source, path)
    from gpu_launch.modelfile import hfcache

    folder = hfcache.resolve(source, env)
    return _read_dir(source, str(folder))


def _looks_like_path(source: str) -> bool:
    """A name that can only be a path: a Hugging Face id is ``org/name`` with no extension of a model file."""
    base = source.split("@", 1)[0]
    return (source.startswith(("/", ".", "~")) or base.count("/") != 1
            or base.lower().endswith((".gguf", ".safetensors", ".json")))


def _read_file(source: str, path: str) -> ModelFacts:
    lower = path.lower()
    if lower.endswith(".gguf"):
        from gpu_launch.modelfile.gguf_facts import read_gguf

        return read_gguf(source, path)
    if lower.endswith(".safetensors"):
        from gpu_launch.modelfile.safetensors import read_safetensors_file

        return read_safetensors_file(source, path)
    if not os.path.lexists(path):
        raise ModelFileError(f"model {printable(source)}: no such file or directory",
                             hint="name a .gguf or .safetensors file, a model directory, or a cached "
                                  "Hugging Face id (org/name)")
    return _sniff(source, path)


def _sniff(source: str, path: str) -> ModelFacts:
    """A file with no telling extension: read its first bytes to tell GGUF from safetensors."""
    from gpu_launch.modelfile.bounded import open_cursor

    label = f"model file {printable(path)}"
    with open_cursor(path, label) as cur:
        head = cur.take(min(cur.size, 9), "the first bytes")
    if head[:4] == b"GGUF":
        from gpu_launch.modelfile.gguf_facts import read_gguf

        return read_gguf(source, path)
    if len(head) == 9 and head[8:9] == b"{":
        from gpu_launch.modelfile.safetensors import read_safetensors_file

        return read_safetensors_file(source, path)
    raise ModelFileError(f"{label}: neither a GGUF nor a safetensors file",
                         hint="name a .gguf or .safetensors file, or a model directory")


def _read_dir(source: str, folder: str) -> ModelFacts:
    label = f"model directory {printable(folder)}"
    try:
        names = sorted(os.listdir(folder))
    except OSError as exc:
        raise ModelFileError(f"{label}: cannot list it ({exc.strerror})") from None
    if "mlc-chat-config.json" in names:
        from gpu_launch.modelfile.mlc import read_mlc

        return read_mlc(source, folder)
    if "config.json" in names and any(n.endswith(".safetensors") for n in names):
        from gpu_launch.modelfile.safetensors import read_safetensors_dir

        return read_safetensors_dir(source, folder)
    ggufs = [n for n in names if n.lower().endswith(".gguf") and "mmproj" not in n.lower()]
    firsts = {n for n in ggufs if not _is_later_split(n)}
    if len(firsts) == 1:
        from gpu_launch.modelfile.gguf_facts import read_gguf

        return read_gguf(source, joined(folder, firsts.pop()))
    if len(firsts) > 1:
        raise ModelFileError(f"{label}: holds {len(firsts)} GGUF models ({', '.join(printable(n) for n in sorted(firsts)[:3])}...)",
                             hint="name the .gguf file itself")
    if any(n.endswith(".safetensors") for n in names):
        raise ModelFileError(f"{label}: .safetensors weights but no config.json",
                             hint="the layer and head counts come from it: download the model's config.json too")
    if "config.json" in names:
        raise ModelFileError(f"{label}: config.json but no .safetensors weights",
                             hint="download the weights too (only safetensors are read, not .bin/.pt)")
    raise ModelFileError(f"{label}: no model in it (no .gguf file, no config.json with .safetensors, "
                         "no mlc-chat-config.json)", hint="name the model's file or its own directory")


def _is_later_split(name: str) -> bool:
    m = _LATER_PART.search(name)
    return m is not None and int(m.group(1)) != 1
