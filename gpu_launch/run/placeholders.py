"""Placeholders in the command: ``{n}`` and ``{gpus}`` become what was chosen.

``gpulaunch --fit 60GiB -- vllm serve M --tensor-parallel-size {n}`` runs vLLM with the number of
GPUs ``--fit`` chose. The rules (docs/choosing-gpus.md, "Placeholders: {n} and {gpus}"):

* Only an argument that is exactly ``{n}`` or ``{gpus}`` is replaced: ``{n}`` by the number of
  devices chosen, ``{gpus}`` by the logical list the command sees, ``0,1,…,n-1`` (CUDA numbers
  them from 0 inside CUDA_VISIBLE_DEVICES; the physical numbers are in GPULAUNCH_GPUS).
* Nothing inside a longer argument is touched: ``--tp={n}``, ``'{n}'.format(3)`` and
  ``python -c 'print({n})'`` pass through unchanged, so code and format strings in argv are safe.
  Write ``--tp {n}`` (two arguments) instead; :func:`near_misses` finds ``OPTION={n}`` arguments
  so that the launcher can warn about them.
* ``{{n}}`` is the escape: it becomes the literal ``{n}`` (and ``{{{n}}}`` becomes ``{{n}}``).
* The program name (``argv[0]``) is never replaced.

With ``--fit MODEL`` the plan adds ``{tp}`` (tensor-parallel size), ``{pp}`` (pipeline stages), ``{gpu_layers}`` (llama.cpp
``-ngl``: the output layer counts as one), ``{tensor_split}`` (layers per GPU, ``-ts``), ``{ctx}``
(the context sized for), ``{gpu_mem_util}`` (vLLM's utilisation) and ``{max_memory}`` (Accelerate's
map as JSON, keyed by the child's device numbers), under the same rules. Without a model they stay
as written, and the launch refuses to run a command that uses them (:data:`MODEL_NAMES`).

With ``--nodes`` each node adds ``{nnodes}``, ``{node_rank}``, ``{head_addr}``, ``{head_port}`` and ``{pp}``
(the nodes, one pipeline stage each) for commands whose multi-node flags gpulaunch does not know
(:data:`NODE_NAMES`; docs/several-nodes.md); without ``--nodes`` a command that uses them is refused
(``{pp}`` then needs ``--fit MODEL``, as the other plan placeholders).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

__all__ = ["NAMES", "MODEL_NAMES", "NODE_NAMES", "substitute", "near_misses", "model_names_used", "node_names_used"]

NAMES = ("n", "gpus")
MODEL_NAMES = ("tp", "pp", "gpu_layers", "tensor_split", "ctx", "gpu_mem_util", "max_memory")
#: A node's own placeholders; ``{pp}`` is also the plan's (a plan over nodes) and a node's (one stage a node).
NODE_NAMES = ("nnodes", "node_rank", "head_addr", "head_port")
_NODE_VALUES = (*NODE_NAMES, "pp")


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


def substitute(argv: Sequence[str], count: int, model: Mapping[str, str] | None = None,
               nodes: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """``argv`` with its whole-argument placeholders replaced for ``count`` chosen devices, the plan's
    values (``model``: ``{"tp": "4", ...}``) when a model sized the choice, and a node's place in a
    ``--nodes`` run (``nodes``: ``{"node_rank": "1", ...}``). One pass: ``{{n}}`` stays ``{n}``."""
    if not argv:
        return tuple(argv)
    values = {**_values(count), **{k: v for k, v in (model or {}).items() if k in MODEL_NAMES},
              **{k: v for k, v in (nodes or {}).items() if k in _NODE_VALUES}}
    out = [argv[0]]
    for i, arg in enumerate(argv[1:], start=1):
        if model and _is_overrides(argv, i):
            out.append(_overrides(arg, values))
        else:
            out.append(_replace(arg, values))
    return tuple(out)


def _is_overrides(argv: Sequence[str], i: int) -> bool:
    """MLC-LLM's ``--overrides "k=v;k=v"`` value: one argument that holds several settings."""
    return argv[i].startswith("--overrides=") or argv[i - 1] == "--overrides" and i > 1


def _overrides(arg: str, values: dict[str, str]) -> str:
    """``tensor_parallel_shards={tp};context_window_size={ctx}``: each whole ``KEY={name}`` value is
    replaced, as a whole argument would be (MLC-LLM takes its runtime settings so)."""
    head, eq, rest = arg.partition("=") if arg.startswith("--overrides=") else ("", "", arg)
    parts = []
    for part in rest.split(";"):
        key, sep, value = part.partition("=")
        parts.append(key + sep + (_replace(value, values) if sep else value) if sep else part)
    return head + eq + ";".join(parts)


def near_misses(argv: Sequence[str]) -> tuple[str, ...]:
    """Arguments like ``--tp={n}`` that look meant to be replaced but are not (not whole words)."""
    misses = []
    for arg in argv[1:]:
        option, eq, value = arg.partition("=")
        if eq and option.startswith("-") and value[1:-1] in (*NAMES, *MODEL_NAMES, *NODE_NAMES) \
                and value[:1] + value[-1:] == "{}":
            misses.append(arg)
    return tuple(misses)


def model_names_used(argv: Sequence[str]) -> tuple[str, ...]:
    """The plan placeholders (``{tp}``...) ``argv`` uses as whole arguments: they need ``--fit MODEL``."""
    return tuple(arg[1:-1] for arg in argv[1:] if arg[:1] == "{" and arg[-1:] == "}" and arg[1:-1] in MODEL_NAMES)


def node_names_used(argv: Sequence[str]) -> tuple[str, ...]:
    """The node placeholders (``{node_rank}``...) ``argv`` uses as whole arguments: they need ``--nodes``."""
    return tuple(arg[1:-1] for arg in argv[1:] if arg[:1] == "{" and arg[-1:] == "}" and arg[1:-1] in NODE_NAMES)
