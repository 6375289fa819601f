"""Placeholders in the command: ``{n}`` and ``{gpus}`` become what was chosen.

``gpulaunch --fit 60GiB -- vllm serve M --tensor-parallel-size {n}`` runs vLLM with the number of
GPUs ``--fit`` chose. The rules (README, "How --auto ranks"):

* Only an argument that is exactly ``{n}`` or ``{gpus}`` is replaced: ``{n}`` by the number of
  devices chosen, ``{gpus}`` by the logical list the command sees, ``0,1,…,n-1`` (CUDA numbers
  them from 0 inside CUDA_VISIBLE_DEVICES; the physical numbers are in GPULAUNCH_GPUS).
* Nothing inside a longer argument is touched: ``--tp={n}``, ``'{n}'.format(3)`` and
  ``python -c 'print({n})'`` pass through unchanged, so code and format strings in argv are safe.
  Write ``--tp {n}`` (two arguments) instead; :func:`near_misses` finds ``OPTION={n}`` arguments
  so that the launcher can warn about them.
* ``{{n}}`` is the escape: it becomes the literal ``{n}`` (and ``{{{n}}}`` becomes ``{{n}}``).
* The program name (``argv[0]``) is never replaced.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["NAMES", "substitute", "near_misses"]

NAMES = ("n", "gpus")


def _values(count: int) -> dict[str, str]:
    return {"n": str(count), "gpus": ",".join(str(i) for i in range(count))}


def _replace(arg: str, values: dict[str, str]) -> str:
    depth = len(arg) - len(arg.lstrip("{"))
    if depth == 0 or len(arg) - len(arg.rstrip("}")) != depth:
        return arg
    name = arg[depth:len(arg) - depth]
    if name not in values:
        return arg
    if depth == 1:
        return values[name]
    return "{" * (depth - 1) + name + "}" * (depth - 1)  # {{n}} → {n}: one level of escape off


def substitute(argv: Sequence[str], count: int) -> tuple[str, ...]:
    """``argv`` with its whole-argument placeholders replaced for ``count`` chosen devices."""
    if not argv:
        return tuple(argv)
    values = _values(count)
    return (argv[0], *(_replace(arg, values) for arg in argv[1:]))


def near_misses(argv: Sequence[str]) -> tuple[str, ...]:
    """Arguments like ``--tp={n}`` that look meant to be replaced but are not (not whole words)."""
    misses = []
    for arg in argv[1:]:
        option, eq, value = arg.partition("=")
        if eq and option.startswith("-") and value in ("{n}", "{gpus}"):
            misses.append(arg)
    return tuple(misses)
