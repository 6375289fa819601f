"""How the nodes of a run find the head: its address as Slurm knows it, a port picked on it, a shared file.

* **The node list and the head** come from Slurm itself: ``scontrol show hostnames`` expands the step's
  node list (no shell expands anything), the head is the first node, and its address is the ``NodeAddr``
  slurmctld has for it (``scontrol show node``), resolved to a number on the head. Where that is a
  loopback address (Debian's ``127.0.1.1 HOSTNAME`` line, a NodeAddr left at the name) while the other
  nodes are elsewhere, the head takes the address of its interface that routes to them instead; a
  loopback address is kept only when every node's is loopback (all on one host, as in a test cluster).
* **The port** is picked on the head for this run: a port the kernel hands out and the head could bind
  on its address (never a fixed 29500 or 6379 that two jobs on one node would both take).
* **Published** as a small JSON file in the run's directory, ``LOGDIR/.nodes/JOB.STEP/`` on the shared
  filesystem ``each --slurm`` already needs (a directory of this user's alone, the file written under a random
  name without following a symlink, then renamed into place: :mod:`gpu_launch.cluster.rundir`), read back only
  as a small regular file of this user's with every field checked, and waited for by
  the other nodes with a bound (``GPULAUNCH_RENDEZVOUS_TIMEOUT``, default 300 s). A node then checks that
  it can reach the head (a refused connection counts: the engine is not listening yet), so a wrong
  address or interface is one clear line, not an engine hanging for its own timeout. Where the head's
  engine already listens, that check is one connection closed at once, which the engines' stores (torch's
  TCPStore, Ray's GCS) take as a client that went away.
"""

from __future__ import annotations

import errno
import json
import os
import socket
import subprocess
import time
from collections.abc import Mapping, Sequence

from gpu_launch.errors import RendezvousFailed, SlurmUnavailable, UsageError

__all__ = ["TIMEOUT_ENV", "timeout", "hostnames", "node_addresses", "resolve", "head_address", "route_to",
           "free_port", "check_port", "publish", "run_dir", "write_file", "wait_for", "probe", "is_loopback", "IFNAME_HINT"]

TIMEOUT_ENV = "GPULAUNCH_RENDEZVOUS_TIMEOUT"
DEFAULT_TIMEOUT = 300.0
IFNAME_HINT = ("is it the head's address on the network the nodes share? Set NCCL_SOCKET_IFNAME and "
               "GLOO_SOCKET_IFNAME to that interface (e.g. ib0), or name the head with --head HOST:PORT")


def timeout(environ: Mapping[str, str]) -> float:
    """Seconds a node waits for the head: ``GPULAUNCH_RENDEZVOUS_TIMEOUT`` (a duration), else 300."""
    text = environ.get(TIMEOUT_ENV)
    if not text:
        return DEFAULT_TIMEOUT
    from gpu_launch.base.units import parse_duration

    return parse_duration(text, TIMEOUT_ENV)


def _scontrol(args: Sequence[str], environ: Mapping[str, str]) -> str:
    from gpu_launch.cluster.submitting import require

    try:
        proc = subprocess.run([require("scontrol", environ), *args], capture_output=True, text=True, timeout=60,
                              env=dict(environ))
    except (subprocess.TimeoutExpired, OSError) as exc:
        raise SlurmUnavailable(f"scontrol {args[0]} {args[1]} did not answer ({exc})",
                               hint="is slurmctld up? try `sinfo`") from None
    if proc.returncode != 0:
        said = (proc.stderr or proc.stdout).strip().splitlines()
        raise SlurmUnavailable(f"scontrol {' '.join(args)} failed: {said[-1] if said else 'no message'}",
                               hint="is slurmctld up? try `sinfo`")
    return proc.stdout


def hostnames(nodelist: str, environ: Mapping[str, str]) -> tuple[str, ...]:
    """``n[1-3]`` → ``("n1", "n2", "n3")``, by Slurm's own ``scontrol show hostnames``."""
    return tuple(_scontrol(["show", "hostnames", nodelist], environ).split())


def node_addresses(nodelist: str, environ: Mapping[str, str]) -> dict[str, str]:
    """Each node's ``NodeAddr`` as slurmctld has it (the name itself where none was configured)."""
    out: dict[str, str] = {}
    for line in _scontrol(["show", "node", "-o", nodelist], environ).splitlines():
        fields = dict(part.split("=", 1) for part in line.split() if "=" in part)
        if "NodeName" in fields:
            out[fields["NodeName"]] = fields.get("NodeAddr") or fields["NodeName"]
    return out


def is_loopback(addr: str) -> bool:
    return addr.startswith("127.") or addr in ("::1", "0:0:0:0:0:0:0:1")


def resolve(host: str) -> str:
    """``host`` as a numeric address (IPv4 first), as this machine resolves it."""
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise RendezvousFailed(f"the address {host!r} does not resolve on {socket.gethostname()}: {exc}",
                               hint=IFNAME_HINT) from None
    infos.sort(key=lambda info: info[0] != socket.AF_INET)
    return str(infos[0][4][0])


def route_to(addr: str) -> str:
    """This machine's own address on the interface that routes to ``addr`` (no packet is sent)."""
    family = socket.AF_INET6 if ":" in addr else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as sock:
        try:
            sock.connect((addr, 9))
        except OSError as exc:
            raise RendezvousFailed(f"no route from {socket.gethostname()} to {addr}: {exc.strerror}",
                                   hint=IFNAME_HINT) from None
        return str(sock.getsockname()[0])


def head_address(names: Sequence[str], addresses: Mapping[str, str]) -> str:
    """The head's (``names[0]``) address for the other nodes: its NodeAddr, never a loopback address
    unless every node's is one (see the module's docstring)."""
    own = resolve(addresses.get(names[0], names[0]))
    if not is_loopback(own) or len(names) == 1:
        return own
    others = [resolve(addresses.get(name, name)) for name in names[1:]]
    away = [addr for addr in others if not is_loopback(addr)]
    return route_to(away[0]) if away else own


def free_port(addr: str) -> int:
    """A port this machine can bind on ``addr`` now, picked by the kernel for this run."""
    family = socket.AF_INET6 if ":" in addr else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((addr, 0))
        except OSError as exc:
            raise RendezvousFailed(f"cannot bind a port on {addr} on {socket.gethostname()}: {exc.strerror}",
                                   hint=IFNAME_HINT) from None
        return int(sock.getsockname()[1])


def publish(path: str, record: Mapping[str, object], environ: Mapping[str, str] = os.environ) -> None:
    """Write ``record`` whole, then rename it into place: a reader never sees half of it."""
    write_file(path, json.dumps(record), environ)


def run_dir(path: str, environ: Mapping[str, str] = os.environ) -> str:
    """The run's directory ``LOGDIR/.nodes/JOB``, made (mode 0700) or checked as this user's alone
    (:mod:`gpu_launch.cluster.rundir`): every node makes it, so that whichever comes first, a directory
    another user planted there is refused."""
    from gpu_launch.cluster import rundir

    nodes_dir = os.path.dirname(path)
    return rundir.make_dirs(os.path.dirname(nodes_dir), (os.path.basename(nodes_dir), os.path.basename(path)),
                            environ)


def write_file(path: str, text: str, environ: Mapping[str, str] = os.environ) -> None:
    """``text`` at ``path`` in the run's directory (made and checked), written under a random name
    without following a symlink, fsync-ed and renamed into place."""
    from gpu_launch.cluster import rundir

    rundir.write_new(run_dir(os.path.dirname(path), environ), os.path.basename(path), text, environ)


def wait_for(path: str, deadline: float, what: str) -> dict[str, object]:
    """The record at ``path`` once it exists (polled: another node writes it on a shared filesystem), read
    only as a small regular file of this user's (:func:`gpu_launch.cluster.rundir.read_own`)."""
    from gpu_launch.cluster import rundir

    pause, began = 0.02, time.monotonic()
    while True:
        try:
            return rundir.read_own(path)
        except rundir.Missing:
            pass
        if time.monotonic() >= deadline:
            raise RendezvousFailed(f"{what} did not appear in {os.path.dirname(path)} within "
                                   f"{max(0.0, deadline - began):.0f} s", hint="is that directory on a filesystem every node "
                                   f"shares (--log-dir)? did the head's node task start? ({TIMEOUT_ENV} sets the wait)")
        time.sleep(pause)
        pause = min(0.5, pause * 2)


#: connect() errors that mean the host did not answer (as opposed to ECONNREFUSED: it answered, nothing listens)
_UNREACHED = {errno.EHOSTUNREACH, errno.ENETUNREACH, errno.ETIMEDOUT, errno.EHOSTDOWN, errno.ENETDOWN}


def check_port(port: int) -> None:
    """A port given by hand for the head must be free here: two runs on one port would join each other."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("", port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise RendezvousFailed(f"port {port} is in use on {socket.gethostname()}: another job has it",
                                       hint="pick another --head HOST:PORT, or leave the port out: the head then "
                                            "picks a free one") from None


def probe(host: str, port: int, deadline: float, listening: bool = False) -> None:
    """Return once ``host:port`` answers, even with a refusal (the engine may not be listening yet; with
    ``listening``, only once it accepts); fail with the interface hint when the host cannot be reached
    until ``deadline``."""
    if not port or not 0 < port < 65536:
        raise UsageError(f"--head {host}:{port}: {port} is not a port")
    addr = resolve(host)
    family = socket.AF_INET6 if ":" in addr else socket.AF_INET
    why = ""
    while True:
        left = deadline - time.monotonic()
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            sock.settimeout(max(0.2, min(5.0, left)))
            try:
                sock.connect((addr, port))
                return
            except ConnectionRefusedError:
                if not listening:
                    return
                why = "nothing listens there"
            except socket.timeout:
                why = "no answer"
            except OSError as exc:
                if exc.errno not in _UNREACHED:
                    raise RendezvousFailed(f"the head {host}:{port} cannot be reached from {socket.gethostname()}: "
                                           f"{exc.strerror}", hint=IFNAME_HINT) from None
                why = exc.strerror or "unreachable"
        if time.monotonic() >= deadline:
            raise RendezvousFailed(f"the head {host}:{port} cannot be reached from {socket.gethostname()}: {why}",
                                   hint=IFNAME_HINT)
        time.sleep(0.2)
