"""A job's files at the level of bytes, relative to the job directory's descriptor: its record written
atomically, read back, and the cancel request read.

Only the standard library (os, json): a detached job's supervisor (:mod:`gpu_launch.jobs.supervisor`)
imports this and nothing else of gpulaunch, so that each waiting job costs as little memory as a
Python process can (docs/performance.md, "Detached jobs"). :class:`gpu_launch.jobs.store.JobDir`
writes through the same functions, so a record is written one way only.
"""

from __future__ import annotations

import json
import os

__all__ = ["FILE_FLAGS", "MAX_RECORD", "OUTCOME_SIZE", "write", "load", "cancel_grace", "reserve", "keep_outcome",
           "load_outcome", "drop_outcome"]

FILE_FLAGS = os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
MAX_RECORD = 1 << 20  # bytes: a record larger than this is not read
OUTCOME_SIZE = 4096  # bytes set aside per running job for how it ended (its state, exit code, signal, note)


def write(dir_fd: int, job_id: str, doc: dict) -> None:  # type: ignore[type-arg]
    """Replace the record ``ID.json`` with ``doc``, atomically and durably: a new file, written,
    ``fsync``-ed and renamed over the old one, then the directory ``fsync``-ed."""
    data = (json.dumps(doc, indent=1) + "\n").encode("utf-8")
    temp = f".{job_id}.json.{os.urandom(4).hex()}"  # not `secrets`: it imports random, hashlib, ...
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | FILE_FLAGS, 0o600, dir_fd=dir_fd)
    try:
        view = memoryview(data)
        while view:  # a nearly full disk writes short before it fails: never rename half a record
            view = view[os.write(fd, view):]
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        os.unlink(temp, dir_fd=dir_fd)
        raise
    os.close(fd)
    try:
        os.replace(temp, f"{job_id}.json", src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        os.unlink(temp, dir_fd=dir_fd)
        raise
    os.fsync(dir_fd)


def load(dir_fd: int, job_id: str) -> dict:  # type: ignore[type-arg]
    """The record as it is stored (OSError or ValueError when it cannot be read)."""
    fd = os.open(f"{job_id}.json", os.O_RDONLY | FILE_FLAGS, dir_fd=dir_fd)
    try:
        raw = os.read(fd, MAX_RECORD + 1)
    finally:
        os.close(fd)
    doc = json.loads(raw) if len(raw) <= MAX_RECORD else None
    if not isinstance(doc, dict):
        raise ValueError("not a job record")
    return doc


def cancel_grace(dir_fd: int, job_id: str) -> float | None:
    """The grace a cancel asked for (``.ID.cancel``); None when no cancel was asked for."""
    try:
        fd = os.open(f".{job_id}.cancel", os.O_RDONLY | FILE_FLAGS, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        text = os.read(fd, 64).decode("ascii", "replace").strip()
    finally:
        os.close(fd)
    try:
        return min(max(float(text), 0.0), 3600.0)
    except ValueError:
        return 10.0


# How a job ended, kept where a full disk cannot lose it. The supervisor sets ``.ID.outcome`` aside
# (allocated, not only sized) while the disk has room; when the record cannot be written at the end
# (no space, no inode left for the new file), the outcome is written over those blocks, which needs
# none, and the record is retried until it can be written. The store reads the outcome over a record
# that is not over (:meth:`gpu_launch.jobs.store.JobDir.read`).

def _outcome_name(job_id: str) -> str:
    return f".{job_id}.outcome"


def reserve(dir_fd: int, job_id: str) -> int | None:
    """``.ID.outcome``, its :data:`OUTCOME_SIZE` bytes allocated, open for writing; None where it cannot be."""
    try:
        fd = os.open(_outcome_name(job_id), os.O_RDWR | os.O_CREAT | os.O_TRUNC | FILE_FLAGS, 0o600, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        os.posix_fallocate(fd, 0, OUTCOME_SIZE)
        os.fsync(fd)
    except OSError:
        os.close(fd)
        drop_outcome(dir_fd, job_id)
        return None
    return fd


def keep_outcome(fd: int, changes: dict) -> bool:  # type: ignore[type-arg]
    """Write how the job ended over the set-aside blocks (spaces after it: still JSON); False if it does not fit."""
    data = json.dumps(changes).encode("utf-8")
    if len(data) > OUTCOME_SIZE:
        return False
    try:
        os.pwrite(fd, data + b" " * (OUTCOME_SIZE - len(data)), 0)
        os.fsync(fd)
    except OSError:
        return False
    return True


def load_outcome(dir_fd: int, job_id: str) -> dict | None:  # type: ignore[type-arg]
    """The outcome a supervisor kept for ``job_id``, None when there is none (or it is not one)."""
    try:
        fd = os.open(_outcome_name(job_id), os.O_RDONLY | FILE_FLAGS, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        raw = os.read(fd, OUTCOME_SIZE + 1) if st.st_uid == os.getuid() and (st.st_mode & 0o170000) == 0o100000 else b""
    finally:
        os.close(fd)
    text = raw.strip(b"\0 \n")
    try:
        doc = json.loads(text) if text and len(raw) <= OUTCOME_SIZE else None
    except ValueError:
        return None
    return doc if isinstance(doc, dict) else None


def drop_outcome(dir_fd: int, job_id: str) -> None:
    try:
        os.unlink(_outcome_name(job_id), dir_fd=dir_fd)
    except OSError:
        pass
