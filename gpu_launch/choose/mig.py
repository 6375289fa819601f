"""``--mig``: let ``--auto``/``--fit`` choose MIG devices instead of whole GPUs. Pure.

CUDA enumerates only one MIG device per process ("Only single MIG instance enumeration is
supported", CUDA Programming Guide, CUDA_VISIBLE_DEVICES), so a job gets exactly one MIG device:
``--auto 1 --mig`` (or ``--mig`` alone) is the only count that makes sense, and ``--auto N --mig``
with N > 1 is a usage error that says to start one process per MIG device instead. The child's
``CUDA_VISIBLE_DEVICES`` is the MIG UUID, the only form CUDA accepts for MIG.

Ranking: the MIG device with the most free memory wins (ties: lower GPU index, then lower GPU
instance id, so the result is deterministic). ``--fit SIZE --mig`` picks the *smallest* MIG device
that holds SIZE, leaving the large slices to jobs that need them.
"""

from __future__ import annotations

from gpu_launch.errors import NotEnoughGpus, UsageError
from gpu_launch.hardware.model import Device, Machine
from gpu_launch.choose.select import (IDLE_MAX_USED, Constraints, Selection, grouped, held_reason, min_free_failure,
                                      min_total_failure)
from gpu_launch.base.units import Size, fmt_mib

__all__ = ["candidates", "choose_mig"]


def _reason(device: Device, c: Constraints) -> str | None:
    """Why this MIG device may not be used, or None."""
    gpu, mig = device.gpu, device.mig
    assert mig is not None
    if not gpu.available:
        return f"its GPU is unavailable ({gpu.error or 'NVML could not read it'})"
    if gpu.uuid in c.exclude or mig.uuid in c.exclude:
        return f"excluded by {c.exclude_source}"
    for uuid in (mig.uuid, gpu.uuid):
        if uuid in c.reserved:
            return held_reason(c.reserved[uuid])
    small = min_total_failure(mig.memory_total_mib, c.min_total)
    if small is not None:
        return small
    if mig.memory_free_mib is None:
        return "free memory unknown"
    short = min_free_failure(mig.memory_free_mib, mig.memory_total_mib, c.min_free)
    if short is not None:
        return short
    if c.idle and mig.memory_total_mib and (mig.memory_used_mib or 0) > IDLE_MAX_USED * mig.memory_total_mib:
        return "not idle (--idle)"
    return None


def candidates(machine: Machine, constraints: Constraints) -> tuple[list[Device], list[tuple[Device, str]]]:
    """Eligible MIG devices, best first, and the excluded ones with their reason."""
    ok: list[Device] = []
    excluded: list[tuple[Device, str]] = []
    for gpu in machine.gpus:
        for mig in gpu.mig_devices:
            device = Device(gpu, mig)
            reason = _reason(device, constraints)
            if reason is None:
                ok.append(device)
            else:
                excluded.append((device, reason))
    # most free memory first; then lower GPU index and GPU instance id (deterministic)
    ok.sort(key=lambda d: (-(d.memory_free_mib or 0), d.gpu.index, d.mig.gpu_instance_id or 0 if d.mig else 0))
    return ok, excluded


def choose_mig(machine: Machine, n: int, constraints: Constraints, fit: Size | None = None) -> Selection:
    """One MIG device for the job (``n`` must be 1; see the module docstring)."""
    if n != 1:
        raise UsageError(
            f"--mig: --auto {n} asks for {n} MIG devices, but CUDA enumerates only one MIG device per process",
            hint="use --auto 1 --mig and start one process per MIG device (e.g. one gpulaunch per worker)",
        )
    if constraints.max_util is not None:
        raise UsageError("--max-util cannot be checked for MIG devices (NVML reports utilisation per GPU)",
                         hint="leave out --max-util with --mig")
    if not any(g.mig_devices for g in machine.gpus):
        empty = [g for g in machine.gpus if g.in_mig_mode]
        if empty:  # MIG mode switched on, but nobody created instances yet
            labels = ", ".join(g.label for g in empty)
            first = empty[0].index
            raise NotEnoughGpus(f"--mig: {labels} {'is' if len(empty) == 1 else 'are'} in MIG mode but "
                                f"{'has' if len(empty) == 1 else 'have'} no MIG devices to choose",
                                hint=f"create them (as root): nvidia-smi mig -i {first} -cgi <profile> -C "
                                     f"(profiles: nvidia-smi mig -i {first} -lgip)")
        unread = [g for g in machine.gpus if not g.available]
        if unread:  # a GPU NVML could not read may well be the MIG one
            raise NotEnoughGpus("--mig: no readable GPU is in MIG mode ("
                                + "; ".join(f"{g.label}: {g.error or 'unavailable'}" for g in unread[:3]) + ")",
                                hint="`gpulaunch ls` shows the GPUs' state")
        raise NotEnoughGpus("--mig: no GPU here is in MIG mode, so there are no MIG devices to choose",
                            hint="leave out --mig to choose whole GPUs")
    ok, excluded = candidates(machine, constraints)
    if fit is not None:
        if fit.mib is None:
            raise UsageError("--fit: give an absolute size like 8GiB, not a percentage")
        fitting = [d for d in ok if (d.memory_free_mib or 0) >= fit.mib]
        # smallest slice that holds it first: the large slices stay for jobs that need them
        fitting.sort(key=lambda d: (d.memory_free_mib or 0, d.gpu.index, d.mig.gpu_instance_id or 0 if d.mig else 0))
        if not fitting:
            most = max((d.memory_free_mib or 0 for d in ok), default=0)
            raise NotEnoughGpus(f"--fit {fit} --mig: no eligible MIG device has that much free (the most is {fmt_mib(most)})",
                                hint="lower the size, or leave out --mig to use whole GPUs")
        ok = fitting
    if not ok:
        why = grouped((d.label, r) for d, r in excluded)
        raise NotEnoughGpus(f"--mig: no MIG device is eligible ({why})", hint="relax the constraints")
    return Selection((ok[0],))
