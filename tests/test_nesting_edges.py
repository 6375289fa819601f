"""The slips in nested reservations a user would suffer (issue 37): the names of the lock files at each
depth, the depth bound (a launch nested MAX_DEPTH - 1 deep is refused, one less is not), a sibling's
lock one level deeper seen as taken, this process's own API locks never taken for its job's.
Unit-level: real flocks in a private lock directory; a sibling is a forked process."""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from gpu_launch.reservations import lockdir, nesting
from gpu_launch.reservations.lockdir import MAX_DEPTH, nested_path

A, B = "GPU-aaaa", "GPU-bbbb"


def test_each_depth_has_its_own_file_beside_the_machine_wide_one(tmp_path: Path) -> None:
    d = str(tmp_path)
    assert nested_path(d, A, 0) == lockdir.lock_path(d, A)
    names = [os.path.basename(nested_path(d, A, depth)) for depth in range(1, MAX_DEPTH)]
    assert names == [f"GPU-aaaa.in{n}.lock" for n in range(1, MAX_DEPTH)]
    assert os.path.dirname(nested_path(d, A, 3)) == d
    assert os.path.basename(nested_path(d, "MIG-1/2/3", 1)) == "MIG-1_2_3.in1.lock"  # never a path
    assert MAX_DEPTH == 8  # documented in docs/sharing.md ("Nested launches"); locks init makes them all


def hold(path: str) -> int:
    """An inherited (job's) reservation: an inheritable descriptor holding the exclusive flock."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    os.set_inheritable(fd, True)
    fcntl.flock(fd, fcntl.LOCK_EX)
    return fd


@contextmanager
def sibling_holds(path: str) -> Iterator[None]:
    """Another child of the same job holds ``path`` (a forked process: not this one's ancestor)."""
    ready_r, ready_w = os.pipe()
    done_r, done_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover (the child)
        try:
            os.close(done_w)
            os.close(ready_r)
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            fcntl.flock(fd, fcntl.LOCK_EX)
            os.write(ready_w, b"x")
            os.read(done_r, 1)
        finally:
            os._exit(0)
    os.close(ready_w)
    os.close(done_r)
    try:
        assert os.read(ready_r, 1) == b"x"
        yield
    finally:
        os.close(done_w)
        os.close(ready_r)
        os.waitpid(pid, 0)


def test_outside_any_job_nothing_is_an_allotment(tmp_path: Path) -> None:
    d = str(tmp_path)
    with sibling_holds(nested_path(d, A, 0)):
        found = nesting.resolve(d, [A])
    assert (found.allotted, found.depth, found.taken, found.too_deep) == (frozenset(), {}, {}, frozenset())


def test_a_jobs_gpu_is_shared_out_one_level_deeper(tmp_path: Path) -> None:
    d = str(tmp_path)
    fds = [hold(nested_path(d, A, 0)), hold(nested_path(d, B, 0))]
    try:
        found = nesting.resolve(d, [A, B])
        assert found.allotted == {A, B} and found.depth == {A: 1, B: 1} and not found.taken
        with sibling_holds(nested_path(d, B, 1)):  # a sibling job of ours took B inside the allotment
            found = nesting.resolve(d, [A, B])
            assert found.depth == {A: 1} and set(found.taken) == {B} and found.allotted == {A, B}
        fds.append(hold(nested_path(d, A, 1)))  # we are a child that holds A one level deeper: ours goes deeper
        found = nesting.resolve(d, [A, B])
        assert found.depth == {A: 2, B: 1}
    finally:
        for fd in fds:
            os.close(fd)


def test_a_gpu_in_use_outside_the_allotment_is_not_ours(tmp_path: Path) -> None:
    d = str(tmp_path)
    fd = hold(nested_path(d, A, 0))
    try:
        with sibling_holds(nested_path(d, B, 0)):
            found = nesting.resolve(d, [A, B])
        assert found.allotted == {A} and found.depth == {A: 1} and B not in found.taken
    finally:
        os.close(fd)


def test_nesting_stops_at_the_last_depth_and_not_one_before(tmp_path: Path) -> None:
    d = str(tmp_path)
    fds = [hold(nested_path(d, A, depth)) for depth in range(MAX_DEPTH - 1)]  # depths 0..6: room for 7
    try:
        found = nesting.resolve(d, [A])
        assert found.depth == {A: MAX_DEPTH - 1} and not found.too_deep
        fds.append(hold(nested_path(d, A, MAX_DEPTH - 1)))  # depth 7 held too: no deeper file exists
        found = nesting.resolve(d, [A])
        assert found.too_deep == {A} and found.depth == {}
    finally:
        for fd in fds:
            os.close(fd)


def test_this_processes_own_api_locks_are_not_its_jobs(tmp_path: Path) -> None:
    d = str(tmp_path)
    fd = hold(nested_path(d, A, 0))
    try:
        assert nesting.lineage_holds({(A, 0): nested_path(d, A, 0)}) == {(A, 0)}
        assert nesting.lineage_holds({(A, 0): nested_path(d, A, 0)}, mine={(A, 0)}) == set()
        assert nesting.resolve(d, [A], mine={(A, 0)}).allotted == frozenset()
    finally:
        os.close(fd)


def test_a_close_on_exec_descriptor_is_no_reservation_handed_down(tmp_path: Path) -> None:
    d = str(tmp_path)
    fd = hold(nested_path(d, A, 0))
    os.set_inheritable(fd, False)  # a gpulaunch's own working copy, not its job's reservation
    try:
        assert nesting.lineage_holds({(A, 0): nested_path(d, A, 0)}) == set()
    finally:
        os.close(fd)


def _parent_of(pid: int) -> int:
    """The kernel's PPid line of /proc/PID/status (another file than the one gpulaunch reads)."""
    line = next(ln for ln in Path(f"/proc/{pid}/status").read_text().splitlines() if ln.startswith("PPid:"))
    return int(line.split()[1])


def test_ancestors_are_the_parent_chain(tmp_path: Path) -> None:
    chain = nesting.ancestors()
    assert chain and chain[0] == os.getppid() and os.getpid() not in chain and 1 not in chain
    grandparent = _parent_of(os.getppid())
    assert chain[1:2] == ((grandparent,) if grandparent > 1 else ())
    assert nesting.ancestors(skip={os.getppid()})[:1] != (os.getppid(),)


def test_a_lock_file_not_made_yet_does_not_hide_the_others(tmp_path: Path) -> None:
    d = str(tmp_path)
    fd = hold(nested_path(d, B, 0))
    try:
        paths = {(A, 0): nested_path(d, A, 0), (B, 0): nested_path(d, B, 0)}  # A's file does not exist
        assert nesting.lineage_holds(paths) == {(B, 0)}
    finally:
        os.close(fd)


# --- the lock dir itself: what config and ls say of it, a file made by another at the same moment ------------------------

def test_config_says_a_lock_dir_not_made_yet_and_one_not_hardened(tmp_path: Path) -> None:
    assert lockdir.describe_dir(str(tmp_path / "none")) == "not created yet; not hardened"
    assert lockdir.describe_dir(str(tmp_path)) == "not hardened: a lock file's owner can remove it"


def test_a_lock_dir_that_cannot_be_read_is_shared_by_no_one_known(tmp_path: Path) -> None:
    assert lockdir.shared_by(str(tmp_path / "none")) == frozenset()
    assert lockdir.shared_note(str(tmp_path / "none")) is None


def test_ls_says_when_two_users_can_remove_each_others_locks(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root: a lock file of another user is made with chown")
    d = tmp_path / "locks"
    d.mkdir()
    mine = d / "GPU-aaaa.lock"
    mine.write_text("")
    assert lockdir.shared_note(str(d)) is None  # only root's files, root's directory: one user
    theirs = d / "GPU-bbbb.lock"
    theirs.write_text("")
    os.chown(theirs, 65534, 65534)
    assert lockdir.shared_note(str(d)) == "lock dir: 2 users can remove each other's locks (fix: sudo gpulaunch locks init)"


def test_a_lock_file_another_process_creates_at_the_same_moment_is_opened_not_an_error(tmp_path: Path,
                                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Two launches open the same new lock file: one creates it, the other's O_EXCL fails; that one opens it."""
    path = str(tmp_path / "GPU-aaaa.lock")
    real_open = os.open
    calls: list[int] = []

    def racing_open(p: str, flags: int, mode: int = 0o777, **kw: object) -> int:
        calls.append(flags)
        if p == path and len(calls) == 1:
            raise FileNotFoundError(p)  # not there yet...
        if p == path and flags & os.O_EXCL:
            os.close(real_open(p, os.O_CREAT | os.O_WRONLY, 0o666))  # ...another process made it just now
            raise FileExistsError(p)
        return real_open(p, flags, mode)

    monkeypatch.setattr(lockdir.os, "open", racing_open)
    fd = lockdir.open_shared(path)
    assert fd is not None and len(calls) == 3
    os.close(fd)


def test_a_planted_symlink_one_level_deeper_makes_that_gpu_unusable_not_an_error(tmp_path: Path) -> None:
    """Inside a job holding A and B, a symlink planted at A's next depth (`GPU-aaaa.in1.lock`) is never
    followed: A is unusable within the allotment (said so), B is still shared out."""
    d = str(tmp_path)
    fds = [hold(nested_path(d, A, 0)), hold(nested_path(d, B, 0))]
    os.symlink(str(tmp_path / "elsewhere"), nested_path(d, A, 1))
    try:
        found = nesting.resolve(d, [A, B])
    finally:
        for fd in fds:
            os.close(fd)
    assert found.allotted == {A, B} and found.depth == {B: 1} and set(found.unusable) == {A} and not found.taken
    assert not (tmp_path / "elsewhere").exists()


def test_another_users_lock_dir_is_used_when_sticky_and_world_writable_and_refused_otherwise(tmp_path: Path) -> None:
    """A lock dir colleagues share (another user's, mode 1777 like /tmp) is used; one of theirs that only they
    can write (or that is world-writable without the sticky bit) is refused with the way out."""
    from gpu_launch.errors import LockDirError

    if os.getuid() != 0:
        pytest.skip("a directory of another user's is made by root only")
    shared = tmp_path / "locks"
    shared.mkdir()
    os.chown(shared, 4321, 4321)
    shared.chmod(0o1777)
    assert lockdir.prepare_dir(str(shared), create=False) is True
    for mode in (0o755, 0o777, 0o1755):
        shared.chmod(mode)
        with pytest.raises(LockDirError, match=rf"is not sticky and world-writable \(mode {mode:04o}\)"):
            lockdir.prepare_dir(str(shared), create=False)
