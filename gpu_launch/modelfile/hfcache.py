"""Hugging Face ids resolved in the local cache only: no network, ever.

The cache is ``HF_HUB_CACHE``, else ``HF_HOME/hub``, else ``~/.cache/huggingface/hub`` (as
``huggingface_hub`` resolves it, ``XDG_CACHE_HOME`` included). A model ``org/name`` lives in ``models--org--name/``: its
``refs/<branch>`` files hold a commit hash, ``snapshots/<hash>/`` holds the files (symlinks into
``blobs/``). ``org/name@rev`` names a branch, a tag or a commit (a full hash or a unique prefix).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

from gpu_launch.errors import ModelFileError
from gpu_launch.modelfile.bounded import look, read_small, user_path
from gpu_launch.base.text import printable

__all__ = ["cache_dir", "resolve", "parse_id"]

_PART = r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}"
_ID_RE = re.compile(rf"^(?P<org>{_PART})/(?P<name>{_PART})(?:@(?P<rev>[A-Za-z0-9._/-]{{1,200}}))?$")
_HASH_RE = re.compile(r"^[0-9a-f]{4,64}$")


def cache_dir(environ: Mapping[str, str]) -> Path:
    """Where huggingface_hub keeps models: HF_HUB_CACHE (or its old name HUGGINGFACE_HUB_CACHE), else
    HF_HOME/hub, else $XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub."""
    for name in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if environ.get(name):
            return Path(user_path(environ[name], name))
    if environ.get("HF_HOME"):
        return Path(user_path(environ["HF_HOME"], "HF_HOME")) / "hub"
    home = environ.get("HOME") or os.path.expanduser("~")
    xdg = environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path(home) / ".cache") / "huggingface" / "hub"


def parse_id(source: str) -> tuple[str, str, str]:
    """(org, name, revision) of ``org/name[@rev]``; ModelFileError when it is not such an id."""
    m = _ID_RE.match(source)
    if not m or ".." in source:
        raise ModelFileError(f"model {printable(source)}: no such file or directory, and not a Hugging Face id",
                             hint="name a .gguf or .safetensors file, a model directory, or a cached id like "
                                  "meta-llama/Llama-3.1-8B")
    return m["org"], m["name"], m["rev"] or "main"


def resolve(source: str, environ: Mapping[str, str]) -> Path:
    """The snapshot folder of the cached model ``source``; ModelFileError with the fix when absent."""
    org, name, rev = parse_id(source)
    cache = cache_dir(environ)
    repo = cache / f"models--{org}--{name}"
    model_id = f"{org}/{name}"
    download = f"download it first with `huggingface-cli download {model_id}" + \
               (f" --revision {rev}`" if rev != "main" else "`")
    if look(repo, f"Hugging Face cache {printable(str(repo))}") != "dir":
        raise ModelFileError(f"model {printable(source)}: not in the local Hugging Face cache "
                             f"(looked in {printable(str(cache))})",
                             hint=f"{download}, or set HF_HUB_CACHE / HF_HOME to where it is")
    snapshots = repo / "snapshots"
    commit = _ref(repo, rev) or (rev if _HASH_RE.match(rev) else None)
    if commit and (snapshots / commit).is_dir():
        return snapshots / commit
    if commit and _HASH_RE.match(commit) and snapshots.is_dir():
        matches = [p for p in snapshots.iterdir() if p.name.startswith(commit) and p.is_dir()]
        if len(matches) == 1:
            return matches[0]
    raise ModelFileError(f"model {printable(source)}: revision {printable(rev)} is not in the local Hugging Face "
                         f"cache ({printable(str(repo))})", hint=download)


def _ref(repo: Path, rev: str) -> str | None:
    """The commit ``refs/<rev>`` holds (a branch or tag), or None."""
    if ".." in rev.split("/"):
        return None
    path = repo / "refs" / rev
    if not path.is_file():  # absent, or a FIFO/device that a plain open could hang on
        return None
    raw = read_small(str(path), f"Hugging Face cache ref {printable(str(path))}", 4096)
    text = raw.decode("ascii", "replace").strip()
    return text if _HASH_RE.match(text) else None
