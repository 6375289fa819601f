"""Pick and hold GPUs from Python — a script or a notebook — before CUDA starts.

::

    import gpu_launch

    gpus = gpu_launch.use(2, min_free="20GiB")      # choose, reserve, set the environment
    import torch                                     # sees exactly those GPUs, as cuda:0 and cuda:1

    devs = gpu_launch.select(2, idle=True)           # choose only: no reservation, no environment change
    m = gpu_launch.machine()                         # the machine model (NVML, or snapshot=...)
    with gpu_launch.reserve(gpus="4-7", wait="30m") as r:   # hold for a block; r.env for subprocesses
        subprocess.run(cmd, env={**os.environ, **r.env})

Every function takes the options of a launch under their Python names (``n`` is ``--auto``) and
means what the command line means: the values go through the command line's own converters
(``"20GiB"``, ``"30m"``, ``"4-7"``), defaults come from ``GPULAUNCH_*`` variables and the config
file as for ``gpulaunch``, and the choice is made by the same code
(:mod:`gpu_launch.share.pick`), within what an inherited ``CUDA_VISIBLE_DEVICES`` allows. Python
values are accepted too: an int or a list of ints for ``gpus``/``exclude``, bytes (int) for
sizes, seconds (int/float, ``datetime.timedelta``) or ``True`` (for ever) for ``wait``. A flag
left at ``None`` takes the configured default (off unless ``GPULAUNCH_IDLE=1`` and so on).

Every reservation is its own (a second ``reserve()``, one in another thread, one after ``use()``
never gets a GPU this process holds); ``use()``'s GPUs are this process's and its children's, but
never narrow this process's own later calls (see :func:`use`); ``reserve()``'s stay in this
process unless ``inherit=True``; a forked worker holds none of them.

Errors are the command line's, raised as they are: :class:`~gpu_launch.errors.GpuLaunchError` and
its subclasses (``NotEnoughGpus``, ``Reserved``, ``WaitTimeout``, ``NoDriver``, ``UsageError``,
``CudaAlreadyInitialized``, ...), each with ``message``, ``hint`` and the CLI's ``exit_code``.
Ctrl-C (a kernel interrupt) while waiting raises ``KeyboardInterrupt`` with nothing held.
"""

from __future__ import annotations

import os
import sys
import threading
import weakref
from dataclasses import dataclass

from gpu_launch.errors import CudaAlreadyInitialized, UsageError
from gpu_launch.units import MAX_GPUS, MAX_MIB, MAX_SECONDS, bounded, shown
# The variables use() sets in os.environ are those a launch sets for its command.
from gpu_launch.run.environment import SET_VARIABLES

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from datetime import timedelta
    from types import TracebackType
    from typing import Any, TypeAlias

    from gpu_launch.fit.plan import Plan
    from gpu_launch.hardware.model import Device as ModelDevice
    from gpu_launch.hardware.model import Machine
    from gpu_launch.options.args import Invocation
    from gpu_launch.share.acquire import Acquired
    from gpu_launch.share.reservations import Reservation as Locks
    from gpu_launch.units import Size

    #: GPUs as ``gpulaunch ls`` numbers them: ``"4-7"``, ``"0,2"``, ``"all"``, UUIDs, ``3``, ``[3, 1]``.
    GpuSpec: TypeAlias = "str | int | Sequence[int | str]"
    #: Memory: ``"20GiB"``, ``"512MiB"``, ``"20GB"``, ``"80%"``, or bytes as an int.
    SizeSpec: TypeAlias = "str | int | Size"
    #: ``None``/``False``: do not wait; ``True``: for ever; seconds; ``"30m"``; a timedelta.
    WaitSpec: TypeAlias = "bool | float | str | timedelta | None"
    PathSpec: TypeAlias = "str | os.PathLike[str]"

__all__ = ["Device", "Reservation", "use", "select", "reserve", "release", "machine", "held", "cuda_started", "plan"]

_MIB = 1024 * 1024


@dataclass(frozen=True)
class Device:
    """A device you were given, in CUDA order: ``devices[i]`` is ``cuda:i`` once the variables apply.

    ``index`` is the physical number (``gpulaunch ls``, ``nvidia-smi``); ``uuid`` names the GPU,
    or the MIG device, in every view; memory is in MiB as read when it was chosen (None: unknown).
    """

    cuda: str  # "cuda:0": what torch.device() and friends take
    index: int
    uuid: str
    name: str
    pci_bus_id: str | None
    memory_total_mib: int | None
    memory_free_mib: int | None
    mig_profile: str | None = None  # "1g.10gb" for a MIG device, None for a whole GPU

    def __str__(self) -> str:
        what = f"GPU {self.index}" + (f" MIG {self.mig_profile or self.uuid}" if self.mig_profile or
                                      self.uuid.startswith("MIG-") else "")
        return f"{self.cuda} → {what}  {self.name}"


def _devices(devices: Sequence[ModelDevice]) -> tuple[Device, ...]:
    return tuple(Device(f"cuda:{i}", d.gpu.index, d.uuid, d.gpu.name, d.gpu.pci_bus_id, d.memory_total_mib,
                        d.memory_free_mib, d.mig.profile if d.mig is not None else None)
                 for i, d in enumerate(devices))


# --- is CUDA already running here? ----------------------------------------------------------------

def cuda_started() -> str | None:
    """Why CUDA counts as initialised in this process (None: it does not). Imports nothing new.

    CUDA reads ``CUDA_VISIBLE_DEVICES`` when it initialises, so after that changing the variable
    silently does nothing. Two signs: the driver library ``libcuda.so`` is mapped into this
    process (``/proc/self/maps``), or an already imported torch says ``torch.cuda.is_initialized()``.
    A torch that was merely imported is fine: it starts CUDA at its first use.
    """
    try:
        with open("/proc/self/maps", "rb") as maps:
            for line in maps:
                if b"libcuda.so" in line:
                    path = line.split(maxsplit=5)[-1].strip().decode("utf-8", "replace")
                    return f"the CUDA driver is loaded ({path})"
    except OSError:
        pass  # no /proc (not Linux): only the torch check can tell
    torch = sys.modules.get("torch")
    is_initialized = getattr(getattr(torch, "cuda", None), "is_initialized", None)
    if callable(is_initialized):
        try:
            if is_initialized():
                return "torch.cuda.is_initialized() is True"
        except Exception:  # a half-imported or odd torch: no sign either way
            pass
    return None


def _refuse_if_cuda_started(what: str) -> None:
    why = cuda_started()
    if why is not None:
        raise CudaAlreadyInitialized(
            f"{what}: CUDA is already initialised in this process: {why}; CUDA_VISIBLE_DEVICES set now "
            "would have no effect",
            hint="restart the kernel (or the Python process) and call gpu_launch.use() first, before anything "
                 "touches CUDA; or start the work in a new process with gpu_launch.reserve() and r.env")


# --- keyword arguments -> an invocation, through the command line's converters ---------------------

#: option dest -> the keyword argument's name, where they differ
_NAMES = {"auto": "n"}


def _pythonic(exc: UsageError, name: str) -> UsageError:
    """The converter's hint spells a flag (``e.g. n 2``); here it is a keyword argument (``n=2``)."""
    if exc.hint:
        exc.hint = exc.hint.replace(f"{name} ", f"{name}=")
    return exc


def _convert(dest: str, name: str, value: object) -> object:
    """The option value for ``value``: strings as the command line reads them, Python values as documented."""
    from gpu_launch.options.args import OPTIONS

    opt = next(o for o in OPTIONS if o.dest == dest)
    text: str
    if not opt.takes_value:  # a flag: idle, mig, uuid, quiet ("no" would be a true string)
        if not isinstance(value, bool):
            raise UsageError(f"{name}: expected True or False, got {shown(value)}", hint=f"e.g. {name}=True")
        return value
    if isinstance(value, str):
        text = value
    elif dest in ("snapshot", "lock_dir") and isinstance(value, os.PathLike):
        return os.fspath(value)
    elif dest == "wait":
        return _wait_seconds(value, name)
    elif isinstance(value, bool):
        raise UsageError(f"{name}: expected {_WANTED.get(dest, 'a string')}, got {value!r}")
    elif dest == "fit" and isinstance(value, os.PathLike):  # model=Path(...): a model, as --fit ./model.gguf
        return os.fspath(value)
    elif dest in ("fit", "min_free", "reserve"):
        return _size(value, name, allow_percent=dest == "min_free")
    elif dest in ("ctx", "parallel") and isinstance(value, int):
        text = str(value)
    elif dest in ("gpus", "exclude") and isinstance(value, int):
        text = str(bounded(value, name, 0, MAX_GPUS))
    elif dest in ("gpus", "exclude") and isinstance(value, (list, tuple, range)):
        if not all(isinstance(v, (int, str)) and not isinstance(v, bool) for v in value):
            raise UsageError(f"{name}: expected GPU indices or UUIDs, got {shown(value)}", hint=f"e.g. {name}=[0, 1]")
        text = ",".join(str(bounded(v, name, 0, MAX_GPUS) if isinstance(v, int) else v) for v in value)
    elif dest in ("auto", "max_util") and isinstance(value, int):
        text = str(bounded(value, name, 0, MAX_GPUS if dest == "auto" else 100))
    else:
        raise UsageError(f"{name}: expected {_WANTED.get(dest, 'a string')}, got {type(value).__name__}",
                         hint=f"e.g. {name}={_EXAMPLES.get(dest, repr('...'))}")
    if opt.convert is None:
        return text
    try:
        return opt.convert(text, name)
    except UsageError as exc:
        raise _pythonic(exc, name) from None


_WANTED = {"auto": "a whole number", "gpus": "GPU indices or UUIDs", "exclude": "GPU indices or UUIDs",
           "fit": "a size", "min_free": "a size", "max_util": "a percentage", "snapshot": "a file or example name",
           "lock_dir": "a directory"}
_EXAMPLES = {"auto": "2", "gpus": '"4-7"', "exclude": "[0]", "fit": '"60GiB"', "min_free": '"20GiB"',
             "max_util": "30", "snapshot": '"dgx-h100"', "lock_dir": '"/tmp/gpulaunch-locks"'}


def _size(value: object, name: str, allow_percent: bool) -> Size:
    from gpu_launch.units import Size

    if isinstance(value, Size):
        if value.percent is not None and not allow_percent:
            raise UsageError(f"{name}: a percentage makes no sense here", hint=f'write it like {name}="60GiB"')
        return value
    if not isinstance(value, (int, float)):
        raise UsageError(f"{name}: {shown(value)} is not a size", hint=f'a number of bytes, or text: {name}="20GiB"')
    return Size(mib=bounded(value, name, 0, MAX_MIB * _MIB, limits="at most 1 PiB") / _MIB)


def _wait_seconds(value: object, name: str) -> float | None:
    from datetime import timedelta

    if value is None or value is False:
        return None
    if value is True:
        return float("inf")
    if isinstance(value, timedelta):
        value = value.total_seconds()
    if isinstance(value, str):
        from gpu_launch.units import parse_duration

        try:
            return parse_duration(value, name)
        except UsageError as exc:
            raise _pythonic(exc, name) from None
    if isinstance(value, (int, float)):
        return float("inf") if value == float("inf") else float(
            bounded(value, name, 0, MAX_SECONDS, limits="at most 366 days", hint="wait=True waits for ever"))
    raise UsageError(f"{name}: {shown(value)} is not a duration",
                     hint=f'seconds, True (for ever), or text: {name}="30m"')


def _invocation(command: str, given: dict[str, object]) -> Invocation:
    """The invocation the keyword arguments ``given`` (by option dest; None: not given) make, defaults filled in."""
    from gpu_launch.options import args, config

    options: dict[str, Any] = {}
    names = {dest: _NAMES.get(dest, dest) for dest in given}  # for the messages: n, not --auto
    for dest, value in given.items():
        if value is None:
            continue
        converted = _convert(dest, names[dest], value)
        if converted is not None or value is False:  # wait=False: no wait, whatever the defaults say
            options[dest] = converted
    inv = args.invocation(command, options, names)
    return config.apply(inv, os.environ)  # as for gpulaunch: GPULAUNCH_* variables, then the config file


# --- choosing and holding --------------------------------------------------------------------------

class _Mine:
    """What this process's API holds, for every thread: never this process's allotment, always taken.

    ``keys`` are the (uuid, depth) locks held (a live container :func:`_choose` hands to the choice,
    so a reservation another thread takes meanwhile counts too); ``forked_from``, the processes this
    one was forked from (a forked worker's ``use()`` must not land on its parent's GPUs). A key is
    added *before* its descriptor may become inheritable and removed only *after* it is closed, so no
    thread ever sees one of them as an inherited lock (share/nesting.py, ``lineage_holds``).
    """

    def __init__(self) -> None:
        self.guard = threading.Lock()
        self.keys: set[tuple[str, int]] = set()
        self.locks: weakref.WeakSet[Locks] = weakref.WeakSet()
        self.forked_from: set[int] = set()

    def add(self, locks: Locks) -> None:
        with self.guard:
            self.keys.update(locks.keys)
            self.locks.add(locks)

    def give_back(self, locks: Locks) -> None:
        keys = locks.keys
        locks.release()
        with self.guard:
            self.keys.difference_update(keys)
            self.locks.discard(locks)

    def after_fork_in_child(self) -> None:
        """A forked copy of this process holds none of what the API held: close its copies of the
        descriptors (so the parent's ``release()`` frees the GPUs), and remember the parent, whose
        reservations are its own."""
        self.guard = threading.Lock()  # another thread may have held it at the fork
        self.forked_from.add(os.getppid())
        for locks in list(self.locks):
            for fd in locks.fds.values():
                try:
                    os.close(fd)
                except OSError:
                    pass
            locks.fds.clear()
        self.keys.clear()
        self.locks = weakref.WeakSet()


_MINE = _Mine()


def _after_fork_in_child() -> None:
    _MINE.after_fork_in_child()
    _HELD.guard = threading.RLock()  # another thread may have held it at the fork


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _parent_environ() -> dict[str, str]:
    """The environment this process was given: ``os.environ`` with the variables :func:`use` set put
    back as they were. So this process's own ``use()`` never narrows its later calls as a parent's
    ``CUDA_VISIBLE_DEVICES`` would: what ``use()`` holds is simply taken, as another job's would be."""
    environ = dict(os.environ)
    for name, value in (_HELD.saved or {}).items():
        if value is None:
            environ.pop(name, None)
        else:
            environ[name] = value
    return environ


def _choose(inv: Invocation, take: bool, choose_only: bool = False,
            inherit: bool = False) -> tuple[Acquired, dict[str, str]]:
    """Choose (and with ``take`` lock) as a launch does; print what a launch prints. Returns what was
    acquired and the variables to set. ``inherit``: the lock descriptors are handed down to programs
    this process starts (``use()``; ``reserve(inherit=True)``)."""
    from gpu_launch.share import acquire, pick

    environ = _parent_environ()
    locking = acquire.Locking.of(inv.get("lock_dir"), environ, take=take and not inv.get("no_lock"),
                                 snapshot=pick.snapshot_source(inv))
    from gpu_launch.records import replace

    locking = replace(locking, mine=_MINE.keys, skip_pids=_MINE.forked_from)
    _machine, vis, got, env = pick.choose(inv, locking, wait=inv.get("wait"), fallback=inv.get("fallback"),
                                          choose_only=choose_only, environ=environ)
    try:
        if got.reservation is not None:
            _MINE.add(got.reservation)  # before anything can make its descriptors inheritable
        if got.fallback_reason is not None and not inv.get("quiet"):
            print(f"gpulaunch: {got.fallback_reason}", file=sys.stderr)
            print("gpulaunch: fallback cpu: no GPU visible (CUDA_VISIBLE_DEVICES= empty)", file=sys.stderr)
        if vis is not None:
            pick.tell(inv, vis, got.selection, env)
        if got.reservation is not None:
            # `gpulaunch ls` names this process (a notebook's kernel) as the holder.
            got.reservation.record(os.getpid(), _command_line())
            if inherit:
                # Kept across exec, as a launch's are: a program started from here holds them too, and a
                # gpulaunch started from here shares these GPUs out as its job's (share/nesting.py).
                got.reservation.make_inheritable()
    except BaseException:
        if got.reservation is not None:
            _MINE.give_back(got.reservation)
        raise
    return got, {name: env[name] for name in SET_VARIABLES}


def _command_line() -> list[str]:
    return list(getattr(sys, "orig_argv", None) or [sys.executable, *sys.argv])


class _Held:
    """What ``use()`` holds: the locks, and the variables as they were before it set them."""

    def __init__(self) -> None:
        self.locks: Locks | None = None
        self.devices: tuple[Device, ...] = ()
        self.saved: dict[str, str | None] | None = None  # None: use() has not changed os.environ
        self.guard = threading.RLock()


_HELD = _Held()


def use(n: int | None = None, *, gpus: GpuSpec | None = None, fit: SizeSpec | None = None,
        min_free: SizeSpec | None = None, max_util: int | str | None = None, idle: bool | None = None,
        exclude: GpuSpec | None = None, mig: bool | None = None, uuid: bool | None = None,
        wait: WaitSpec = None, snapshot: PathSpec | None = None, lock_dir: PathSpec | None = None,
        quiet: bool | None = None, model: PathSpec | None = None, ctx: int | None = None) -> tuple[Device, ...]:
    """Choose GPUs, reserve them for the life of this process, and point CUDA at them.

    Sets ``CUDA_VISIBLE_DEVICES``, ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` and ``GPULAUNCH_GPUS`` in
    ``os.environ`` and prints the ``cuda:i → GPU`` table on stderr (unless ``quiet``). Call it
    before anything starts CUDA: it raises :class:`CudaAlreadyInitialized` otherwise, changing
    nothing. The reservation (a ``flock`` on each GPU's lock file, naming this process) lasts until
    the process ends — a kernel restart ends it — or :func:`release`. A second call releases the
    first choice, and restores the variables, before it chooses again.

    The GPUs are this process's and its children's: programs it starts inherit the locks, and a
    ``gpulaunch`` started from here shares them out among its jobs, one each (its allotment). They
    are not an allotment for this process's own later calls: :func:`select` and :func:`reserve`
    choose as if ``use()`` had not set ``CUDA_VISIBLE_DEVICES``, and skip these GPUs as taken. A
    forked copy of the process (a ``multiprocessing`` worker) holds none of them: its own ``use()``
    gets GPUs of its own.

    ``n`` GPUs (default 1), or ``gpus=`` by number, or ``fit=`` the fewest that hold a size; the
    constraints and ``wait=`` as for ``gpulaunch``. ``model=`` (a model file or folder, or a cached
    Hugging Face id) chooses the fewest GPUs that hold that model at ``ctx`` tokens (default: its
    own context), as ``gpulaunch --fit MODEL`` does; :func:`plan` shows the numbers. Returns the
    devices in CUDA order.
    """
    _refuse_if_cuda_started("use()")
    fit = _fit_or_model(fit, model)
    inv = _invocation("run", {"auto": n, "gpus": gpus, "fit": fit, "ctx": ctx, "min_free": min_free, "max_util": max_util,
                              "idle": idle, "exclude": exclude, "mig": mig, "uuid": uuid, "wait": wait,
                              "snapshot": snapshot, "lock_dir": lock_dir, "quiet": quiet})
    with _HELD.guard:  # one process, one use(): threads calling it take turns
        release()  # the first choice goes, and the parent's variables come back, before choosing again
        saved = {name: os.environ.get(name) for name in SET_VARIABLES}
        got, variables = _choose(inv, take=True, inherit=True)
        _HELD.locks, _HELD.devices, _HELD.saved = got.reservation, _devices(got.selection.devices), saved
        os.environ.update(variables)
        return _HELD.devices


def release() -> None:
    """Give back what :func:`use` holds and restore the variables it set. Nothing held: nothing to do."""
    with _HELD.guard:
        _release_held()


def _release_held() -> None:
    if _HELD.locks is not None:
        _MINE.give_back(_HELD.locks)
        _HELD.locks = None
    if _HELD.saved is not None:
        for name, value in _HELD.saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        _HELD.saved = None
    _HELD.devices = ()


def held() -> tuple[Device, ...]:
    """The devices :func:`use` holds now (empty before it or after :func:`release`)."""
    return _HELD.devices


def select(n: int | None = None, *, gpus: GpuSpec | None = None, fit: SizeSpec | None = None,
           min_free: SizeSpec | None = None, max_util: int | str | None = None, idle: bool | None = None,
           exclude: GpuSpec | None = None, mig: bool | None = None, uuid: bool | None = None,
           wait: WaitSpec = None, snapshot: PathSpec | None = None, lock_dir: PathSpec | None = None,
           quiet: bool | None = None) -> tuple[Device, ...]:
    """Choose only, as ``gpulaunch env`` does: no reservation, no change to ``os.environ``.

    GPUs that other gpulaunch jobs reserved are skipped (``gpus=`` on one only warns), and so are
    those this process holds (:func:`use`, :func:`reserve`): after ``use(2)``, ``select(2)`` gives two
    other GPUs, chosen on the whole machine as the parent allows it. Nothing keeps the chosen ones for you. ``wait=`` waits until the request can be met. Prints the mapping
    table on stderr unless ``quiet``.
    """
    inv = _invocation("env", {"auto": n, "gpus": gpus, "fit": fit, "min_free": min_free, "max_util": max_util,
                              "idle": idle, "exclude": exclude, "mig": mig, "uuid": uuid, "snapshot": snapshot,
                              "lock_dir": lock_dir, "quiet": quiet})
    seconds = _wait_seconds(wait, "wait")  # `env` takes no --wait (nor its default): only this argument
    if seconds is not None:
        from gpu_launch.records import replace

        inv = replace(inv, options={**inv.options, "wait": seconds})
    got, _variables = _choose(inv, take=False, choose_only=True)
    return _devices(got.selection.devices)


class Reservation:
    """GPUs held for a block (:func:`reserve`): ``devices``, and ``env``, the variables for a subprocess.

    ``subprocess.run(cmd, env={**os.environ, **r.env})`` runs ``cmd`` on them. Unless it was made with
    ``inherit=True``, the lock descriptors stay in this process (no child inherits them), so the
    reservation ends with the block, at :meth:`release`, or when this process ends, whichever comes
    first, whatever children still run.
    """

    def __init__(self, devices: tuple[Device, ...], env: dict[str, str], locks: Locks | None) -> None:
        self.devices = devices
        self.env = env
        self._locks = locks

    @property
    def held(self) -> bool:
        return self._locks is not None

    def release(self) -> None:
        """Give the GPUs back (again: nothing happens)."""
        if self._locks is not None:
            _MINE.give_back(self._locks)
            self._locks = None

    def __enter__(self) -> Reservation:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.release()

    def __repr__(self) -> str:
        state = "held" if self.held else "released"
        gpus = ", ".join(f"GPU {d.index}" for d in self.devices) or "no GPU"
        return f"<gpu_launch.Reservation {gpus} ({state}) CUDA_VISIBLE_DEVICES={self.env['CUDA_VISIBLE_DEVICES']}>"


def reserve(n: int | None = None, *, gpus: GpuSpec | None = None, fit: SizeSpec | None = None,
            min_free: SizeSpec | None = None, max_util: int | str | None = None, idle: bool | None = None,
            exclude: GpuSpec | None = None, mig: bool | None = None, uuid: bool | None = None,
            wait: WaitSpec = None, snapshot: PathSpec | None = None, lock_dir: PathSpec | None = None,
            quiet: bool | None = None, model: PathSpec | None = None, ctx: int | None = None,
            inherit: bool = False) -> Reservation:
    """Choose and reserve GPUs for other processes, leaving this one's environment alone.

    Use it as a context manager (``with gpu_launch.reserve(2) as r:``), or call ``r.release()``.
    Options as for :func:`use`. This process's CUDA may already be running: the variables are for
    the subprocesses you start with ``r.env``. ``model=``/``ctx=`` as for :func:`use`.

    Every reservation is its own: a second ``reserve()`` (or one after :func:`use`, or in another
    thread) never gets a GPU this process already holds, and naming one with ``gpus=`` raises
    :class:`~gpu_launch.errors.ReservationConflict`. The locks are *not* handed down to the programs
    this process starts, so ``r.release()`` frees the GPUs at once. With ``inherit=True`` they are:
    programs started from here (``os.system``, ``subprocess`` with ``close_fds=False``) hold them too,
    so the GPUs stay reserved while such a program runs, and a ``gpulaunch`` started from here shares
    these GPUs out among its jobs (the reservation is its allotment), as inside a launch.
    """
    if not isinstance(inherit, bool):
        raise UsageError(f"inherit: expected True or False, got {inherit!r}", hint="e.g. inherit=True")
    fit = _fit_or_model(fit, model)
    inv = _invocation("run", {"auto": n, "gpus": gpus, "fit": fit, "ctx": ctx, "min_free": min_free, "max_util": max_util,
                              "idle": idle, "exclude": exclude, "mig": mig, "uuid": uuid, "wait": wait,
                              "snapshot": snapshot, "lock_dir": lock_dir, "quiet": quiet})
    got, variables = _choose(inv, take=True, inherit=inherit)
    return Reservation(_devices(got.selection.devices), variables, got.reservation)


def _fit_or_model(fit: SizeSpec | None, model: PathSpec | None) -> SizeSpec | None:
    """``model=`` is ``--fit MODEL``: one of the two."""
    if model is None:
        return fit
    if fit is not None:
        raise UsageError("fit= and model= cannot be used together", hint="fit= a size, or model= a model")
    if isinstance(model, str) and model[:1].isdigit():
        raise UsageError(f"model: {model!r} looks like a size", hint='for a size write fit="60GiB"')
    return os.fspath(model) if isinstance(model, os.PathLike) else model


def plan(model: PathSpec | None = None, *, command: Sequence[str] | None = None, ctx: int | None = None,
         parallel: int | None = None, kv_type: str | None = None, engine: str | None = None,
         reserve: SizeSpec | None = None, gpus: GpuSpec | None = None, exclude: GpuSpec | None = None,
         min_free: SizeSpec | None = None, max_util: int | str | None = None, idle: bool | None = None,
         snapshot: PathSpec | None = None, lock_dir: PathSpec | None = None) -> Plan:
    """How ``model`` would be laid out, as ``gpulaunch plan`` shows it: nothing reserved, nothing set.

    Name the model (a GGUF file, a safetensors or MLC-LLM folder, a cached Hugging Face id), or give
    the engine's ``command`` (``["vllm", "serve", "./M", "--max-model-len", "32768"]``) to read the
    model, context and KV type from it. On ``gpus=`` as given, else on the GPUs
    ``use(model=...)`` would choose. The result's ``placeholders()`` are the values ``{tp}``,
    ``{gpu_layers}``... would get; ``placement.per_gpu`` the weights, KV and allowance per GPU.
    Raises :class:`NotEnoughGpus` (with the shortfall) when nothing can hold it.
    """
    from gpu_launch.share import model_plan

    if (model is None) == (command is None):
        raise UsageError("plan(): give a model or a command, one of the two",
                         hint='plan("./model.gguf") or plan(command=["llama-server", "-m", "./model.gguf"])')
    if command is not None and (isinstance(command, str) or not all(isinstance(w, str) for w in command)):
        raise UsageError("plan(): command= is a list of words", hint='command=["vllm", "serve", "./M"]')
    inv = _invocation("plan", {"ctx": ctx, "parallel": parallel, "kv_type": kv_type, "engine": engine,
                               "reserve": reserve, "gpus": gpus, "exclude": exclude, "min_free": min_free,
                               "max_util": max_util, "idle": idle, "snapshot": snapshot, "lock_dir": lock_dir})
    ref = "model" if model is None else (os.fspath(model) if isinstance(model, os.PathLike) else model)
    result, _why = model_plan.make_plan(inv, ref, tuple(command or ()))
    return result


def machine(snapshot: PathSpec | None = None) -> Machine:
    """The machine model: every GPU with memory, load, processes, MIG devices and links.

    Read from NVML, or from ``snapshot`` (a file written by ``gpulaunch ls --json``, or a bundled
    example like ``"dgx-h100"``; default ``GPULAUNCH_SNAPSHOT``). See :mod:`gpu_launch.hardware.model`.
    """
    from gpu_launch.share import pick

    inv = _invocation("ls", {"snapshot": snapshot})
    return pick.read_machine(inv, processes=True, topology=True, process_details=True)
