"""What a command puts on the host instead of the GPUs, and the MoE split gpulaunch can choose.

llama.cpp (common/arg.cpp, common/common.h and src/llama-model-loader.cpp of 0c1e570):

* ``-ot/--override-tensor PATTERN=BUFT,...`` (repeatable; each appends its list): for every tensor
  the loader tries the patterns in the order given and the first whose regular expression is found
  in the tensor's name (``std::regex_search``) decides its buffer; ``CPU`` is the host.
* ``--cpu-moe`` adds ``\\.ffn_(up|down|gate|gate_up)_(ch|)exps=CPU`` (``LLM_FFN_EXPS_REGEX``):
  every layer's experts on the host; ``--n-cpu-moe N`` adds ``blk\\.i`` + that for i < N
  (``llm_add_n_cpu_ffn_overrides``): the experts of the first N layers.
* ``-nkvo/--no-kv-offload``: the KV cache stays on the host (``offload_kqv`` false).

vLLM ``--cpu-offload-gb N`` (vllm/config/cache.py, ``CacheConfig.cpu_offload_gb``): N GiB of each
GPU's weights are kept in host memory and streamed in.

``{n_cpu_moe}`` (:func:`fewest_moe`): the smallest N for ``--n-cpu-moe`` with which every layer's
attention and shared tensors, the KV cache and the compute buffer fit the chosen GPUs: the split
MoE users run instead of ``-ngl``'s, which leaves whole layers' attention on the CPU.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from gpu_launch.errors import UsageError
from gpu_launch.base.records import dataclass, replace
from gpu_launch.modelfile.facts import ModelFacts, layer_number

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: the plan's records (fit/plan.py imports this module)
    from typing import Any as Placement, Any as Room, Any as Sizing

__all__ = ["Offload", "EXPS", "DENSE_FFN", "parse_overrides", "moe_patterns", "ffn_patterns", "HostSplit", "host_split", "fewest_moe"]

EXPS = r"\.ffn_(up|down|gate|gate_up)_(ch|)exps"  # LLM_FFN_EXPS_REGEX (common/common.h)
DENSE_FFN = r"\.ffn_(up|down|gate)\."  # LLM_FFN_DENSE_REGEX (common/common.h): --n-cpu-ffn's
_BLOCK = re.compile(r"^blk\.(\d+)\.")
GiB = 1 << 30


@dataclass(frozen=True)
class Offload:
    """The command's offload options. ``patterns``: (regular expression, buffer type) in llama.cpp's
    order; ``choose_moe``: ``--n-cpu-moe {n_cpu_moe}``, gpulaunch picks N."""

    patterns: tuple[tuple[str, str], ...] = ()
    kv_on_host: bool = False
    choose_moe: bool = False
    cpu_offload_gb: float = 0.0
    said: tuple[str, ...] = ()  # as the command wrote them, for the plan's notes
    chosen: int = 0  # the last patterns are {n_cpu_moe}'s, gpulaunch's choice (its own note says why)

    @property
    def active(self) -> bool:
        return bool(self.patterns) or self.kv_on_host or self.choose_moe or self.cpu_offload_gb > 0


def parse_overrides(text: str, written: str) -> tuple[tuple[str, str], ...]:
    """``-ot``'s value (several, comma-separated, as llama.cpp's parse_tensor_buffer_overrides splits
    them): each ``PATTERN=BUFT``; a pattern that is no regular expression is one error line."""
    out = []
    for item in text.split(","):
        pattern, eq, buft = item.partition("=")
        if not eq or not pattern:
            raise UsageError(f"{written}: {item!r} is not PATTERN=BUFFER_TYPE", hint="e.g. -ot 'exps=CPU'")
        try:
            re.compile(pattern)
        except re.error as e:
            raise UsageError(f"{written}: {pattern!r} is not a regular expression ({e})",
                             hint="llama.cpp matches it with std::regex_search on each tensor's name") from None
        out.append((pattern, buft))
    return tuple(out)


def moe_patterns(n: int) -> tuple[tuple[str, str], ...]:
    """``--n-cpu-moe n``'s patterns (llm_ffn_block_regex: ``blk\\.%d`` + LLM_FFN_EXPS_REGEX)."""
    return tuple((rf"blk\.{i}{EXPS}", "CPU") for i in range(n))


def ffn_patterns(n: int) -> tuple[tuple[str, str], ...]:
    """``--n-cpu-ffn n``'s patterns (llm_add_n_cpu_ffn_overrides with LLM_FFN_DENSE_REGEX): a dense model's
    FFN weights of the first n blocks on the host."""
    return tuple((rf"blk\.{i}{DENSE_FFN}", "CPU") for i in range(n))


@dataclass(frozen=True)
class HostSplit:
    """The weights the patterns put on the host: per layer, and of the output unit (output, other)."""

    layers: tuple[int, ...]
    output: int
    experts: tuple[int, ...]  # each layer's expert bytes (what --n-cpu-moe moves), whatever the patterns

    @property
    def total(self) -> int:
        return sum(self.layers) + self.output


_SPLITS: dict[tuple[int, tuple[tuple[str, str], ...]], tuple[ModelFacts, HostSplit]] = {}


def host_split(model: ModelFacts, patterns: tuple[tuple[str, str], ...]) -> HostSplit:
    """Which bytes ``patterns`` keep on the host, tensor by tensor, first matching pattern first
    (src/llama-model-loader.cpp). The token embedding is on the host anyway: not counted again."""
    key = (id(model), patterns)
    known = _SPLITS.get(key)
    if known is not None and known[0] is model:
        return known[1]
    n = model.hyper.n_layers
    compiled = [(re.compile(p), b) for p, b in patterns]
    experts_re = re.compile(EXPS)
    layers, experts, output = [0] * n, [0] * n, 0
    for name, nbytes in model.weights.tensors:
        m = _BLOCK.match(name)
        il = layer_number(m[1], n) if m else None
        if il is not None and il < n and experts_re.search(name):
            experts[il] += nbytes
        buft = next((b for r, b in compiled if r.search(name)), None)
        if buft is None or buft.upper() != "CPU" or name.startswith("token_embd"):
            continue
        if il is None:
            output += nbytes
        elif il < n:
            layers[il] += nbytes
    split = HostSplit(tuple(layers), output, tuple(experts))
    if len(_SPLITS) > 32:
        _SPLITS.clear()
    _SPLITS[key] = (model, split)
    return split


def moe_note(model: ModelFacts, n: int, chosen: bool) -> str:
    split = host_split(model, moe_patterns(n))
    what = "{n_cpu_moe} = " if chosen else "--n-cpu-moe "
    if n == 0 or not split.total:
        return f"{what}{n}: every layer's experts on the GPUs"
    return (f"{what}{n}: the experts (ffn_*_exps) of layers 0-{n - 1} stay on the CPU "
            f"({split.total / GiB:.1f} GiB); every layer's attention, shared tensors and KV cache on the GPUs")


def fewest_moe(s: Sizing, rooms: Sequence[Room], place: Callable[[Sizing, Sequence[Room]], Placement],
               resized: Callable[[Sizing, Offload], Sizing]) -> Placement:
    """``{n_cpu_moe}``: the smallest N whose placement holds every layer on the GPUs (llama.cpp
    offloads all of them; their experts below N on the host), searched from 0 (more experts on the
    host never needs more GPU memory). When even N = every layer does not fit, that N and the layer
    split the command allows (``-ngl {gpu_layers}``), or the shortfall."""
    off = s.settings.offload
    split = host_split(s.model, ())
    moe = [il for il, b in enumerate(split.experts) if b]
    last = (moe[-1] + 1) if moe else 0

    def at(n: int) -> Placement:
        chosen = replace(off, choose_moe=False, patterns=off.patterns + moe_patterns(n), chosen=n)
        return place(resized(s, chosen), rooms)

    lo, hi = 0, last
    best = at(hi)
    if not best.whole:
        note = "no MoE experts in this model: {n_cpu_moe} = 0" if not moe else (
            f"{{n_cpu_moe}} = {last}: even with every layer's experts on the CPU the rest does not fit these GPUs")
        return replace(best, n_cpu_moe=last, notes=(*best.notes, note))
    while lo < hi:  # the smallest whole N: placements are monotonic in N
        mid = (lo + hi) // 2
        if at(mid).whole:
            hi = mid
        else:
            lo = mid + 1
    best = at(lo)
    why = moe_note(s.model, lo, True) + (f" (the fewest that fit: {lo - 1} does not)" if lo else "")
    return replace(best, n_cpu_moe=lo, notes=(*best.notes, why))


def notes(s: Sizing, on_host: int) -> list[str]:
    """What the plan keeps on the host and why, for the text and --json plans."""
    off = s.settings.offload
    out = []
    given = off.patterns[:len(off.patterns) - off.chosen]
    if given:
        split = host_split(s.model, given)
        layers = [il for il, b in enumerate(split.layers) if b]
        where = f"layers {layers[0]}-{layers[-1]}" if layers else "no layer"
        said = ", ".join(off.said) or "the tensor overrides"
        out.append(f"{said}: {split.total / GiB:.1f} GiB of weights ({where}"
                   + (", output" if split.output else "") + ") stay on the CPU, as llama.cpp's first matching "
                   "pattern puts them; the rest of those layers on the GPUs")
    if off.kv_on_host:
        out.append(f"-nkvo: the KV cache ({s.kv.total / GiB:.1f} GiB) stays on the CPU")
    if on_host and s.settings.host_free is not None:
        out.append(f"host memory: {on_host / GiB:.1f} GiB of it for these, {s.settings.host_free / GiB:.1f} GiB available")
    return out


def gpu_share_off(s: Sizing) -> int:
    """vLLM --cpu-offload-gb: the bytes of each GPU's weights kept in host memory."""
    return int(s.settings.offload.cpu_offload_gb * GiB)
