"""The helper the completion scripts run while the user presses TAB: ``gpulaunch __complete gpus ...``
and ``gpulaunch __complete jobs all|active``.

``gpus`` reads the machine the line names (``--snapshot``, ``GPULAUNCH_SNAPSHOT``, the config file, else
NVML; with no driver at all, the example machine ``ls`` shows then) and prints the GPU indices; ``jobs`` prints the user's job ids (``active``: only those waiting or
running, for ``cancel``), each with a tab and what it is (``running: python train.py``), which zsh and
fish show beside it. It prints nothing at all on any failure and gives up after
:data:`HELPER_TIMEOUT_S`, so that a completion can never hang or clutter the user's shell.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping, Sequence

from gpu_launch.errors import NvmlUnavailable, UsageError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from gpu_launch.hardware.model import Machine

__all__ = ["HELPER_TIMEOUT_S", "helper", "gpu_words", "job_words"]

HELPER_TIMEOUT_S = 2.0


def _snapshot_on_line(words: Sequence[str], environ: Mapping[str, str]) -> str | None:
    """The last ``--snapshot`` before ``--`` on the line being completed, else the environment's."""
    found = None
    for i, word in enumerate(words):
        if word == "--":
            break
        if word == "--snapshot" and i + 1 < len(words):
            found = words[i + 1] if words[i + 1] != "=" or i + 2 >= len(words) else words[i + 2]
        elif word.startswith("--snapshot="):
            found = word.split("=", 1)[1]
    if found:
        return os.path.expanduser(found)
    return environ.get("GPULAUNCH_SNAPSHOT") or None


def gpu_words(words: Sequence[str], environ: Mapping[str, str], taken: str | None = None) -> list[str]:
    """What ``--gpus`` can be on this machine: each GPU index, then ``all``.

    ``taken`` is the list typed so far (``3,1-2`` while completing ``3,1-2,``): its GPUs are left
    out, and so is ``all``, which cannot follow a comma.
    """
    from gpu_launch.hardware.read import Needs, read_machine

    snap = _snapshot_on_line(words, environ)
    if snap is None:
        from gpu_launch.options import config

        setting = config.layered(environ).get("snapshot")
        snap = setting.value if setting else None
    needs = Needs(processes=False, topology=False, mig=False)
    try:
        machine = read_machine(snap, needs)
    except NvmlUnavailable as exc:
        if snap is not None or not exc.no_driver:
            raise
        from gpu_launch.placing.pick import EXAMPLE

        machine = read_machine(EXAMPLE, needs)  # no driver: the example machine, which `ls` shows then
    indices = sorted(g.index for g in machine.gpus)
    if taken is None:
        return [*map(str, indices), "all"]
    used = _taken_indices(taken, machine)
    return [str(i) for i in indices if i not in used]


def _taken_indices(text: str, machine: Machine) -> set[int]:
    """The GPU indices named in a partial ``--gpus`` list; items that do not parse or match are skipped."""
    from gpu_launch.choose import spec

    used: set[int] = set()
    for word in text.split(","):
        try:
            used.update(d.gpu.index for d in spec.resolve(spec.parse(word), machine) if d.mig is None)
        except UsageError:
            continue
    return used


def job_words(which: str, environ: Mapping[str, str]) -> list[str]:
    """The user's jobs, oldest first, as ``ID<TAB>STATE: COMMAND`` (``active``: only waiting or running ones)."""
    from gpu_launch.jobs import status
    from gpu_launch.jobs.store import JobDir
    from gpu_launch.base.text import printable

    jobs = JobDir.open(environ)
    if jobs is None:
        return []
    found = status.statuses(jobs, jobs.all()[0])
    return [f"{s.job.id}\t{s.state}: {printable(' '.join(s.job.argv))[:60]}" for s in found
            if which != "active" or not s.over]


def helper(argv: Sequence[str], environ: Mapping[str, str]) -> int:
    """``gpulaunch __complete gpus [--taken=LIST] WORDS...`` or ``__complete jobs all|active``: candidates one a
    line; silent and 0 on any failure.

    The work runs in a daemon thread so that a hung NVML call cannot hang the user's shell: after
    :data:`HELPER_TIMEOUT_S` we print nothing and leave without waiting for it.
    """
    if not argv or argv[0] not in ("gpus", "jobs"):
        return 0
    words = list(argv[1:])
    taken = words.pop(0).partition("=")[2] if words and words[0].startswith("--taken=") else None
    result: list[str] = []

    def work() -> None:
        try:
            result.extend(gpu_words(words, environ, taken) if argv[0] == "gpus" else
                          job_words(words[0] if words else "all", environ))
        except BaseException:  # noqa: BLE001 - a completion helper must never print a traceback
            result.clear()

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    thread.join(HELPER_TIMEOUT_S)
    if thread.is_alive():
        os._exit(0)  # a stuck C call in the thread would block interpreter shutdown
    if result:
        print("\n".join(result))
    return 0
