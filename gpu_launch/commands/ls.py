"""``gpulaunch ls`` / ``topo``: the GPUs, their load, who holds them, and the links between them."""

from __future__ import annotations

import os
import sys

from gpu_launch.share import pick
from gpu_launch.errors import GpuLaunchError, UsageError

# Annotations only: importing typing costs ~3 ms of every launch (README, "Performance").
TYPE_CHECKING = False
if TYPE_CHECKING:
    from gpu_launch.hardware.model import Machine
    from gpu_launch.options.args import Invocation


__all__ = ["run"]


def run(inv: Invocation) -> int:
    from gpu_launch.views import render

    if inv.positionals:
        raise UsageError(f"`{inv.command}` takes no arguments, got {inv.positionals[0]!r}",
                         hint="to run a program of that name, put it after --")
    topo = inv.command == "topo" or bool(inv.get("topo"))
    # `topo --json` writes a whole snapshot too: its processes are read, not left unknown.
    machine = pick.read_machine(inv, processes=inv.command == "ls" or bool(inv.get("json")),
                                  topology=topo or bool(inv.get("json")))
    out = sys.stdout
    if inv.get("json"):
        from gpu_launch.hardware import snapshot

        out.write(snapshot.dump(machine))
        if not inv.get("quiet"):
            for warning in machine.warnings:  # the JSON has no place for them; stdout stays pure JSON
                print(f"gpulaunch: warning: {warning}", file=sys.stderr)
        return 0
    rich_ok = render.use_color(out)
    if inv.command == "ls":
        reserved = _reserved(inv, machine)
        if rich_ok:
            render.ls_rich(machine, out, reserved)
        else:
            out.write(render.ls_plain(machine, reserved))
        from gpu_launch.share import reservations

        note = reservations.shared_note(reservations.lock_dir_path(inv.get("lock_dir"), os.environ))
        if note:  # only where it tells the user something (`config` always names the lock dir)
            out.write(f"{note}\n")
        _ls_parent_note(machine, out)
    if topo:
        if inv.command == "ls":
            out.write("\n")
        if rich_ok:
            render.topo_rich(machine, out)
        else:
            out.write(render.topo_plain(machine))
    return 0


def _ls_parent_note(machine: Machine, out) -> None:  # out: IO[str]
    """Under an inherited CUDA_VISIBLE_DEVICES/NVIDIA_VISIBLE_DEVICES, say which GPUs a launch may use."""
    from gpu_launch.choose import visibility

    header = visibility.resolve(machine, os.environ).header()
    if header:
        out.write(f"{header}\n")


def _reserved(inv: Invocation, machine: Machine) -> dict[str, str]:
    """Who holds which GPU, for `ls`; a lock dir that cannot be read is a warning, not an error."""
    from gpu_launch.share import reservations

    try:
        held, unusable = reservations.scan(reservations.lock_dir_path(inv.get("lock_dir"), os.environ),
                                           [u for g in machine.gpus for u in (g.uuid, *(m.uuid for m in g.mig_devices))])
    except GpuLaunchError as exc:
        print(f"gpulaunch: warning: reservations not shown: {exc.message}", file=sys.stderr)
        return {}
    from gpu_launch.hardware.model import Device

    labels = {u: Device(g, m).label for g in machine.gpus for u, m in ((g.uuid, None), *((m.uuid, m) for m in g.mig_devices))}
    for uuid, bad in unusable.items():
        print(f"gpulaunch: warning: {labels.get(uuid, uuid)} is {bad.describe()} (hint: {bad.hint})", file=sys.stderr)
    return {**{uuid: holder.describe() for uuid, holder in held.items()},
            **{uuid: bad.short() for uuid, bad in unusable.items()}}
