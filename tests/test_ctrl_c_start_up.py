"""Ctrl-C while gpulaunch is still starting (issue 27): one line, ``gpulaunch: interrupted``, exit 130.

The signal is sent by the process itself at chosen moments, so each run lands where it is meant to:
an audit hook (``sys.addaudithook``) fires it as a given module's import begins, from the first
import gpulaunch's own code makes (``gpu_launch/__init__.py`` is then running) to the last one before
the exec. ``benchmarks/ctrl_c_start_up.py`` sends real SIGINTs at random moments, 200 at a time;
tests/test_hostile.py has the later moments (the hand-over to the command).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from cli_run import ROOT, clean_env
from gpu_launch.errors import ExitCode

LAUNCH = ("--snapshot", "dgx-h100", "--auto", "1", "--", "sleep", "5")

#: What pip writes as the `gpulaunch` console script, with an audit hook in front that sends this
#: process SIGINT when the import named in CTRL_C_AT begins ("?": list the imports on stderr instead).
DRIVER = textwrap.dedent("""\
    import os, sys
    at = os.environ.pop("CTRL_C_AT")
    def hook(event, args):
        global at
        if event != "import" or not at:
            return
        if at == "?":
            sys.stderr.write("import: " + args[0] + "\\n")
        elif args[0] == at:
            at = ""
            os.kill(os.getpid(), 2)
    sys.addaudithook(hook)
    import re
    import sys
    from gpu_launch.cli import main
    if __name__ == '__main__':
        sys.argv[0] = re.sub(r'(-script\\.pyw|\\.exe)?$', '', sys.argv[0])
        sys.exit(main())
    """)


def _launch(driver: Path, at: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(driver), *LAUNCH], capture_output=True, text=True, timeout=60,
                          env=clean_env({"CTRL_C_AT": at}), cwd=ROOT)


@pytest.fixture(scope="module")
def driver(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("bin") / "gpulaunch"  # the name tells the package it is the program
    path.write_text(DRIVER)
    return path


def _imports_from_the_package_on(driver: Path) -> list[str]:
    """The imports a launch makes, in order, from the first one gpulaunch's own code makes to the exec."""
    done = _launch(driver, "?")
    names = [line.removeprefix("import: ") for line in done.stderr.splitlines() if line.startswith("import: ")]
    first = names.index("gpu_launch")  # its own import begins before its first statement: Python's moment
    return list(dict.fromkeys(names[first + 1:]))


def test_ctrl_c_at_imports_all_through_start_up_is_one_line_and_130(driver: Path) -> None:
    """The first imports made by gpulaunch's own code (the package's handler is all there is then),
    and every 8th one after them, the standard library's among them (json, fcntl, dataclasses, ...)."""
    names = _imports_from_the_package_on(driver)
    assert "gpu_launch.base.interrupt" in names and "gpu_launch.run.execute" in names, names
    moments = names[:3] + names[3::8]
    for name in moments:
        done = _launch(driver, name)
        assert done.stderr.splitlines()[-1:] == ["gpulaunch: interrupted"], (name, done.stderr[-2000:])
        assert "Traceback" not in done.stderr and "Exception ignored" not in done.stderr, (name, done.stderr[-2000:])
        assert done.stderr.count("\n") == 1 and done.returncode == ExitCode.INTERRUPTED, (name, done.returncode,
                                                                                          done.stderr[-2000:])


#: A child's first lines: gpulaunch's Ctrl-C handling installed, and ``inside``, a frame of the import
#: system's own (the one that calls finders), to hand the handler as Python would there.
INSIDE_AN_IMPORT = """\
import signal, sys, time
from gpu_launch.base import interrupt

interrupt.install()
frames = []

class Finder:
    @staticmethod
    def find_spec(name, path=None, target=None):
        frames.append(sys._getframe(1))
        return None

sys.meta_path.insert(0, Finder)
try:
    import no_such_module_at_all
except ImportError:
    pass
inside = frames[0]
"""


def _child(program: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", INSIDE_AN_IMPORT + textwrap.dedent(program)], capture_output=True,
                          text=True, env=clean_env(), timeout=60, cwd=ROOT)


def test_ctrl_c_inside_the_import_system_is_raised_once_the_import_is_done() -> None:
    """Where Python would drop a KeyboardInterrupt (the weakref callback that ends every import prints
    "Exception ignored" and goes on) the handler raises nothing, and the interrupt comes a moment later."""
    done = _child("""
        print(inside.f_globals["__name__"], flush=True)
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})  # the retry waits until we look
        signal.getsignal(signal.SIGINT)(signal.SIGINT, inside)  # as Python calls it there
        print("nothing raised inside", flush=True)
        try:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGALRM})
            time.sleep(10)
        except KeyboardInterrupt:
            print("raised outside", flush=True)
    """)
    assert done.stdout.splitlines() == ["importlib._bootstrap", "nothing raised inside", "raised outside"], done
    assert done.stderr == ""


def test_a_ctrl_c_whose_retry_is_due_when_the_hand_over_raises_it_is_raised_once() -> None:
    """The hand-over finds the Ctrl-C (its wakeup byte) while its retry is still due: the retry must not
    raise a second KeyboardInterrupt in the except or finally that handles the first (a traceback
    instead of the one line, 1 start-up Ctrl-C in ~200 as a non-root user)."""
    done = _child("""
        handler = signal.signal(signal.SIGINT, lambda signum, frame: None)
        signal.raise_signal(signal.SIGINT)  # the real signal: its byte in the wakeup pipe
        signal.signal(signal.SIGINT, handler)
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})  # the retry waits until the hand-over
        handler(signal.SIGINT, inside)  # as Python called it inside the import system: a retry is due
        print("seen", interrupt.seen(), flush=True)
        try:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGALRM})
            time.sleep(0.3)
            print("no second KeyboardInterrupt", flush=True)
        except KeyboardInterrupt:
            print("a second KeyboardInterrupt", flush=True)
    """)
    assert done.stdout.splitlines() == ["seen True", "no second KeyboardInterrupt"], (done.stdout, done.stderr)


def test_ctrl_c_ignored_by_the_parent_stays_ignored_through_start_up(driver: Path) -> None:
    """`gpulaunch ... &` in a script: the package's first statement must not take SIGINT back."""
    done = subprocess.run([sys.executable, str(driver), "--snapshot", "dgx-h100", "--auto", "1", "--", sys.executable,
                           "-c", "import signal; print(signal.getsignal(signal.SIGINT) is signal.SIG_IGN)"],
                          capture_output=True, text=True, timeout=60, env=clean_env({"CTRL_C_AT": "gpu_launch.base.interrupt"}),
                          cwd=ROOT, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    assert done.returncode == 0 and done.stdout == "True\n", (done.returncode, done.stdout, done.stderr)


def test_a_program_that_imports_the_package_keeps_its_own_ctrl_c() -> None:
    """Only the gpulaunch program takes SIGINT at import; a script or notebook keeps Python's."""
    done = subprocess.run([sys.executable, "-c", "import signal, gpu_launch; "
                           "print(signal.getsignal(signal.SIGINT) is signal.default_int_handler)"],
                          capture_output=True, text=True, timeout=60, env=clean_env(), cwd=ROOT)
    assert done.stdout == "True\n", done.stderr


def test_a_ctrl_c_as_the_mapping_is_printed_leaves_whole_lines() -> None:
    """The mapping goes out in one write, newlines included: a Ctrl-C right after a write must not leave a
    line without its newline, for `gpulaunch: interrupted` to be glued to (print() writes its end apart)."""
    from gpu_launch.choose import select, visibility
    from gpu_launch.hardware import snapshot
    from gpu_launch.options.args import parse
    from gpu_launch.run import environment
    from gpu_launch.placing import pick

    class CtrlCAfterAWrite:
        written = ""

        def write(self, text: str) -> int:
            self.written += text
            raise KeyboardInterrupt  # the Ctrl-C lands as this write returns

        def flush(self) -> None:
            pass

    machine = snapshot.resolve("dgx-h100")
    selection = select.choose_auto(machine, 2, select.Constraints())
    out = CtrlCAfterAWrite()
    with pytest.raises(KeyboardInterrupt):
        pick.tell(parse(["--auto", "2", "--", "true"]), visibility.resolve(machine, {}), selection,
                  environment.build(selection.devices, {}), out)  # type: ignore[arg-type]
    assert out.written.endswith("\n") and "cuda:1 → GPU 3" in out.written, repr(out.written)
