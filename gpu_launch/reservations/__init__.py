"""Reservations: which GPU belongs to which job, for exactly as long as the job runs.

Every GPU (or MIG device) has a lock file, named by its UUID, in a lock directory shared by the machine's
users (``lockdir``: where it is, its kind, files opened safely; ``hardening``: the admin's directory of
``locks init``). A job reserves a GPU by an exclusive ``flock`` that the command itself inherits and holds
(``reservations``), so the reservation ends when the command exits, crashes or is killed, ``kill -9``
included: no daemon, no stale lock, no clean-up. Each lock file says who holds it (``holders``); a job's
children share out its GPUs with nested locks (``nesting``); selecting and locking are one step, so a
GPU is never handed to two jobs (``acquire``); waiters queue first come, first served (``waitqueue``,
``waiting``). What each kind of lock directory promises against another user (a private one: nothing
can be planted; the /tmp kind: fair play; a hardened one: nothing a reservation relies on can be
tampered with) is in docs/sharing.md.
"""
