"""The slips in what `gpulaunch ls` shows a user would suffer (issue 37): the --wait queue's times (the
kernel gives nanoseconds; the table shows seconds, minutes, hours), who waits, in which order, and
what they asked for, cut to the terminal. Unit-level: the views' text and JSON as the user reads them."""

from __future__ import annotations

import json
import os
import pwd
import time

from gpu_launch.base.units import fmt_duration
from gpu_launch.base.records import dataclass
from gpu_launch.views import queue_table

NOW = 1_800_000_000.0


@dataclass(frozen=True)
class Waiter:
    position: int
    pid: int
    uid: int
    since_ns: int
    note: str


def waiter(position: int, waited_s: float, note: object = None, uid: int | None = None, pid: int = 100) -> Waiter:
    text = json.dumps(note) if note is not None else ""
    return Waiter(position, pid, os.getuid() if uid is None else uid, int((NOW - waited_s) * 1e9), text)  # the tester's


def test_durations_read_in_seconds_minutes_and_hours() -> None:
    assert [fmt_duration(s) for s in (0, 0.4, 59.4, 59.6, 60, 61, 3599, 3600, 3661, 90000)] == \
        ["0s", "0s", "59s", "1m00s", "1m00s", "1m01s", "59m59s", "1h00m", "1h01m", "25h00m"]


def test_the_queue_shows_how_long_each_has_waited_in_the_order_they_are_served() -> None:
    me = pwd.getpwuid(os.getuid()).pw_name
    text = queue_table.as_text([waiter(1, 3725, {"request": "--auto 2", "command": "python  train.py"}),
                                waiter(2, 42, {"request": "--gpus 0"}, pid=7),
                                waiter(3, -5, None, pid=8)], None, now=NOW)
    lines = text.splitlines()
    assert lines[0] == "" and lines[1].split() == list(queue_table.HEADER)
    assert lines[2].split()[:3] == ["1", me, "100"] and lines[2].split()[4:] == ["1h02m", "--auto", "2:", "python",
                                                                                "train.py"]
    assert lines[3].split()[4:] == ["42s", "--gpus", "0"]
    assert lines[4].split()[4:] == ["0s", "?"]  # a clock that went back: never a negative wait; no note: "?"
    assert lines[2].split()[3] == time.strftime("%H:%M:%S", time.localtime(NOW - 3725))
    assert lines[3].index("42s") + 3 == lines[2].index("1h02m") + 5  # WAITING is right-aligned, and PID
    assert lines[2].index(" 100 ") + 4 == lines[3].index(" 7 ") + 2


def test_the_queue_is_empty_text_when_nobody_waits_and_is_cut_to_the_width() -> None:
    assert queue_table.as_text([], 80, now=NOW) == ""
    text = queue_table.as_text([waiter(1, 5, {"request": "--auto 1", "command": "x" * 300})], 70, now=NOW)
    lines = text.splitlines()[1:]
    assert all(len(line) <= 70 for line in lines) and lines[1].endswith("…") and len(lines[1]) == 70
    full = queue_table.as_text([waiter(1, 5, {"request": "--auto 1", "command": "x" * 30})], None, now=NOW)
    row = full.splitlines()[2]
    assert queue_table.as_text([waiter(1, 5, {"request": "--auto 1", "command": "x" * 30})], len(row),
                               now=NOW).splitlines()[2] == row


def test_an_earlier_days_wait_shows_the_day() -> None:
    text = queue_table.as_text([waiter(1, 3 * 86400)], None, now=NOW)
    assert text.splitlines()[2].split()[3:6] == time.strftime("%b %d %H:%M", time.localtime(NOW - 3 * 86400)).split()


def test_the_queue_in_json_says_seconds_waited_and_the_epoch_it_began() -> None:
    doc = queue_table.as_json([waiter(1, 90.25, {"request": "--auto 1", "command": "c"}, uid=0),
                               waiter(2, -3, ["not", "a", "note"], uid=54321, pid=9)], now=NOW)
    assert doc[0] == {"position": 1, "user": pwd.getpwuid(0).pw_name, "uid": 0, "pid": 100,
                      "since": round(NOW - 90.25, 3), "waited_s": 90.2, "request": "--auto 1", "command": "c",
                      "kept": None, "lends": None, "expected_start": None, "strict": False}
    assert (doc[1]["waited_s"], doc[1]["request"], doc[1]["command"], doc[1]["position"]) == (0.0, None, None, 2)
    assert doc[1]["user"] in ("54321", _name(54321))


def test_a_note_says_request_and_command_only_when_they_are_text() -> None:
    assert queue_table._note('{"request": "--auto 1", "command": 3}') == ("--auto 1", None)
    assert queue_table._note('{"request": 1, "command": "c"}') == (None, "c")
    assert queue_table._note("not json") == (None, None)
    assert queue_table._note("") == (None, None)


def _name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def test_a_jobs_time_in_each_has_tenths_under_a_minute() -> None:
    from gpu_launch.views.each_view import took

    assert [took(s) for s in (0.04, 1.96, 59.94, 59.95, 65, 7380)] == ["0.0s", "2.0s", "59.9s", "1m00s", "1m05s",
                                                                        "2h03m"]


def test_the_waiting_line_is_printed_when_it_changes_and_once_a_minute_otherwise() -> None:
    import io

    from gpu_launch.views.status_line import StatusLine

    out = io.StringIO()
    with StatusLine(out) as line:
        for elapsed, what in ((0, "need 2 GPUs"), (30, "need 2 GPUs"), (59.9, "need 2 GPUs"), (60, "need 2 GPUs"),
                              (61, "need 1 GPU"), (90, "need 1 GPU"), (3725, "need 1 GPU")):
            line.update(elapsed, what)
    assert out.getvalue().splitlines() == ["gpulaunch: waiting 0s: need 2 GPUs", "gpulaunch: waiting 1m00s: need 2 GPUs",
                                           "gpulaunch: waiting 1m01s: need 1 GPU", "gpulaunch: waiting 1h02m: need 1 GPU"]
    quiet = io.StringIO()
    with StatusLine(quiet, quiet=True) as line:
        line.update(0, "x")
    assert quiet.getvalue() == ""


def test_a_wait_of_a_fraction_of_a_second_more_is_not_rounded_up_a_whole_second() -> None:
    lines = queue_table.as_text([waiter(1, 42.4), waiter(2, 42.6)], None, now=NOW).splitlines()
    assert [line.split()[4] for line in lines[2:]] == ["42s", "43s"]


def test_ls_names_a_process_by_its_script_not_its_interpreter() -> None:
    from gpu_launch.views.ls_table import command_word

    assert command_word("/usr/bin/python3 -u /home/a/train.py --lr 1") == "train.py"
    assert command_word("python -m torch.distributed.run x.py") == "torch.distributed.run"
    assert command_word("bash ./run.sh") == "run.sh"
    assert command_word("uv run serve.py") == "serve.py"
    assert command_word("CUDA_VISIBLE_DEVICES=0 python -c 'print(1)'") == "python"
    assert command_word("/opt/vllm/bin/vllm serve m") == "vllm"
    assert command_word("") == "?"


def test_a_machine_tells_the_link_between_two_gpus_and_none_without_a_matrix() -> None:
    from dataclasses import replace

    from gpu_launch.hardware import snapshot

    machine = snapshot.resolve("dgx-h100")
    a, b = machine.gpus[0], machine.gpus[1]
    assert machine.link(a, b) == machine.links[0][1] == "NV18"
    assert replace(machine, links=None).link(a, b) is None


def test_in_a_notebook_the_waiting_line_is_redrawn_in_place_and_blanked_at_the_end() -> None:
    import io

    from gpu_launch.views.status_line import StatusLine

    class OutStream(io.StringIO):  # ipykernel's stream: no terminal, but it redraws a line on \r
        pass

    OutStream.__module__ = "ipykernel.iostream"
    out = OutStream()
    with StatusLine(out) as line:
        line.update(5, "need 2 GPUs; eligible now: GPU 3")
        line.update(65, "need 2 GPUs")
    first = "gpulaunch: waiting 5s: need 2 GPUs; eligible now: GPU 3"
    assert out.getvalue() == ("\r" + first + "\r" + "gpulaunch: waiting 1m05s: need 2 GPUs".ljust(len(first))
                              + "\r" + " " * len(first) + "\r")


def test_each_says_how_long_a_job_took_when_it_ends_and_nothing_when_that_is_unknown() -> None:
    import io
    from types import SimpleNamespace

    from gpu_launch.views.each_view import View

    def job(n: int, status: str, seconds: float | None, outcome: str = "") -> SimpleNamespace:
        return SimpleNamespace(job=SimpleNamespace(number=n), status=status, seconds=seconds, outcome=outcome,
                               log=f"L/job-{n}.log")

    err = io.StringIO()
    with View(err, io.StringIO(), quiet=False, total=4, log_dir="L") as view:
        view.finished(None, job(1, "done", 65.0))
        view.finished(None, job(2, "failed", 2.04, "exit 3"))
        view.finished(None, job(3, "failed", None, "killed (SIGKILL)"))  # a time no one measured is not made up
        view.finished(None, job(4, "not started", None, "--wait 10s ran out"))
    assert err.getvalue().splitlines() == [
        "gpulaunch each: 4 jobs, logs in L", "gpulaunch each: job 1/4 done after 1m05s",
        "gpulaunch each: job 2/4 failed: exit 3 after 2.0s (log L/job-2.log)",
        "gpulaunch each: job 3/4 failed: killed (SIGKILL) (log L/job-3.log)",
        "gpulaunch each: job 4/4 not started: --wait 10s ran out"]


def _state(n: int, status: str, gpus: str = "0", seconds: float | None = 2.0, outcome: str = "exit 0") -> object:
    from types import SimpleNamespace

    return SimpleNamespace(job=SimpleNamespace(number=n, line=n, argv=("python", f"t{n}.py")), status=status,
                           returncode=0, outcome=outcome, note="", node="", gpus=gpus, seconds=seconds,
                           log=f"/logs/job-{n}.log", argv=None, text=f"python t{n}.py --lr 0.{n}")


class _Terminal:
    """A stream that says it is a terminal (rich draws on it), its text kept."""

    def __init__(self) -> None:
        import io

        self.buffer = io.StringIO()

    def write(self, text: str) -> int:
        return self.buffer.write(text)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return True

    def lines(self) -> list[str]:
        import re

        return [line.rstrip() for line in re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", self.buffer.getvalue()).splitlines()]


def test_each_cuts_its_summary_rows_to_the_width_with_two_spaces_between_columns() -> None:
    from gpu_launch.views.each_view import fit_rows

    rows = [["JOB", "STATUS", "COMMAND"], ["1", "done", "python train.py --lr 0.1 --epochs 30"],
            ["12", "failed", "python train.py --lr 0.01"]]
    assert fit_rows(rows, 30) == ["JOB  STATUS  COMMAND", "1    done    python train.py …",
                                  "12   failed  python train.py …"]
    assert all(len(line) <= 30 for line in fit_rows(rows, 30))
    # the command is left out rather than cut below 12 characters: LOG goes first to make room for it
    rows = [["JOB", "STATUS", "LOG", "COMMAND"], ["1", "done", "/logs/job-1.log", "python train.py --lr 0.1 --epochs 30"]]
    assert fit_rows(rows, 40) == ["JOB  STATUS  COMMAND", "1    done    python train.py --lr 0.1 -…"]


def test_each_json_names_only_gpu_indices_of_at_most_nine_digits() -> None:
    import io
    from types import SimpleNamespace

    from gpu_launch.views.each_view import View, summary_doc

    states = [_state(1, "done", "0,3"), _state(2, "done", "GPU-ab12,5"), _state(3, "done", "123456789,1234567890"),
              _state(4, "done", "\uff11")]  # a fullwidth 1 is a digit to Python, no GPU index
    doc = summary_doc(SimpleNamespace(states=[*states, _state(5, "queued", "", None)]), "/logs")
    assert [j["gpus"] for j in doc["jobs"]] == [[0, 3], [5], [123456789], [], []]
    assert doc["counts"] == {"done": 4, "running": 0, "queued": 1, "failed": 0, "timeout": 0, "not_started": 0}
    out = io.StringIO()
    View(io.StringIO(), out, quiet=False, total=5, log_dir="/logs", json=True).summary(SimpleNamespace(states=states))
    assert out.getvalue().startswith('{\n  "schema": ') and json.loads(out.getvalue())["log_dir"] == "/logs"


def test_each_on_a_terminal_shows_the_header_once_then_each_job_and_the_live_time(monkeypatch) -> None:
    from types import SimpleNamespace

    from gpu_launch.views.each_view import View

    for name in ("NO_COLOR", "JPY_PARENT_PID", "JPY_SESSION_NAME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TERM", "xterm")
    monkeypatch.setenv("COLUMNS", "100")
    out = _Terminal()
    done = [_state(1, "done"), _state(2, "done", "1", 65.0)]
    View(_Terminal(), out, quiet=False, total=2, log_dir="/logs").summary(SimpleNamespace(states=done))
    assert out.lines() == ["2 done, 0 running, 0 queued, 0 failed; logs in /logs/",
                           "Job  Status  Result  GPUs  Time   Log        Command",
                           "1    done    exit 0  0     2.0s   job-1.log  python t1.py --lr 0.1",
                           "2    done    exit 0  1     1m05s  job-2.log  python t2.py --lr 0.2"]
    err = _Terminal()
    running = _state(3, "running", "2", None)  # just started: no time measured yet
    with View(err, out, quiet=False, total=3, log_dir="/logs") as view:
        view.refresh(SimpleNamespace(states=[*done, running], running=[running]), force=True)
    assert "job 3  GPU 2  0.0s  python t3.py --lr 0.3" in err.lines()


def test_a_narrow_ls_keeps_who_holds_a_gpu_as_long_as_its_heading_fits() -> None:
    from gpu_launch.hardware import snapshot
    from gpu_launch.views import render

    machine = snapshot.resolve("workstation-4x")
    held = {machine.gpus[0].uuid: "alice train.py"}
    lines = render.ls_plain(machine, held, width=28).splitlines()  # GPU, FREE, UTIL take 19 + 2 + "HELD BY"
    assert lines[1:3] == ["GPU      FREE  UTIL  HELD BY", "0    48.0 GiB    0%  alice …"]
    assert all(len(line) <= 28 for line in lines)
    assert render.ls_plain(machine, held, width=27).splitlines()[1] == "GPU      FREE  UTIL"


def test_a_jobs_detail_says_the_exit_code_or_the_signal_of_a_cancelled_one() -> None:
    from gpu_launch.jobs.status import Status
    from gpu_launch.jobs.store import Job
    from gpu_launch.views import jobs_table

    def job(**fields: object) -> Job:
        return Job("4", "cancelled", ("python", "t.py"), (), "/tmp", "h", "", "/locks", 1.0e9, started=1.0e9 + 1,
                   ended=1.0e9 + 2, **fields)  # type: ignore[arg-type]

    by_signal = jobs_table.detail(Status(job(signal="SIGTERM"), "cancelled"), "/logs/4.log", now=1.0e9 + 3)
    by_code = jobs_table.detail(Status(job(exit_code=143), "cancelled"), "/logs/4.log", now=1.0e9 + 3)
    assert by_signal.splitlines()[0] == "job 4: cancelled, killed by SIGTERM"
    assert by_code.splitlines()[0] == "job 4: cancelled, exit 143"


def test_ls_cuts_the_processes_cell_to_its_room_then_the_users_then_a_single_ellipsis(monkeypatch) -> None:
    from gpu_launch.views.ls_table import Last, command_word, fit_line, fit_width

    cell = Last(processes=("alice train.py 10GiB", "bob x.py 2GiB"), users=("alice", "bob"))
    assert [cell.cut(room) for room in (35, 34, 10, 9)] == [
        "alice train.py 10GiB, bob x.py 2GiB", "alice train.py 10GiB +1", "alice, bob", "alice +1"]
    assert [fit_line("alice", w) for w in (5, 3, 1, 0)] == ["alice", "al…", "…", ""]
    assert command_word("python train.py --name 'it") == "train.py"  # an unbalanced quote: the words as they are
    assert command_word("/opt/tools/ --x") == "/opt/tools/"
    monkeypatch.setenv("COLUMNS", "0")  # not a width: a pipe then gets the full layout
    assert fit_width(object()) is None
    monkeypatch.setenv("COLUMNS", "100")
    assert fit_width(object()) == 100


def test_ls_wide_on_a_narrow_terminal_says_each_holders_whole_line_once(monkeypatch) -> None:
    from gpu_launch.commands.ls import _holders_in_full
    from gpu_launch.hardware import snapshot
    from gpu_launch.views.ls_table import Held

    machine = snapshot.resolve("dgx-h100")
    alice = Held("alice (pid 4242, for 1h02m: python train.py --lr 3e…)", "alice train.py",
                 "alice (pid 4242, for 1h02m: python train.py --lr 3e-4 --epochs 30)")
    bob = Held("bob (pid 77, for 5m)", "bob ?")  # no command known: the RESERVED BY text is the whole of it
    reserved = {machine.gpus[2].uuid: alice, machine.gpus[3].uuid: alice, machine.gpus[5].uuid: bob}
    assert _holders_in_full(machine, reserved, 80) == [
        "GPU 2, GPU 3 reserved by alice (pid 4242, for 1h02m: python train.py --lr 3e-4 --epochs 30)",
        "GPU 5 reserved by bob (pid 77, for 5m)"]
    assert _holders_in_full(machine, reserved, 1000) == []  # the full layout fits: its cells say it all


def test_ls_names_a_holder_it_knows_only_by_pid_and_wraps_a_long_note_under_the_table() -> None:
    import pytest

    from gpu_launch.commands import ls as ls_cmd
    from gpu_launch.errors import UsageError
    from gpu_launch.options import args
    from gpu_launch.reservations.holders import Holder

    assert ls_cmd._held(Holder()).short == "another gpulaunch job"  # an unreadable lock file
    assert ls_cmd._held(Holder(pid=4242)).short == "pid 4242"
    assert ls_cmd._held(Holder(pid=4242, user="alice", command="python  train.py --lr 3e-4")).whole == (
        "alice (pid 4242: python train.py --lr 3e-4)")  # ls --wide: the whole command, inside the parenthesis
    assert ls_cmd._wrap("no GPU is free: every one is reserved by another user right now", 30) == (
        "no GPU is free: every one is\n  reserved by another user\n  right now\n")
    assert ls_cmd._wrap("short", 30) == "short\n"
    with pytest.raises(UsageError, match=r"^`ls` takes no arguments, got 'train\.py'$"):
        ls_cmd.run(args.parse(["ls", "train.py", "x"]))


def test_the_queue_says_what_its_head_keeps_and_how_many_gpus_it_lends() -> None:
    from types import SimpleNamespace

    def head(kept: tuple[str, ...], lends: tuple[str, ...]) -> object:
        return SimpleNamespace(**waiter(1, 5).__dict__, kept=kept, lends=lends)

    def last(w: object) -> str:
        return queue_table.as_text([w], None, now=NOW).splitlines()[-1]

    assert last(head(("GPU 0",), ("GPU-aa",))) == "kept for the head: GPU 0; lent to later waiters: 1 GPU"
    assert last(head((), ("GPU-aa", "GPU-bb"))) == "kept for the head: none yet; lent to later waiters: 2 GPUs"
    assert last(head(("GPU 0", "GPU 1"), ())) == "kept for the head: GPU 0, GPU 1; it lends no GPU"


def test_ls_on_a_terminal_cuts_a_wide_table_at_the_right_colours_holders_and_says_warnings(monkeypatch) -> None:
    import re
    from dataclasses import replace

    from gpu_launch.hardware import snapshot
    from gpu_launch.views import render

    for name in ("NO_COLOR", "JPY_PARENT_PID", "JPY_SESSION_NAME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TERM", "xterm")
    machine = replace(snapshot.resolve("dgx-h100"), warnings=("GPU 7: NVML could not read its clocks",))
    held = {machine.gpus[1].uuid: "alice (pid 4242, for 5m: python train.py)"}
    out = _Terminal()
    render.ls_rich(machine, out, held, width=60, wide=True)
    lines = out.lines()
    rows = [line for line in lines if re.match(r"^\d ", line)]
    assert [row.split()[0] for row in rows] == [str(i) for i in range(8)]  # every GPU's number whole
    assert all(len(line) <= 60 for line in lines[:-1]) and all(row.endswith("…") for row in rows)
    assert lines[-1] == "warning: GPU 7: NVML could not read its clocks"
    out = _Terminal()
    render.ls_rich(machine, out, held, width=200)
    assert "\x1b[35malice" in out.buffer.getvalue()  # who holds a GPU stands out (magenta)


def test_the_memory_bar_topo_and_a_wrapped_header_show_what_there_is(monkeypatch) -> None:
    from dataclasses import replace

    from gpu_launch.hardware import snapshot
    from gpu_launch.views import render

    assert [render._bar(u, t, 4) for u, t in ((0, 8), (2, 8), (8, 8), (9, 8), (None, 8), (3, 0))] == [
        "░░░░", "█░░░", "████", "████", "    ", "    "]
    assert render._wrapped("x" * 30, 30) == "x" * 30
    assert render._wrapped("one two three", 9) == "one two\n  three"
    machine = snapshot.resolve("workstation-4x")
    lines = render.topo_plain(machine).splitlines()
    assert lines[0].endswith("CPU Affinity  NUMA Affinity")
    assert lines[1].split() == ["GPU0", "X", "PHB", "NV4", "PHB", "0-63", "0"]
    unknown = replace(machine, gpus=tuple(replace(g, numa_node=None) for g in machine.gpus))
    assert render.topo_plain(unknown).splitlines()[1].split()[-1] == "N/A"
    for name in ("NO_COLOR", "JPY_PARENT_PID", "JPY_SESSION_NAME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TERM", "xterm")
    monkeypatch.setenv("COLUMNS", "120")
    out = _Terminal()
    render.topo_rich(machine, out)
    assert out.lines()[1].split()[-2:] == ["0-63", "0"]
    out = _Terminal()
    render.ls_rich(machine, out, {machine.gpus[0].uuid: "alice (pid 1, for 5m)"}, width=160)
    text = out.buffer.getvalue()
    rows = [line for line in out.lines() if line[:1].isdigit()]
    assert len(rows) == 4 and all("░" in row for row in rows)  # every GPU's memory bar, when there is room
    assert "\x1b[35m–" not in text  # a GPU nobody holds is not shown as held


def test_each_jsons_schema_takes_job_1_and_refuses_a_negative_gpu_index() -> None:
    import pytest

    jsonschema = pytest.importorskip("jsonschema")
    from types import SimpleNamespace

    from gpu_launch.views import schemas
    from gpu_launch.views.each_view import summary_doc

    doc = summary_doc(SimpleNamespace(states=[_state(1, "done", "0"), _state(2, "done", "1,2")]), "/logs")
    jsonschema.Draft202012Validator(schemas.EACH).validate(doc)  # job 1 is a job (job-1.log, Slurm task 1)
    doc["jobs"][0]["gpus"] = [-1]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft202012Validator(schemas.EACH).validate(doc)


def test_watch_cuts_each_redrawn_line_to_the_terminal_and_each_asks_without_a_live_display(monkeypatch) -> None:
    import io

    from gpu_launch.views import watch
    from gpu_launch.views.each_view import View

    monkeypatch.setenv("COLUMNS", "20")
    out = io.StringIO()
    watch._draw(lambda width: "GPU 0 " + "x" * 40 + "\nGPU 1 free\n", 2.0, out, tty=True)
    lines = out.getvalue().removeprefix(watch._HOME).removesuffix(watch._CLEAR_BELOW).split(watch._CLEAR_LINE + "\n")
    assert all(len(line) <= 20 for line in lines) and "GPU 0 xxxxxxxxxxxxx…" in lines and "GPU 1 free" in lines
    monkeypatch.setattr("builtins.input", lambda: "y")
    err = io.StringIO()
    assert View(err, io.StringIO(), quiet=False, total=1, log_dir="/logs").ask("cancel the array? [y/N] ")
    assert err.getvalue() == "gpulaunch each: cancel the array? [y/N] "
