"""``gpulaunch ls`` / ``topo``: the GPUs, their load, who holds them, and the links between them.

``ls`` fits the terminal it is in (one line per GPU, :mod:`gpu_launch.views.ls_table`); ``--watch``
redraws it in place until Ctrl-C. With no NVIDIA driver (and no ``--snapshot``), ``ls``, ``topo`` and their
``--json`` show the bundled example machine with a one-line note on stderr (``--json``: an ``example`` field
too; exit 0: it is what a new user wants to see), reserving in the user's own lock dir as ``--snapshot
dgx-h100`` does (:func:`gpu_launch.placing.pick.example_instead`).
``--gpus SPEC`` shows those GPUs only (``nvidia-smi -i``); ``--processes`` lists every process under the
table with its command (:mod:`gpu_launch.views.ls_processes`).
"""

from __future__ import annotations

import os
import sys

from gpu_launch.placing import pick
from gpu_launch.errors import GpuLaunchError, NvmlUnavailable, UsageError
from gpu_launch.views.ls_table import Held

# Annotations only: importing typing costs ~3 ms of every launch (docs/performance.md).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import IO

    from gpu_launch.hardware.model import Machine
    from gpu_launch.options.args import Invocation
    from gpu_launch.reservations.holders import Holder


__all__ = ["run", "DEMO"]

#: The bundled machine `ls` shows where there is no NVIDIA driver.
DEMO = pick.EXAMPLE
DEMO_NOTE = pick.EXAMPLE_NOTE


def run(inv: Invocation) -> int:
    if inv.positionals:
        raise UsageError(f"`{inv.command}` takes no arguments, got {inv.positionals[0]!r}",
                         hint="to run a program of that name, put it after --")
    if inv.get("watch") is not None:
        if inv.get("json"):
            raise UsageError("ls --watch draws for a person, not for a program",
                             hint="for a series of JSON snapshots, run `gpulaunch ls --json` in a loop")
        from gpu_launch.views import watch

        return watch.run(lambda width: _frame(inv, width), inv.get("watch"), sys.stdout)
    topo = inv.command == "topo" or bool(inv.get("topo"))
    out = sys.stdout
    if inv.get("json"):
        from gpu_launch.hardware import snapshot

        # `topo --json` writes a whole snapshot too: its processes are read, not left unknown.
        machine, inv, demo, total = _read_or_demo(inv, topo=True)
        if demo and not inv.get("quiet"):
            print(f"gpulaunch: {DEMO_NOTE}", file=sys.stderr)
        if inv.command == "ls":  # the machine, how many GPUs it has (--gpus shows some), then who waits for it
            import json

            from gpu_launch.views import queue_table

            doc = snapshot.to_dict(machine)
            doc["gpu_count"] = total
            doc["holders"] = _holders_json(inv, machine)
            doc["queue"] = queue_table.as_json(_waiters(inv))
            if demo:
                doc["example"] = DEMO
            out.write(json.dumps(doc, indent=2) + "\n")
        elif demo:
            import json

            out.write(json.dumps({**snapshot.to_dict(machine), "example": DEMO}, indent=2) + "\n")
        else:
            out.write(snapshot.dump(machine))
        if not inv.get("quiet"):
            for warning in machine.warnings:  # the JSON has no place for them; stdout stays pure JSON
                print(f"gpulaunch: warning: {warning}", file=sys.stderr)
        return 0
    from gpu_launch.views import render

    from gpu_launch.views.ls_table import fit_width

    width = fit_width(out)
    machine, inv, demo, total = _read_or_demo(inv, topo)
    if demo and not inv.get("quiet"):
        print(f"gpulaunch: {DEMO_NOTE}", file=sys.stderr)
    if inv.command == "ls":
        _listing(inv, machine, out, width, render.use_color(out), total)
    if topo:
        if inv.command == "ls":
            out.write("\n")
        if render.use_color(out):
            render.topo_rich(machine, out)
        else:
            out.write(render.topo_plain(machine))
    return 0


def _read(inv: Invocation, topo: bool) -> tuple[Machine, int]:
    """The machine as ``ls`` shows it (``--gpus``: those GPUs alone), and how many GPUs it has in all."""
    shown = _indices(inv.get("gpus"))
    machine = pick.read_machine(inv, processes=inv.command == "ls" or bool(inv.get("json")),
                                topology=topo or bool(inv.get("json")),
                                **({"extras": True} if inv.get("wide") else {}),
                                **({"state_of": shown} if shown is not None else {}))
    return _only(machine, inv.get("gpus")), len(machine.gpus)


def _indices(items: object) -> frozenset[int] | None:
    """The NVML indices ``--gpus`` names when they are plain indices (only their state is read), else None."""
    if not isinstance(items, tuple) or not all(getattr(i, "kind", None) == "index" and i.last - i.first < 1024
                                               for i in items):
        return None
    return frozenset(n for i in items for n in range(i.first, i.last + 1))


def _only(machine: Machine, items: object) -> Machine:
    """``machine`` with only the GPUs ``--gpus`` names (a MIG device: its GPU), in NVML order, like
    ``nvidia-smi -i``; their corner of the link matrix with them. No ``--gpus``: the whole machine."""
    if items is None:
        return machine
    from gpu_launch.choose import spec
    from gpu_launch.base.records import replace

    named = {d.gpu.uuid for d in spec.resolve(items, machine)}  # type: ignore[arg-type]
    keep = [pos for pos, g in enumerate(machine.gpus) if g.uuid in named]
    links = None if machine.links is None else tuple(tuple(machine.links[i][j] for j in keep) for i in keep)
    return replace(machine, gpus=tuple(machine.gpus[pos] for pos in keep), links=links)


def _read_or_demo(inv: Invocation, topo: bool) -> tuple[Machine, Invocation, bool, int]:
    """The machine, the invocation to go on with (on the example machine where NVML says there is no driver
    and no snapshot was asked for: its lock dir, not the shared one), whether it is that example, and how
    many GPUs it has in all."""
    try:
        machine, total = _read(inv, topo)
        return machine, inv, False, total
    except NvmlUnavailable as exc:
        inv = pick.example_instead(inv, exc)  # (raises again for a driver that fails: the machine's real problem)
    machine, total = _read(inv, topo)
    return machine, inv, True, total


def _listing(inv: Invocation, machine: Machine, out: IO[str], width: int | None, rich_ok: bool,
             total: int | None = None) -> None:
    from gpu_launch.views import render

    reserved = _reserved(inv, machine)
    wide = bool(inv.get("wide"))
    if rich_ok:
        render.ls_rich(machine, out, reserved, width, wide=wide, total=total)
    else:
        out.write(render.ls_plain(machine, reserved, width, wide=wide, total=total))
    if wide and reserved and width is not None:  # the table shows each holder short: here in full
        out.writelines(_wrap(line, width) for line in _holders_in_full(machine, reserved, width))
    if inv.get("processes"):
        from gpu_launch.views import ls_processes

        out.write("\n" + ls_processes.text(machine, width))
    from gpu_launch.reservations import lockdir

    note = lockdir.shared_note(_lock_dir(inv))
    if note:  # only where it tells the user something (`config` always names the lock dir)
        out.write(_wrap(note, width))
    _ls_parent_note(machine, out, width)
    from gpu_launch.views import queue_table

    out.write(queue_table.as_text(_waiters(inv), width))  # a section of its own; nothing when nobody waits


def _holders_in_full(machine: Machine, reserved: dict[str, Held], width: int) -> list[str]:
    """``GPU 2, GPU 3 reserved by alice (pid 4242, for 1h02m: python train.py --lr 3e-4)``, one line a
    holder, when the table is too narrow for the whole line (``ls --wide``)."""
    from gpu_launch.views.ls_table import layout

    if layout(machine, reserved, None, wide=True).width() <= width:
        return []  # the full layout fits: its cells say it all
    from gpu_launch.hardware.model import Device

    by_holder: dict[str, list[str]] = {}
    for g in machine.gpus:
        for device in (Device(g), *(Device(g, m) for m in g.mig_devices)):
            held = reserved.get(device.uuid)
            if held is not None:
                by_holder.setdefault(held.whole or held.full, []).append(device.label)
    return [f"{', '.join(labels)} reserved by {full}" for full, labels in by_holder.items()]


def _wrap(text: str, width: int | None) -> str:
    """A note under the table, wrapped (never cut: it may say what to do) to ``width``."""
    if width is None or len(text) <= width:
        return text + "\n"
    import textwrap

    return "\n".join(textwrap.wrap(text, width, subsequent_indent="  ", break_on_hyphens=False)) + "\n"


def _frame(inv: Invocation, width: int | None) -> str:
    """One `ls --watch` frame, as plain text (colour would need rich on every redraw). The demo's note
    is part of every frame: on stderr, the first redraw would wipe it off the screen."""
    import io

    buf = io.StringIO()
    machine, inv, demo, total = _read_or_demo(inv, False)
    _listing(inv, machine, buf, width, rich_ok=False, total=total)
    if demo:
        buf.write(_wrap(DEMO_NOTE, width))
    return buf.getvalue()


def _ls_parent_note(machine: Machine, out: IO[str], width: int | None = None) -> None:
    """Under an inherited CUDA_VISIBLE_DEVICES/NVIDIA_VISIBLE_DEVICES, say which GPUs a launch may use."""
    from gpu_launch.choose import visibility

    header = visibility.resolve(machine, os.environ).header()
    if header:
        out.write(_wrap(header, width))


def _lock_dir(inv: Invocation) -> str:
    """The lock directory a launch with these options would use (a bundled example: the user's own)."""
    from gpu_launch.hardware.snapshot import is_example
    from gpu_launch.reservations import lockdir

    return lockdir.lock_dir_path(inv.get("lock_dir"), os.environ, example=is_example(pick.snapshot_source(inv)))


def _waiters(inv: Invocation) -> list:
    """The ``--wait`` queue of the lock directory a launch would use; unreadable: a warning, no queue."""
    from gpu_launch.reservations import waitqueue

    try:
        return waitqueue.waiters(_lock_dir(inv))
    except GpuLaunchError as exc:
        print(f"gpulaunch: warning: the queue is not shown: {exc.message}", file=sys.stderr)
    except OSError as exc:
        print(f"gpulaunch: warning: the queue is not shown: {exc.strerror}", file=sys.stderr)
    return []


def _holders_json(inv: Invocation, machine: Machine) -> list[dict[str, object]]:
    """``ls --json``'s ``holders``: who holds which GPU, as its lock file says (display only; a lock dir
    that cannot be read: none, with the warning ``ls`` prints)."""
    from gpu_launch.hardware.model import Device
    from gpu_launch.reservations import holders

    devices = [Device(g, m) for g in machine.gpus for m in (None, *g.mig_devices)]
    try:
        held, unusable = holders.scan(_lock_dir(inv), [d.uuid for d in devices])
    except GpuLaunchError:
        return []
    out: list[dict[str, object]] = []
    for d in devices:
        if d.uuid in unusable:
            out.append({"gpu": d.label, "uuid": d.uuid, "unavailable": unusable[d.uuid].describe()})
        elif d.uuid in held:
            h = held[d.uuid]
            out.append({"gpu": d.label, "uuid": d.uuid, "user": h.user, "pid": h.pid, "started": h.started,
                        "command": h.command, "host": h.host, "shared_lock": h.shared, "backfilled": h.backfilled})
    return out


def _reserved(inv: Invocation, machine: Machine) -> dict[str, Held]:
    """Who holds which GPU, for `ls`; a lock dir that cannot be read is a warning, not an error."""
    from gpu_launch.reservations import holders

    try:
        held, unusable = holders.scan(_lock_dir(inv),
                                           [u for g in machine.gpus for u in (g.uuid, *(m.uuid for m in g.mig_devices))])
    except GpuLaunchError as exc:
        print(f"gpulaunch: warning: reservations not shown: {exc.message}", file=sys.stderr)
        return {}
    from gpu_launch.hardware.model import Device

    labels = {u: Device(g, m).label for g in machine.gpus for u, m in ((g.uuid, None), *((m.uuid, m) for m in g.mig_devices))}
    for uuid, bad in unusable.items():
        print(f"gpulaunch: warning: {labels.get(uuid, uuid)} is {bad.describe()} (hint: {bad.hint})", file=sys.stderr)
    return {**{uuid: _held(holder) for uuid, holder in held.items()},
            **{uuid: Held(bad.short(), "unavailable") for uuid, bad in unusable.items()}}


def _held(holder: Holder) -> Held:
    """How ``ls`` names a holder: its line (the command cut), the short form an 80-column table shows (its
    user and command word), and the line with the whole command."""
    from gpu_launch.base.records import replace
    from gpu_launch.base.text import printable
    from gpu_launch.views.ls_table import command_word

    full = holder.describe()
    if holder.user is None and holder.command is None:
        return Held(full, full if holder.pid is None else f"pid {holder.pid}", full)
    if holder.shared:  # not a reservation: say what blocks the GPU, even in the short form
        return Held(full, f"shared lock: {printable(holder.user or '?')}", full)
    whole = replace(holder, command=None).describe()
    if holder.command and whole.endswith(")"):
        whole = f"{whole[:-1]}: {printable(' '.join(holder.command.split()))})"
    return Held(full, f"{printable(holder.user or '?')} {printable(command_word(holder.command))}", whole)
