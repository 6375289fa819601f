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

__all__ = ["FILE_FLAGS", "MAX_RECORD", "write", "load", "cancel_grace"]

FILE_FLAGS = os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
MAX_RECORD = 1 << 20  # bytes: a record larger than this is not read


def write(dir_fd: int, job_id: str, doc: dict) -> None:  # type: ignore[type-arg]
    """Replace the record ``ID.json`` with ``doc``, atomically and durably: a new file, written,
    ``fsync``-ed and renamed over the old one, then the directory ``fsync``-ed."""
    data = (json.dumps(doc, indent=1) + "\n").encode("utf-8")
    temp = f".{job_id}.json.{os.urandom(4).hex()}"  # not `secrets`: it imports random, hashlib, ...
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | FILE_FLAGS, 0o600, dir_fd=dir_fd)
    try:
        os.write(fd, data)
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        os.unlink(temp, dir_fd=dir_fd)
        raise
    os.close(fd)
    os.replace(temp, f"{job_id}.json", src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
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
