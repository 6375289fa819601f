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
(:mod:`gpu_launch.placing.pick`), within what an inherited ``CUDA_VISIBLE_DEVICES`` allows. Python
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

from gpu_launch.errors import UsageError
from gpu_launch.in_process.cuda_state import cuda_started, refuse_if_cuda_started
from gpu_launch.in_process.devices import Device, in_cuda_order
from gpu_launch.in_process.holding import HELD, MINE, choose, release_held
from gpu_launch.in_process.keywords import invocation, wait_seconds
# The variables use() sets in os.environ are those a launch sets for its command.
from gpu_launch.run.environment import LOCK_DIR_VARIABLE, SET_VARIABLES
from gpu_launch.base.units import shown

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from datetime import timedelta
    from types import TracebackType
    from typing import TypeAlias

    from gpu_launch.fit.plan import Plan
    from gpu_launch.hardware.model import Machine
    from gpu_launch.reservations.reservations import Reservation as Locks
    from gpu_launch.base.units import Size

    #: GPUs as ``gpulaunch ls`` numbers them: ``"4-7"``, ``"0,2"``, ``"all"``, UUIDs, ``3``, ``[3, 1]``.
    GpuSpec: TypeAlias = "str | int | Sequence[int | str]"
    #: Memory: ``"20GiB"``, ``"512MiB"``, ``"20GB"``, ``"80%"``, or bytes as an int.
    SizeSpec: TypeAlias = "str | int | Size"
    #: ``None``/``False``: do not wait; ``True``: for ever; seconds; ``"30m"``; a timedelta.
    WaitSpec: TypeAlias = "bool | float | str | timedelta | None"
    PathSpec: TypeAlias = "str | os.PathLike[str]"
    #: ``True``: your own processes; a user name, or several (``"alice,bob"``, ``["alice", "bob"]``).
    AccountSpec: TypeAlias = "bool | str | Sequence[str] | None"

__all__ = ["Device", "Reservation", "use", "select", "reserve", "release", "machine", "held", "cuda_started", "plan"]


def use(n: int | None = None, *, gpus: GpuSpec | None = None, fit: SizeSpec | None = None,
        min_free: SizeSpec | None = None, max_util: int | str | None = None, idle: bool | None = None,
        exclude: GpuSpec | None = None, mig: bool | None = None, uuid: bool | None = None,
        wait: WaitSpec = None, snapshot: PathSpec | None = None, lock_dir: PathSpec | None = None,
        quiet: bool | None = None, model: PathSpec | None = None, ctx: int | None = None,
        min_count: int | None = None, max_count: int | None = None, min_total_memory: SizeSpec | None = None,
        account_as_free: AccountSpec = None) -> tuple[Device, ...]:
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
    forked copy of the process (a ``multiprocessing`` worker started by ``fork``) holds none of them:
    its own ``use()`` gets GPUs of its own. A worker started by ``spawn`` or ``forkserver`` (Python
    3.14's default on Linux) is a new program started from here: its ``use()`` gets one of these GPUs,
    one each among its siblings.

    ``n`` GPUs (default 1), or ``gpus=`` by number, or ``fit=`` the fewest that hold a size; the
    constraints and ``wait=`` as for ``gpulaunch``. ``model=`` (a model file or folder, or a cached
    Hugging Face id) chooses the fewest GPUs that hold that model at ``ctx`` tokens (default: its
    own context), as ``gpulaunch --fit MODEL`` does; :func:`plan` shows the numbers. Returns the
    devices in CUDA order.

    nvisel's options: ``min_count=``/``max_count=`` instead of ``n`` (as many eligible GPUs as there
    are within the range: ``max_count=4`` is "up to 4, at least 1"), ``min_total_memory=`` (only cards
    with that much memory in all) and ``account_as_free=`` (``True``: your own processes, or a user
    name or names, count as gone when choosing), as ``--min-count``... do.
    """
    refuse_if_cuda_started("use()")
    fit = _fit_or_model(fit, model)
    inv = invocation("run", {"auto": n, "gpus": gpus, "fit": fit, "ctx": ctx, "min_free": min_free, "max_util": max_util,
                             "idle": idle, "exclude": exclude, "mig": mig, "uuid": uuid, "wait": wait,
                             "snapshot": snapshot, "lock_dir": lock_dir, "quiet": quiet,
                             **_nvisel(min_count, max_count, min_total_memory, account_as_free)})
    with HELD.guard:  # one process, one use(): threads calling it take turns
        release()  # the first choice goes, and the parent's variables come back, before choosing again
        saved = {name: os.environ.get(name) for name in (*SET_VARIABLES, LOCK_DIR_VARIABLE)}
        got, variables = choose(inv, take=True, inherit=True)
        HELD.locks, HELD.devices, HELD.saved = got.reservation, in_cuda_order(got.selection.devices), saved
        os.environ.update(variables)
        return HELD.devices


def release() -> None:
    """Give back what :func:`use` holds and restore the variables it set. Nothing held: nothing to do."""
    with HELD.guard:
        release_held()


def held() -> tuple[Device, ...]:
    """The devices :func:`use` holds now (empty before it or after :func:`release`)."""
    return HELD.devices


def select(n: int | None = None, *, gpus: GpuSpec | None = None, fit: SizeSpec | None = None,
           min_free: SizeSpec | None = None, max_util: int | str | None = None, idle: bool | None = None,
           exclude: GpuSpec | None = None, mig: bool | None = None, uuid: bool | None = None,
           wait: WaitSpec = None, snapshot: PathSpec | None = None, lock_dir: PathSpec | None = None,
           quiet: bool | None = None, min_count: int | None = None, max_count: int | None = None,
           min_total_memory: SizeSpec | None = None, account_as_free: AccountSpec = None) -> tuple[Device, ...]:
    """Choose only, as ``gpulaunch env`` does: no reservation, no change to ``os.environ``.

    GPUs that other gpulaunch jobs reserved are skipped (``gpus=`` on one only warns), and so are
    those this process holds (:func:`use`, :func:`reserve`): after ``use(2)``, ``select(2)`` gives two
    other GPUs, chosen on the whole machine as the parent allows it. Nothing keeps the chosen ones for you. ``wait=`` waits until the request can be met. Prints the mapping
    table on stderr unless ``quiet``.
    """
    inv = invocation("env", {"auto": n, "gpus": gpus, "fit": fit, "min_free": min_free, "max_util": max_util,
                             "idle": idle, "exclude": exclude, "mig": mig, "uuid": uuid, "snapshot": snapshot,
                             "lock_dir": lock_dir, "quiet": quiet,
                             **_nvisel(min_count, max_count, min_total_memory, account_as_free)})
    seconds = wait_seconds(wait, "wait")  # `env` takes no --wait (nor its default): only this argument
    if seconds is not None:
        from gpu_launch.base.records import replace

        inv = replace(inv, options={**inv.options, "wait": seconds})
    got, _variables = choose(inv, take=False, choose_only=True)
    return in_cuda_order(got.selection.devices)


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
            MINE.give_back(self._locks)
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
            inherit: bool = False, min_count: int | None = None, max_count: int | None = None,
            min_total_memory: SizeSpec | None = None, account_as_free: AccountSpec = None) -> Reservation:
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
    inv = invocation("run", {"auto": n, "gpus": gpus, "fit": fit, "ctx": ctx, "min_free": min_free, "max_util": max_util,
                             "idle": idle, "exclude": exclude, "mig": mig, "uuid": uuid, "wait": wait,
                             "snapshot": snapshot, "lock_dir": lock_dir, "quiet": quiet,
                             **_nvisel(min_count, max_count, min_total_memory, account_as_free)})
    got, variables = choose(inv, take=True, inherit=inherit)
    return Reservation(in_cuda_order(got.selection.devices), variables, got.reservation)


def _nvisel(min_count: int | None, max_count: int | None, min_total_memory: SizeSpec | None,
            account_as_free: AccountSpec) -> dict[str, object]:
    """nvisel's options, by option dest: ``--min-count``, ``--max-count``, ``--min-total-memory``,
    ``--account-as-free``."""
    return {"min_count": min_count, "max_count": max_count, "min_total_memory": min_total_memory,
            "account_as_free": account_as_free}


def _fit_or_model(fit: SizeSpec | None, model: PathSpec | None) -> SizeSpec | None:
    """``model=`` is ``--fit MODEL``: one of the two."""
    if model is None:
        return fit
    if fit is not None:
        raise UsageError("fit= and model= cannot be used together", hint="fit= a size, or model= a model")
    if isinstance(model, str) and model[:1].isdigit():
        raise UsageError(f"model: {model!r} looks like a size", hint='for a size write fit="60GiB"')
    return _model_ref(model)


def _model_ref(model: object) -> str:
    """``model=`` as text: a str, an os.PathLike, or bytes (decoded as the file system does, as ``open``
    takes them); anything else is one UsageError, never a number taken for a size."""
    if isinstance(model, (str, bytes, os.PathLike)):
        return os.fsdecode(model)
    raise UsageError(f"model: {shown(model)} is not a model (a {type(model).__name__})",
                     hint='name a model file, folder or cached id, e.g. model="./model.gguf"')


def plan(model: PathSpec | None = None, *, command: Sequence[str] | None = None, ctx: int | None = None,
         parallel: int | None = None, kv_type: str | None = None, engine: str | None = None,
         reserve: SizeSpec | None = None, gpus: GpuSpec | None = None, exclude: GpuSpec | None = None,
         min_free: SizeSpec | None = None, max_util: int | str | None = None, idle: bool | None = None,
         snapshot: PathSpec | None = None, lock_dir: PathSpec | None = None, train_seq: int | None = None,
         train_method: str | None = None, micro_batch: int | None = None) -> Plan:
    """How ``model`` would be laid out, as ``gpulaunch plan`` shows it: nothing reserved, nothing set.

    Name the model (a GGUF file, a safetensors or MLC-LLM folder, a cached Hugging Face id), or give
    the engine's ``command`` (``["vllm", "serve", "./M", "--max-model-len", "32768"]``) to read the
    model, context and KV type from it. On ``gpus=`` as given, else on the GPUs
    ``use(model=...)`` would choose. The result's ``placeholders()`` are the values ``{tp}``,
    ``{gpu_layers}``... would get; ``placement.per_gpu`` the weights, KV and allowance per GPU.
    Raises :class:`NotEnoughGpus` (with the shortfall) when nothing can hold it.

    A training ``command`` (``["torchrun", "train.py", "--model_name_or_path", "./M", ...]``, ``trl sft``,
    ``axolotl train``, ``llamafactory-cli train``) is sized by its step: each ``placement.per_gpu`` entry's
    ``training`` is the step's per-GPU peak (a TrainingPeak); ``train_seq``, ``train_method`` and
    ``micro_batch`` are ``--train-seq``, ``--train-method`` and ``--micro-batch``.
    """
    from gpu_launch.fit import model_plan

    if (model is None) == (command is None):
        raise UsageError("plan(): give a model or a command, one of the two",
                         hint='plan("./model.gguf") or plan(command=["llama-server", "-m", "./model.gguf"])')
    if command is not None and (isinstance(command, str) or not all(isinstance(w, str) for w in command)):
        raise UsageError("plan(): command= is a list of words", hint='command=["vllm", "serve", "./M"]')
    inv = invocation("plan", {"ctx": ctx, "parallel": parallel, "kv_type": kv_type, "engine": engine,
                              "reserve": reserve, "gpus": gpus, "exclude": exclude, "min_free": min_free,
                              "max_util": max_util, "idle": idle, "snapshot": snapshot, "lock_dir": lock_dir,
                              "train_seq": train_seq, "train_method": train_method, "micro_batch": micro_batch})
    ref = "model" if model is None else _model_ref(model)
    result, _why = model_plan.make_plan(inv, ref, tuple(command or ()))
    return result


def machine(snapshot: PathSpec | None = None) -> Machine:
    """The machine model: every GPU with memory, load, processes, MIG devices and links.

    Read from NVML, or from ``snapshot`` (a file written by ``gpulaunch ls --json``, or a bundled
    example like ``"dgx-h100"``; default ``GPULAUNCH_SNAPSHOT``). See :mod:`gpu_launch.hardware.model`.
    """
    from gpu_launch.placing import pick

    inv = invocation("ls", {"snapshot": snapshot})
    return pick.read_machine(inv, processes=True, topology=True, process_details=True)
