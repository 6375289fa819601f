"""Which transformers the command's own interpreter has, read from its installed metadata without running it.

It decides how a script's ``from_pretrained`` loads the weights: transformers v5 loads the checkpoint's
dtype by default (``dtype="auto"``); v4 loaded fp32 unless told (``torch_dtype``), so the same ``--bf16``
Trainer command holds fp32 weights under autocast there, twice the bytes of model state
(TRAINING-FACTS.md, term 1). The interpreter is the command's: ``python`` (as found on the command's PATH),
or the one a launcher's ``#!`` line names (torchrun, accelerate, deepspeed are console scripts). Its
``site-packages`` is looked up beside it (a venv's ``lib/pythonX.Y/site-packages``) for a
``transformers-X.Y.Z.dist-info`` directory: a directory listing, never an import.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping, Sequence

__all__ = ["transformers_major", "installed_version", "interpreter_of", "site_dirs"]


def interpreter_of(argv: Sequence[str], environ: Mapping[str, str]) -> str | None:
    if not argv:
        return None
    found = shutil.which(argv[0], path=environ.get("PATH", os.defpath))
    if found is None:
        return None
    if os.path.basename(argv[0]).startswith("python"):
        return found
    try:
        with open(found, "rb") as f:
            first = f.readline(512)
    except OSError:
        return None
    if not first.startswith(b"#!"):
        return None
    words = first[2:].decode("utf-8", "replace").split()
    if not words:
        return None
    if os.path.basename(words[0]) == "env" and len(words) > 1:  # #!/usr/bin/env python3
        return shutil.which(words[1], path=environ.get("PATH", os.defpath))
    return words[0]


def site_dirs(python: str) -> list[str]:
    """The site-packages beside ``python`` (bin/python -> lib/python*/site-packages), not resolving a venv's
    symlink to the base interpreter (the venv's own packages are the ones it imports)."""
    root = os.path.dirname(os.path.dirname(python))
    out = []
    for lib in ("lib", "lib64"):
        base = os.path.join(root, lib)
        try:
            names = sorted(os.listdir(base))
        except OSError:
            continue
        out += [os.path.join(base, n, "site-packages") for n in names if n.startswith("python")]
    return out


def installed_version(argv: Sequence[str], environ: Mapping[str, str], package: str) -> tuple[int, ...] | None:
    """``package``'s version in the command's interpreter as numbers (``trl-1.16.0.dist-info`` -> (1, 16, 0),
    up to the first part that is not one), or None when it cannot be told."""
    python = interpreter_of(argv, environ)
    if python is None:
        return None
    prefix = package + "-"
    for site in site_dirs(python):
        try:
            names = os.listdir(site)
        except OSError:
            continue
        for name in names:
            if name.startswith(prefix) and name.endswith(".dist-info"):
                parts = []
                for part in name[len(prefix):-len(".dist-info")].split("."):
                    if not part.isdigit():
                        break
                    parts.append(int(part))
                if parts:
                    return tuple(parts)
    return None


def transformers_major(argv: Sequence[str], environ: Mapping[str, str]) -> int | None:
    """transformers' major version in the command's interpreter, or None when it cannot be told."""
    found = installed_version(argv, environ, "transformers")
    return found[0] if found else None
