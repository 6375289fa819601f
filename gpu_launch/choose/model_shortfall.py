"""One line when no set of GPUs here runs the model as the command asks.

It says what the model needs where, what the GPUs have (and, where the engine refuses a GPU for what
others use on it, who uses it), and what would do instead: a shorter context, more GPUs, another
tensor-parallel size than the command fixes, or N nodes of this kind. ``--wait`` is suggested only
where waiting could help: when even this machine's GPUs, all free, cannot run it (or the host's
memory is what runs out), the request is hopeless here and the line says what would run it.
"""

from __future__ import annotations

from gpu_launch.choose import select
from gpu_launch.choose.model_sets import Tried, all_free, counts, holds, rooms
from gpu_launch.errors import NotEnoughGpus
from gpu_launch.fit import nodes as fit_nodes
from gpu_launch.fit import plan as fit_plan
from gpu_launch.hardware.model import Gpu, Machine
from gpu_launch.base.records import replace

__all__ = ["Tried", "shortfall", "hopeless", "node_split", "nodes_hint", "tp_flag"]

GiB = 1 << 30
_SHOWN = {"vllm": "vLLM", "sglang": "SGLang", "tgi": "TGI", "mlc": "MLC-LLM"}
_FLAGS = {"vllm": ("--tensor-parallel-size", "--pipeline-parallel-size"), "sglang": ("--tp-size", "--pp-size"),
          "tgi": ("--num-shard", ""), "mlc": ("tensor_parallel_shards=", "pipeline_parallel_stages=")}


def _gib(b: int) -> str:
    return f"{b / GiB:.1f} GiB"


def tp_flag(engine: str) -> str:
    return _FLAGS.get(engine, ("tp", ""))[0]


def _usable(machine: Machine, constraints: select.Constraints) -> list[Gpu]:
    return [g for g in machine.gpus if select.could_ever_be_chosen(g, constraints.exclude)]


def node_split(s: fit_plan.Sizing, usable: list[Gpu]) -> fit_nodes.NodeSplit:
    """The nodes of this machine's kind (``--gpus-per-node`` of its largest GPUs, else all usable)."""
    biggest = sorted(usable, key=lambda g: -(g.memory_total_mib or 0))
    per_node = s.settings.gpus_per_node or len(biggest)
    return fit_nodes.split_for_nodes(s, rooms(all_free(biggest[:per_node])))


def nodes_hint(s: fit_plan.Sizing, split: fit_nodes.NodeSplit) -> str:
    tp, pp = _FLAGS.get(s.engine.name, ("", ""))
    sep = "" if tp.endswith("=") else " "
    flags = f"{tp}{sep}{split.tp}" + (f" {pp}{sep}{split.pp}" if pp and split.pp > 1 else "")
    return f"gpulaunch --nodes {split.nodes} --slurm -- COMMAND with {flags}"


def _in_use(g: Gpu) -> str:
    """``65.3 GiB in use by alice (pid 2841173: 64.7 GiB)``: who holds a GPU's memory, as ls shows it."""
    used = g.memory_used_mib if g.memory_used_mib is not None else (g.memory_total_mib or 0) - (g.memory_free_mib or 0)
    by = [f"{p.user or 'a process gpulaunch cannot see'} (pid {p.pid}"
          + (f": {p.used_memory_mib / 1024:.1f} GiB)" if p.used_memory_mib is not None else ")") for p in g.processes]
    return f"{used / 1024:.1f} GiB in use" + (f" by {', '.join(by)}" if by else "")


def _tensor_line(s: fit_plan.Sizing, last: Tried, who: bool = True) -> str:
    """The tensor-parallel shortfall; ``who``: where the engine refuses a GPU for others' use of it,
    say whose (not when no free GPU here would do anyway)."""
    p = last.placement
    budgets = list(p.budgets) or [sh.free_bytes for sh in p.per_gpu]
    needs = [sh.weights_bytes + sh.kv_bytes + sh.allowance_bytes for sh in p.per_gpu]
    tight = max(range(len(needs)), key=lambda i: needs[i] - budgets[i])
    sh = p.per_gpu[tight]
    split = f"tp {p.tp}" + (f" × pp {p.pp}" if p.pp > 1 else "")
    fixed = f", {s.settings.fixed_by}" if s.settings.fixed_by else ""
    n = len(p.per_gpu)
    each = "" if n == 1 else "each of " if len(set(needs)) == 1 else "the fullest of "
    msg = (f"{s.model.name or s.model.source} needs {_gib(needs[tight])} on {each}{n} GPU{'s' if n != 1 else ''} "
           f"at {s.settings.ctx} tokens ({s.engine.name}, {split}{fixed}: weights {_gib(sh.weights_bytes)}, "
           f"KV {_gib(sh.kv_bytes)}, allowance {_gib(sh.allowance_bytes)})")
    util = p.gpu_mem_util
    if util is None:
        return msg + f"; the tightest has {_gib(min(r.free for r in rooms(last.gpus)))} free"
    refused = [(g, r) for g, r in zip(last.gpus, rooms(last.gpus)) if r.free < util * (r.total or r.free)]
    asked = "--gpu-memory-utilization" if s.engine.name == "vllm" else "--mem-fraction-static"
    shown = _SHOWN.get(s.engine.name, s.engine.name)
    if refused and who:
        g, r = min(refused, key=lambda gr: gr[1].free)
        total = r.total or r.free
        others = f" ({len(refused) - 1} more such)" if len(refused) > 1 else ""
        return msg + (f"; {shown} with {asked} {util:.2f} needs {_gib(int(util * total))} of each GPU free "
                      f"at start, and {g.label} has {_gib(r.free)} of {_gib(total)} free: {_in_use(g)}{others}")
    return msg + f"; {shown} may use {_gib(budgets[tight])} of each ({asked} {util:.2f})"


def shortfall(machine: Machine, s: fit_plan.Sizing, tried: list[Tried], eligible: int,
              constraints: select.Constraints) -> NotEnoughGpus:
    """``needs 41.2 GiB on 2 GPUs at 32768 tokens; the best pair has 37.9 GiB free; at 16384 tokens
    it fits, or use 4 GPUs``, and a hint that fits the case."""
    ctx = s.settings.ctx
    name = s.model.name or s.model.source
    usable = _usable(machine, constraints)
    why_here = hopeless(s, usable)
    if not tried:
        want = counts(s, 1 << 20)
        msg = (f"{name}: {s.engine.name} starts {want[0] if want else 'more'} ranks"
               + (f" ({s.settings.fixed_by})" if s.settings.fixed_by else "")
               + f", one a GPU; this machine has {len(machine.gpus)} GPUs, {eligible} of them eligible")
        return _finish(s, msg, [], why_here, usable)
    last = max(tried, key=lambda t: t.n)
    most = counts(s, len(usable))
    if why_here and s.engine.layout == "tensor" and most and most[-1] >= last.n:
        # no wait helps: say it of the most GPUs this machine could give, all free, not of the few free now
        biggest = tuple(all_free(sorted(usable, key=lambda g: -(g.memory_total_mib or 0)))[:most[-1]])
        last = Tried(most[-1], biggest, fit_plan.place(s, rooms(biggest)))
    p = last.placement
    free = sum(sh.free_bytes for sh in p.per_gpu)
    sets = {1: "GPU", 2: "pair"}.get(last.n, f"set of {last.n}")
    ngl_short = _short_of_ngl(s, p)
    host_short = not ngl_short and _host_short(s, p)
    if s.engine.layout == "tensor" and p.per_gpu:
        msg = _tensor_line(s, last, who=why_here is None)
    elif ngl_short:
        asked = min(s.settings.gpu_layers_cap or 0, p.units)
        msg = (f"{name} at {ctx} tokens ({s.engine.name}): {s.settings.ngl} {s.settings.gpu_layers_cap} puts {asked} "
               f"of its {p.units} layers on the GPUs, the best {sets} ({_gib(free)} free) takes {p.gpu_layers or 0}")
    elif host_short:
        host = s.settings.host_free or 0
        on_gpus = p.gpu_layers or 0
        msg = (f"{name} does not fit at {ctx} tokens ({s.engine.name}): the best {sets} ({_gib(free)} free) takes "
               f"{on_gpus} of its {p.units} layers; the {p.units - on_gpus} left on the CPU need "
               f"{_gib(p.cpu_weights_bytes + p.cpu_kv_bytes)}, the host has {_gib(host)} available")
    else:
        msg = (f"{name} needs {_gib(p.need_bytes)} on {last.n} GPU{'s' if last.n != 1 else ''} at {ctx} tokens "
               f"({s.engine.name}); the best {sets} has {_gib(free)} free")
        if p.notes:
            msg += f" ({'; '.join(p.notes)})"
    alternatives = []
    smaller = ctx // 2
    while smaller >= 512:
        shorter = s.with_ctx(smaller)
        if holds(shorter, fit_plan.place(shorter, rooms(last.gpus))):
            alternatives.append(f"at {smaller} tokens it fits")
            break
        smaller //= 2
    more = _more_gpus(s, last.n, usable, bool(alternatives))
    if host_short and not why_here:
        why_here = "the host's memory is what runs out"
    return _finish(s, msg, alternatives + more, why_here, usable, ngl_short=ngl_short, host_short=host_short,
                   here=bool(more))


def _more_gpus(s: fit_plan.Sizing, have: int, usable: list[Gpu], after: bool) -> list[str]:
    """What more of this machine's GPUs would run it: another tp than the command fixes, or a larger set."""
    biggest = all_free(sorted(usable, key=lambda g: -(g.memory_total_mib or 0)))
    st = s.settings
    if s.engine.layout == "tensor" and st.tp is not None:
        for tp in fit_plan.tp_sizes(s.model, len(usable)):
            n = tp * st.group // st.nnodes
            other = fit_plan.sizing(s.model, s.engine, replace(st, tp=tp))
            if tp != st.tp and n <= len(usable) and holds(other, fit_plan.place(other, rooms(biggest[:n]))):
                return [f"with {tp_flag(s.engine.name)} {tp} ({n} GPUs) it fits"]
        return []
    for n in counts(s, len(usable)):
        if n > have and holds(s, fit_plan.place(s, rooms(biggest[:n]))):
            return [f"or use {n} GPUs" if after else f"it would fit on {n} free GPUs"]
    return []


def _finish(s: fit_plan.Sizing, msg: str, alternatives: list[str], why_here: str | None, usable: list[Gpu],
            ngl_short: bool = False, host_short: bool = False, here: bool = False) -> NotEnoughGpus:
    """The line's end and its hint: what runs it when no wait can (N nodes of this kind, unless
    ``here``: another size on this machine does), else the usual fixes, ``--wait`` first."""
    fixes = "a shorter context (--ctx), a smaller KV type (--kv-type q8_0), or a smaller quantisation"
    if alternatives:
        msg += "; " + ", ".join(alternatives)
    split = node_split(s, usable) if why_here and not here and s.engine.layout == "tensor" else None
    if split is not None and split.nodes > 1:
        return _final(NotEnoughGpus(f"{msg}; it needs {split.nodes} nodes of this kind ({split.gpus_per_node} GPUs "
                                    f"each, tp {split.tp} × pp {split.pp}): no wait here can help",
                                    hint=f"{nodes_hint(s, split)}; or {fixes}"))
    if why_here:
        nor = f", nor more nodes: {split.problem}" if split is not None and split.problem else ""
        msg += "; no wait can help" + nor
    wait = "" if why_here else "wait with --wait, "
    if host_short:
        hint = (f"{s.settings.ngl} {{gpu_layers}} to put as many layers on the GPUs as fit, "
                if s.settings.gpu_layers_cap is not None else "") + fixes
    elif s.settings.gpu_layers_cap is not None:
        hint = (f"a smaller {s.settings.ngl}, {s.settings.ngl} {{gpu_layers}} to let gpulaunch count them, or a "
                "shorter context (--ctx)")
    elif s.engine.layout == "layers" and not s.settings.partial:
        hint = f"let llama.cpp keep the rest on the CPU: {s.settings.ngl} {{gpu_layers}}, or a shorter context (--ctx)"
    elif s.settings.tp is not None and s.engine.layout == "tensor":
        hint = f"{wait}{tp_flag(s.engine.name)} {{tp}} to let gpulaunch pick the size, or {fixes}"
    else:
        hint = wait + fixes
    error = NotEnoughGpus(msg, hint=hint)
    return _final(error) if why_here else error


def _final(error: NotEnoughGpus) -> NotEnoughGpus:
    error.final = True
    return error


def _short_of_ngl(s: fit_plan.Sizing, p: fit_plan.Placement) -> bool:
    """``-ngl N`` asks for more layers on the GPUs than they can take."""
    cap = s.settings.gpu_layers_cap
    return cap is not None and p.units > 0 and (p.gpu_layers or 0) < min(cap, p.units)


def _host_short(s: fit_plan.Sizing, p: fit_plan.Placement) -> bool:
    """Layers fit on the GPUs and may stay on the CPU, but the host's memory is what runs out."""
    host = s.settings.host_free
    return (p.units > 0 and (bool(p.gpu_layers) or s.settings.gpu_layers_cap == 0) and not p.whole and host is not None
            and (s.settings.partial or s.settings.gpu_layers_cap is not None)
            and p.cpu_weights_bytes + p.cpu_kv_bytes > host)


def hopeless(s: fit_plan.Sizing, usable: list[Gpu]) -> str | None:
    """Why no wait can help: not even the largest usable GPUs, all free, run it as asked (for a
    model that may stay partly on the CPU: not even they and the host's memory)."""
    biggest = all_free(sorted(usable, key=lambda g: -(g.memory_total_mib or 0)))
    for n in counts(s, len(usable)):
        placement = fit_plan.place(s, rooms(biggest[:n]))
        if holds(s, placement) or (s.settings.partial and placement.fits):
            return None
    name = s.model.name or s.model.source
    if s.engine.layout == "training":
        setup = s.settings.training.setup
        return (f"one training step of {name} does not fit on the {len(usable)} usable GPUs here even when they "
                f"are free, at micro-batch {setup.micro_batch} × {setup.seq_len} tokens")
    fixed = f" ({s.settings.fixed_by})" if s.settings.fixed_by else ""
    return (f"{name} does not fit on the {len(usable)} usable GPUs here even when they are free, "
            f"at {s.settings.ctx} tokens{fixed}")
