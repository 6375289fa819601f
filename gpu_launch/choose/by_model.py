"""``--fit MODEL``: the fewest GPUs that hold the model, then the best of those by the usual ranking.

For each GPU count the engine accepts (tensor parallelism: 1, 2, 4, 8 dividing the attention
heads; llama.cpp and Transformers: any count), the ranking (:mod:`gpu_launch.choose.ranking`)
offers its best sets in order and the first one :func:`gpu_launch.fit.plan.place` says holds the
model wins. For tensor parallelism, where every GPU holds the same share, a GPU too small for its
share is left out before ranking, so the best set that holds it is found exactly. When no set
holds it whole and the engine can leave layers on the CPU (llama.cpp ``-ngl {gpu_layers}``), the
set that takes the most layers wins. Otherwise one line says the shortfall and what would fit.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from gpu_launch.choose import select
from gpu_launch.errors import NotEnoughGpus
from gpu_launch.fit import plan as fit_plan
from gpu_launch.hardware.model import Device, Gpu, Machine

__all__ = ["choose_by_model", "hopeless", "rooms", "counts", "for_machine", "KEEP"]

MiB = 1 << 20
KEEP = 12  # ranked sets tried per count before the next count


def rooms(gpus: tuple[Gpu, ...] | list[Gpu]) -> list[fit_plan.Room]:
    return [fit_plan.Room(g.index, (g.memory_free_mib or 0) * MiB,
                          g.memory_total_mib * MiB if g.memory_total_mib is not None else None) for g in gpus]


def for_machine(s: fit_plan.Sizing, machine: Machine) -> fit_plan.Sizing:
    """``s`` with the host memory a snapshot states (it describes its own host, not this one), and
    with vLLM's default batched tokens for this machine's GPUs where the command sets none."""
    settings = s.settings
    if machine.host_memory_available_mib is not None and settings.host_free is not None:
        settings = replace(settings, host_free=machine.host_memory_available_mib * MiB)
    if s.engine.name == "vllm" and settings.batched_tokens is None:
        settings = replace(settings, batched_tokens=fit_plan.vllm_batched_default(
            [(g.name, g.memory_total_mib) for g in machine.gpus]))
    if s.engine.name == "vllm" and not settings.gpu_arch:
        settings = replace(settings, gpu_arch=fit_plan.gpu_arch([g.name for g in machine.gpus]))
    return s if settings == s.settings else fit_plan.sizing(s.model, s.engine, settings)


def counts(s: fit_plan.Sizing, most: int) -> list[int]:
    """The GPU counts to try, fewest first."""
    if s.engine.layout == "tensor":
        return fit_plan.tp_sizes(s.model, most)
    return list(range(1, min(most, max(select.FIT_SIZES)) + 1))


@dataclass(frozen=True)
class _Tried:
    n: int
    gpus: tuple[Gpu, ...]
    placement: fit_plan.Placement


def _candidates(s: fit_plan.Sizing, eligible: tuple[Gpu, ...], n: int) -> tuple[Gpu, ...]:
    if s.engine.layout != "tensor":
        return eligible
    probe = fit_plan.place(s, rooms(eligible[:1]) * n) if eligible else None
    if probe is None or not probe.per_gpu:
        return eligible
    share = probe.per_gpu[0]
    need = share.weights_bytes + share.kv_bytes + share.allowance_bytes
    return tuple(g for g in eligible if (g.memory_free_mib or 0) * MiB >= need)


def _search(machine: Machine, s: fit_plan.Sizing, eligible: tuple[Gpu, ...], runner_ups: int
            ) -> tuple[_Tried | None, list[_Tried]]:
    """The first (fewest GPUs, best ranked) set that holds ``s`` whole, and the best set tried per count."""
    from gpu_launch.choose import ranking

    best_per_count: list[_Tried] = []
    for n in counts(s, len(eligible)):
        pool = _candidates(s, eligible, n)
        if len(pool) < n:
            # none of these n GPUs hold their share: still say what the best of all would lack
            ranked = ranking.best_sets(machine, eligible, n, keep=1)
            best_per_count.append(_Tried(n, ranked.best, fit_plan.place(s, rooms(ranked.best))))
            continue
        ranked = ranking.best_sets(machine, pool, n, keep=max(KEEP, 1 + runner_ups))
        most: _Tried | None = None  # of this count: the best-ranked set that holds the most layers
        for cand in ranked.candidates:
            tried = _Tried(n, cand.gpus, fit_plan.place(s, rooms(cand.gpus)))
            if holds(s, tried.placement):
                return tried, best_per_count
            if most is None or _layers(tried) > _layers(most):
                most = tried
        if most is not None:
            best_per_count.append(most)
    return None, best_per_count


def holds(s: fit_plan.Sizing, p: fit_plan.Placement) -> bool:
    """The set runs what the command asks for: the whole model, or the units a fixed ``-ngl N`` offloads."""
    return p.whole or (s.settings.gpu_layers_cap is not None and p.fits)


def _layers(t: _Tried) -> tuple[bool, int]:
    return t.placement.fits, t.placement.gpu_layers or 0


def choose_by_model(machine: Machine, s: fit_plan.Sizing, constraints: select.Constraints,
                    runner_ups: int = 0) -> select.Selection:
    """The selection for ``s`` (the plan in ``Selection.plan``), or NotEnoughGpus in one line."""
    elig = select.eligibility(machine, constraints)
    if not elig.eligible:
        raise select._not_enough(1, machine, elig, constraints)
    s = for_machine(s, machine)
    found, tried = _search(machine, s, elig.eligible, runner_ups)
    if found is not None:
        base = select.choose_auto(machine, found.n, constraints, runner_ups) if runner_ups else None
        return _selection(s, found, elig, base)
    if s.settings.partial:
        usable = [t for t in tried if t.placement.fits]
        if usable:
            most = max(t.placement.gpu_layers or 0 for t in usable)
            pick = min((t for t in usable if (t.placement.gpu_layers or 0) == most), key=lambda t: t.n)
            return _selection(s, pick, elig, None)
    raise _shortfall(machine, s, tried, len(elig.eligible), constraints)


def _selection(s: fit_plan.Sizing, t: _Tried, elig: select.Eligibility, base: select.Selection | None
               ) -> select.Selection:
    devices = tuple(Device(g) for g in t.gpus)
    same = base is not None and base.devices == devices  # --explain: the ranking's runner-ups, when it agrees
    return select.Selection(devices, tuple(select._load_warnings(t.gpus)), elig,
                            base.ranking if same and base else None, plan=fit_plan.Plan(s, t.placement))


def _gib(b: int) -> str:
    return f"{b / (1 << 30):.1f} GiB"


def _shortfall(machine: Machine, s: fit_plan.Sizing, tried: list[_Tried], eligible: int,
               constraints: select.Constraints) -> NotEnoughGpus:
    """``needs 41.2 GiB on 2 GPUs at 32768 tokens; the best pair has 37.9 GiB free; at 16384 tokens
    it fits, or use 4 GPUs``."""
    ctx = s.settings.ctx
    name = s.model.name or s.model.source
    if not tried:
        return NotEnoughGpus(f"{name}: no GPU count the engine accepts ({s.engine.name}) is possible with "
                             f"{eligible} eligible GPU(s)", hint="wait with --wait, or free GPUs")
    last = max(tried, key=lambda t: t.n)
    p = last.placement
    free = sum(sh.free_bytes for sh in p.per_gpu)
    sets = {1: "GPU", 2: "pair"}.get(last.n, f"set of {last.n}")
    ngl_short = _short_of_ngl(s, p)
    host_short = not ngl_short and _host_short(s, p)  # what runs out: -ngl's layers on the GPUs, else the host
    if s.engine.layout == "tensor" and p.per_gpu:
        # every GPU holds the same share: say it per GPU, against what the engine may use of each
        sh = p.per_gpu[0]
        each = sh.weights_bytes + sh.kv_bytes + sh.allowance_bytes
        room = rooms(last.gpus)
        if p.gpu_mem_util is not None:
            allowed = min(int(p.gpu_mem_util * (r.total or r.free)) if r.free >= p.gpu_mem_util * (r.total or r.free)
                          else 0 for r in room)
            limit = f"vLLM may use {_gib(allowed)} of the tightest ({p.gpu_mem_util:.2f} of its memory, if that much is free)"
        else:
            limit = f"the tightest has {_gib(min(r.free for r in room))} free"
        msg = (f"{name} needs {_gib(each)} on each of {last.n} GPU{'s' if last.n != 1 else ''} at {ctx} tokens "
               f"({s.engine.name}, tp {last.n}: weights {_gib(sh.weights_bytes)}, KV {_gib(sh.kv_bytes)}, allowance "
               f"{_gib(sh.allowance_bytes)}); {limit}")
    elif ngl_short:
        asked = min(s.settings.gpu_layers_cap or 0, p.units)
        msg = (f"{name} at {ctx} tokens ({s.engine.name}): -ngl {s.settings.gpu_layers_cap} puts {asked} of its "
               f"{p.units} layers on the GPUs, the best {sets} ({_gib(free)} free) takes {p.gpu_layers or 0}")
    elif host_short:
        # Layers would stay on the CPU, as the command allows, but the host cannot hold them: say that,
        # not what the GPUs would need for the whole model (which the command never asked for).
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
    usable = [g for g in machine.gpus if select.could_ever_be_chosen(g, constraints.exclude)]
    for n in counts(s, len(usable)):
        if n <= last.n:
            continue
        full = [replace(g, memory_free_mib=g.memory_total_mib) for g in
                sorted(usable, key=lambda g: -(g.memory_total_mib or 0))[:n]]
        if holds(s, fit_plan.place(s, rooms(full))):
            alternatives.append(f"or use {n} GPUs" if alternatives else f"it would fit on {n} free GPUs")
            break
    if alternatives:
        msg += "; " + ", ".join(alternatives)
    if host_short:
        hint = ("-ngl {gpu_layers} to put as many layers on the GPUs as fit, " if s.settings.gpu_layers_cap is not None
                else "") + "a shorter context (--ctx), a smaller KV type (--kv-type q8_0), or a smaller quantisation"
    elif s.settings.gpu_layers_cap is not None:
        hint = "a smaller -ngl, -ngl {gpu_layers} to let gpulaunch count them, or a shorter context (--ctx)"
    elif s.engine.layout == "layers" and not s.settings.partial:
        hint = "let llama.cpp keep the rest on the CPU: -ngl {gpu_layers}, or a shorter context (--ctx)"
    else:
        hint = "wait with --wait, a shorter context (--ctx), a smaller KV type (--kv-type q8_0), or a smaller quantisation"
    return NotEnoughGpus(msg, hint=hint)


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
    """Why no wait can help: not even the largest usable GPUs, all free, hold the model."""
    if s.settings.partial:
        return None
    biggest = sorted(usable, key=lambda g: -(g.memory_total_mib or 0))
    for n in counts(s, len(usable)):
        full = [replace(g, memory_free_mib=g.memory_total_mib) for g in biggest[:n]]
        if fit_plan.place(s, rooms(full)).whole:
            return None
    return (f"{s.model.name or s.model.source} does not fit on the {len(usable)} usable GPUs here even when they "
            f"are free, at {s.settings.ctx} tokens")
