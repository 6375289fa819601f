"""Exec the command: it replaces gpulaunch, keeps the pid, gets the signals, returns its own code.

No shell anywhere: ``argv`` goes to ``os.execvpe`` exactly as the user typed it.
"""

from __future__ import annotations

import errno
import os
import sys
from collections.abc import Mapping, MutableMapping, Sequence

from gpu_launch.errors import CommandNotFound, NotExecutable, UsageError

# Annotations only: importing typing costs ~3 ms of every launch (docs/performance.md).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import NoReturn

__all__ = ["resolve_command", "exec_command", "take_exec_notify", "EXEC_NOTIFY"]

#: A descriptor a detached job's supervisor hands the launch (gpu_launch/jobs/supervisor.py): the launch
#: writes ``E<gpus>\n`` on it just before the exec (``F\n`` if the exec then fails), and the exec closes it.
#: So the supervisor knows whether the command ran, and since when; the command never sees it.
EXEC_NOTIFY = "GPULAUNCH_EXEC_NOTIFY"


def resolve_command(argv: Sequence[str], env: Mapping[str, str]) -> str:
    """The path ``argv[0]`` will run as; CommandNotFound (127) / NotExecutable (126) otherwise."""
    name = argv[0]
    for i, arg in enumerate(argv):
        if "\0" in arg:  # execve cannot pass it; os.access would raise ValueError
            which = "the program name" if i == 0 else f"argument {i}"
            raise UsageError(f"the command's {which} contains a NUL byte: {arg!r}",
                             hint="no program or argument can hold one")
    if not name:
        raise CommandNotFound("the command is an empty string", hint="put the program to run after the options")
    shown = _shown(name)
    if os.sep in name:
        if not os.path.exists(name):
            raise CommandNotFound(f"{shown}: no such file")
        if os.path.isdir(name):
            raise NotExecutable(f"{shown}: is a directory, not a program")
        if not os.access(name, os.X_OK):
            import shlex  # only for the hint: a launch that runs does not pay for it

            raise NotExecutable(f"{shown}: permission denied (not executable)", hint=f"chmod +x {shlex.quote(name)}")
        _check_interpreter(name, shown)
        return name
    found = _which(name, env.get("PATH", os.defpath))
    if found is None:
        raise CommandNotFound(f"{shown}: command not found", hint="check the spelling, or activate the environment that has it")
    _check_interpreter(found, shown)
    return found


def _check_interpreter(path: str, shown: str) -> None:
    """A script's ``#!`` interpreter must exist and be executable, or the exec fails only after the GPUs
    were reserved and the mapping printed; say so now, naming it (127 missing, 126 not executable).
    A ``#!`` line ending in a carriage return (a script saved with Windows line endings) names an
    interpreter ``/bin/sh\r`` that never exists: that gets its own message."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return  # unreadable but executable: let the exec itself decide
    try:
        head = os.read(fd, 256) if os.path.isfile(path) else b""  # the kernel reads at most 256 bytes too
    except OSError:
        head = b""
    finally:
        os.close(fd)
    if not head.startswith(b"#!"):
        return
    line = head[2:].split(b"\n", 1)[0].lstrip(b" \t")
    interpreter = os.fsdecode(line.split(None, 1)[0] if line.split() else b"")
    first = os.fsdecode(line.split(b" ", 1)[0].split(b"\t", 1)[0])  # the kernel splits at blanks only
    if not interpreter:
        raise NotExecutable(f"{shown}: its #! line names no interpreter", hint="write e.g. #!/bin/sh as its first line")
    if line.endswith(b"\r"):  # Windows line endings: '/bin/sh\r' does not exist; 'python3\r' is not on PATH
        import shlex

        error = CommandNotFound if first.endswith("\r") else NotExecutable
        raise error(f"{shown}: its #! line ends in a carriage return (Windows line endings), so the kernel "
                    f"would run {os.fsdecode(line)!r}", hint=f"convert it: dos2unix {shlex.quote(path)}")
    if not os.path.exists(interpreter):
        raise CommandNotFound(f"{shown}: its interpreter {interpreter} (from the #! line) does not exist",
                              hint="install it, or fix the script's first line")
    if os.path.isdir(interpreter) or not os.access(interpreter, os.X_OK):
        raise NotExecutable(f"{shown}: its interpreter {interpreter} (from the #! line) cannot be executed")


def _shown(name: str) -> str:
    """``name`` for a one-line message: quoted with escapes when it holds newlines or other controls."""
    return name if name.isprintable() else repr(name)


def _which(name: str, path: str) -> str | None:
    """``shutil.which(name, path=path)`` for a bare name, without importing shutil (~2 ms per launch).

    As execvp searches: each PATH entry in order (an empty one is the current directory), the
    first existing, executable, non-directory file wins.
    """
    if not path or "\0" in name:  # no file name holds a NUL byte (and os.access would raise ValueError)
        return None
    for directory in path.split(os.pathsep):
        candidate = os.path.join(directory, name)
        if os.access(candidate, os.X_OK) and not os.path.isdir(candidate):
            return candidate
    return None


def take_exec_notify(environ: MutableMapping[str, str]) -> int | None:
    """The :data:`EXEC_NOTIFY` descriptor, taken out of ``environ`` (neither the command nor anything it
    starts sees it) and made close-on-exec; None when there is none, or it is not a pipe."""
    import stat

    text = environ.pop(EXEC_NOTIFY, None)
    if text is None or not text.isdigit() or len(text) > 6:
        return None
    fd = int(text)
    try:
        if not stat.S_ISFIFO(os.fstat(fd).st_mode):
            return None
        os.set_inheritable(fd, False)
    except OSError:
        return None
    return fd


def exec_command(argv: Sequence[str], env: Mapping[str, str], notify: int | None = None) -> NoReturn:
    """Replace this process with ``argv``; raises only if the exec itself fails. ``notify``: the
    :func:`take_exec_notify` descriptor, told the exec is under way (with the GPUs, ``GPULAUNCH_GPUS``)."""
    from gpu_launch.base import interrupt, streams

    path = resolve_command(argv, env)
    sys.stdout.flush()
    sys.stderr.flush()
    streams.close_again()  # a descriptor the user closed (>&-) reaches the command closed
    args, environ = list(argv), dict(env)
    _undo_pythons_ignored_signals()
    interruptible = _hand_ctrl_c_over()
    _tell(notify, b"E" + environ.get("GPULAUNCH_GPUS", "").encode("ascii", "replace") + b"\n")
    try:
        os.execve(path, args, environ)
    except OSError as exc:
        _tell(notify, b"F\n")
        if interruptible:
            interrupt.install()
        if exc.errno == errno.ENOENT:
            raise CommandNotFound(f"{_shown(argv[0])}: {exc.strerror}") from None
        raise NotExecutable(f"{_shown(argv[0])}: cannot execute ({exc.strerror})") from None


def _tell(fd: int | None, data: bytes) -> None:
    """Write a status line to the supervisor, if any. A supervisor that is gone must not stop the command:
    ``cli.main`` gives SIGPIPE its default action back (so that ``gpulaunch ls | head`` ends quietly), which
    would kill us at this write, before the exec; so SIGPIPE is ignored for the write alone."""
    if fd is None:
        return
    import signal

    try:
        old = signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    except ValueError:  # not the main thread (the Python API): SIGPIPE is Python's own ignored one there
        old = None
    try:
        os.write(fd, data)
    except OSError:  # the supervisor is gone (EPIPE): the command runs all the same
        pass
    finally:
        if old is not None:
            signal.signal(signal.SIGPIPE, old)


def _undo_pythons_ignored_signals() -> None:
    """Give SIGXFSZ back its default action before the exec, as subprocess does for its children.

    Python ignores it at start-up, and an ignored signal stays ignored across exec: the command
    would get EFBIG where it should die at the file-size limit (``ulimit -f``). SIGPIPE, which
    Python ignores too, is already the default again (``cli.main``).
    """
    import signal

    if hasattr(signal, "SIGXFSZ"):
        signal.signal(signal.SIGXFSZ, signal.SIG_DFL)


def _hand_ctrl_c_over() -> bool:
    """Give Ctrl-C back its default action (death by SIGINT) just before the exec; True if it was ours.

    Python's handler only marks a signal, to raise KeyboardInterrupt at the next bytecode: one that
    lands while ``execve`` runs would be marked in a process image about to vanish, and the command
    would run on as if no Ctrl-C was pressed. So SIGINT is blocked (the kernel holds a new one), a
    Ctrl-C that came before is raised as usual (``gpulaunch: interrupted``, 130) while Python's
    handler is still in place, and so is one that reached gpulaunch but was lost on the way (see
    :mod:`gpu_launch.base.interrupt`); then the default action is put back, and the
    unblock delivers a held one now: gpulaunch dies of SIGINT, which a shell reports as 130 too.
    From then on it reaches the command. An ignored SIGINT (``nohup``, a background job) is left
    ignored, for the command too.
    """
    import signal

    from gpu_launch.base import interrupt

    if not interrupt.ours():
        return False
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, ())  # unchanged: what to put back
    try:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})  # one from before is raised on return
        if interrupt.seen():  # came before, but never became a KeyboardInterrupt that ended us
            raise KeyboardInterrupt
        signal.signal(signal.SIGINT, signal.SIG_DFL)
    except ValueError:  # not the main thread (an embedding program's): its signals are not ours to change
        return False
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)  # with SIG_DFL in place, a held Ctrl-C ends us here
    return True
