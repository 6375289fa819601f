"""A real Slurm for the tests: munged, slurmctld and slurmd from the Debian packages, one node or several.

The node has ``Gres=gpu:8`` backed by eight fake character devices (``mknod``, major 195 as the NVIDIA
driver's), ``AutoDetect=off``, no cgroups (``ProctrackType=proctrack/linuxproc``, ``TaskPlugin=task/none``),
so slurmd writes CUDA_VISIBLE_DEVICES with the allocation's global indices, as on a cluster without
``ConstrainDevices``. No slurmdbd: accounting is off, so ``sacct`` does not work (gpulaunch follows
with ``scontrol`` and the tasks' own records). Everything lives in one private directory with its own
munge key, socket and ports, so it neither needs nor touches a Slurm or munge of the machine.

``start(root, nodes=["n1", "n2"])`` makes a cluster of several nodes on this one host: one ``slurmd -N
NAME`` each, with its own ``Port=``, and ``%n`` (the node's name) in its spool, pid and log paths, as
Slurm's "multiple slurmd" set-up has it. A ``task_prolog`` script (slurm.conf ``TaskProlog``, run before
every task with ``SLURMD_NODENAME`` set; its ``export NAME=VALUE`` lines reach the task) can give each
fake node its own view, e.g. its own gpulaunch lock directory and snapshot.

``start(root, nodes=[...], netns=True)`` puts each slurmd in a network namespace of its own, joined to the
host by a veth pair on a bridge: every node has its own address (``NodeAddr``, 10.254.X.1, .2, ...; the
host, where slurmctld runs, is .254) and an interface named ``gl0``, and a node's loopback reaches only
itself. It is the one set-up in which a head address of 127.0.0.1 fails, so the one that proves the
address gpulaunch gives the other nodes is the head's own. :class:`NoNetwork` says why it cannot be built.
"""

from __future__ import annotations

import os
import random
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("sbatch", "scontrol", "scancel", "sinfo")


def why_not() -> str | None:
    """Why a Slurm cannot be started here, or None."""
    if os.geteuid() != 0:
        return "the Slurm tests start slurmd, which needs root"
    if not os.path.exists("/etc/debian_version"):
        return "the Slurm tests use the Debian packages slurm-wlm and munge (not a Debian system)"
    missing = [name for name in (*DAEMONS, *CLIENTS) if _which(name) is None]
    if missing:
        return f"Slurm is not installed ({', '.join(missing)} missing): apt-get install slurm-wlm munge"
    return None


class NoNetwork(RuntimeError):
    """Network namespaces, veth pairs or a bridge cannot be made here (no CAP_NET_ADMIN, no iproute2)."""


def _which(name: str) -> str | None:
    return shutil.which(name, path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class Cluster:
    root: Path
    node: str  # the first node
    env: dict[str, str]  # SLURM_CONF and PATH for the clients
    started_in: float  # seconds from the first daemon to an idle node
    procs: list[subprocess.Popen[bytes]]
    nodes: tuple[str, ...] = ()  # every node, in order
    network: Network | None = None  # each node's namespace and address, with netns=True

    def scontrol(self, *args: str) -> str:
        return subprocess.run(["scontrol", *args], capture_output=True, text=True, env={**os.environ, **self.env},
                              timeout=60).stdout

    def stop(self) -> None:
        """Cancel every job, let slurmd see them end, stop the daemons, then any slurmstepd left behind."""
        full = {**os.environ, **self.env}
        subprocess.run(["scancel", "--user", "root"], env=full, capture_output=True, timeout=60)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and subprocess.run(
                ["squeue", "-h"], env=full, capture_output=True, text=True, timeout=60).stdout.strip():
            time.sleep(0.2)
        for proc in reversed(self.procs):
            proc.terminate()
        for proc in reversed(self.procs):
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for pid in self._stepds():  # a step daemon whose slurmd is gone would retry for ever
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass
        if self.network is not None:
            self.network.remove()

    def _stepds(self) -> list[int]:
        """The slurmstepd processes of this cluster (their environment names its slurm.conf)."""
        mine = f"SLURM_CONF={self.env['SLURM_CONF']}".encode()
        found = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as fh:
                    if not fh.read().startswith(b"slurmstepd"):
                        continue
                with open(f"/proc/{entry}/environ", "rb") as fh:
                    if mine in fh.read().split(b"\0"):
                        found.append(int(entry))
            except OSError:
                continue
        return found


@dataclass
class Network:
    """A bridge on the host and one network namespace a node, each with a veth pair into the bridge."""
    bridge: str
    namespaces: dict[str, str]  # node -> namespace
    addresses: dict[str, str]  # node -> its address
    host: str  # the host's address on the bridge

    @classmethod
    def plan(cls, names: list[str]) -> Network:
        """Names and addresses (a /24 no interface here has), nothing made yet."""
        if _which("ip") is None or _which("nsenter") is None:
            raise NoNetwork("the network-namespace tests need iproute2 (ip) and util-linux (nsenter)")
        taken = subprocess.run(["ip", "-o", "addr"], capture_output=True, text=True, timeout=30).stdout
        third = next(n for n in random.sample(range(100, 250), 150) if f" 10.254.{n}." not in taken)
        tag = f"gl{os.getpid() % 10**7}"
        return cls(f"{tag}br", {name: f"{tag}-{name}" for name in names},
                   {name: f"10.254.{third}.{i + 1}" for i, name in enumerate(names)}, f"10.254.{third}.254")

    def build(self) -> None:
        """Make the bridge, the namespaces and their veth pairs (:meth:`remove` undoes what was made)."""
        self._ip("link", "add", self.bridge, "type", "bridge")
        self._ip("addr", "add", f"{self.host}/24", "dev", self.bridge)
        self._ip("link", "set", self.bridge, "up")
        for i, (name, ns) in enumerate(self.namespaces.items()):
            veth = f"{self.bridge[:-2]}h{i}"
            self._ip("netns", "add", ns)
            self._ip("link", "add", veth, "type", "veth", "peer", "name", "gl0", "netns", ns)
            self._ip("link", "set", veth, "master", self.bridge, "up")
            for step in (["addr", "add", f"{self.addresses[name]}/24", "dev", "gl0"], ["link", "set", "gl0", "up"],
                         ["link", "set", "lo", "up"]):
                self._ip("netns", "exec", ns, "ip", *step)

    @staticmethod
    def _ip(*args: str) -> None:
        proc = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
        if proc.returncode != 0:
            raise NoNetwork(f"ip {' '.join(args)}: {proc.stderr.strip()}")

    def run_in(self, node: str) -> list[str]:
        """The argv prefix that runs a command in ``node``'s network namespace, and nothing else of its own:
        nsenter, not `ip netns exec`, which also mounts a /sys of its own without /sys/fs/cgroup, and
        slurmd will not start without that."""
        return [_which("nsenter") or "nsenter", f"--net=/run/netns/{self.namespaces[node]}", "--"]

    def remove(self) -> None:
        for ns in self.namespaces.values():  # (deleting a namespace deletes its end of the veth pair, and so both)
            subprocess.run(["ip", "netns", "delete", ns], capture_output=True, timeout=30)
        subprocess.run(["ip", "link", "delete", self.bridge], capture_output=True, timeout=30)


def start(root: Path, gpus: int = 8, cpus: int = 8, timeout: float = 60, nodes: list[str] | None = None,
          task_prolog: str | None = None, netns: bool = False) -> Cluster:
    """Start munged, slurmctld and one slurmd a node under ``root``; return when every node is idle.

    Without ``nodes``: one node named after this host. With them: those nodes, all on this host, each a
    ``slurmd -N NAME`` with ``gpus`` fake GPUs of its own; with ``netns`` too, each slurmd in a network
    namespace of its own (:class:`Network`; raises :class:`NoNetwork` where that cannot be built)."""
    host = socket.gethostname().split(".")[0]
    names = list(nodes or [host])
    network = Network.plan(names) if netns else None
    for sub in ("munge", "state", "spool", "log", "dev"):
        (root / sub).mkdir(mode=0o700, exist_ok=True)
    (root / "munge" / "munge.key").write_bytes(os.urandom(1024))
    (root / "munge" / "munge.key").chmod(0o600)
    gres = ["AutoDetect=off"]
    for n, name in enumerate(names):
        (root / "dev" / name).mkdir(mode=0o700)
        (root / "spool" / name).mkdir(mode=0o700)
        for i in range(gpus):  # S_IFCHR, as the driver's /dev/nvidiaN
            os.mknod(root / "dev" / name / f"nvidia{i}", 0o600 | 0o020000, os.makedev(195, n * gpus + i))
        gres.append(f"NodeName={name} Name=gpu File={root}/dev/{name}/nvidia[0-{gpus - 1}]")
    several = nodes is not None
    node_lines = "\n".join(
        f"NodeName={name} NodeAddr={network.addresses[name] if network else '127.0.0.1'} "
        + (f"NodeHostname={host} Port={_free_port()} " if several else "")
        + f"CPUs={cpus} RealMemory=1000 Gres=gpu:{gpus} State=UNKNOWN" for name in names)
    prolog = ""
    if task_prolog is not None:
        script = root / "task_prolog.sh"
        script.write_text(task_prolog)
        script.chmod(0o755)
        prolog = f"TaskProlog={script}\n"
    sock = root / "munge" / "munge.sock"
    conf = root / "slurm.conf"
    conf.write_text(f"""\
ClusterName=gltest
SlurmctldHost={f"localhost({network.host})" if network else "localhost"}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={sock}
SlurmctldPort={_free_port()}
SlurmdPort={_free_port()}
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool/%n
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd-%n.pid
SlurmctldLogFile={root}/log/slurmctld.log
SlurmdLogFile={root}/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
ReturnToService=2
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=1
MinJobAge=600
KillWait=5
SlurmdParameters=config_overrides
DefMemPerCPU=10
{prolog}{node_lines}
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
""")
    (root / "gres.conf").write_text("\n".join(gres) + "\n")
    env = {"SLURM_CONF": str(conf), "PATH": os.environ.get("PATH", "") + ":/usr/sbin:/sbin"}
    full = {**os.environ, **env}
    t0 = time.monotonic()
    log = open(root / "log" / "daemons.log", "ab")
    procs: list[subprocess.Popen[bytes]] = []
    if network is not None:
        try:
            network.build()
        except NoNetwork:
            network.remove()
            raise
    cluster = Cluster(root, names[0], env, 0.0, procs, tuple(names), network)
    try:
        procs.append(subprocess.Popen(
            [_which("munged") or "munged", "-F", f"--key-file={root}/munge/munge.key", f"--socket={sock}",
             f"--pid-file={root}/munge/munged.pid", f"--log-file={root}/munge/munged.log",
             f"--seed-file={root}/munge/munged.seed", "--force"], stdout=log, stderr=log, env=full))
        _until(lambda: sock.exists(), timeout, "munged did not create its socket", root)
        procs.append(subprocess.Popen([_which("slurmctld") or "slurmctld", "-D", "-c", "-i"], stdout=log, stderr=log,
                                      env=full))
        for name in names:
            procs.append(subprocess.Popen([*(network.run_in(name) if network else []), _which("slurmd") or "slurmd",
                                           "-D", *(["-N", name] if several else [])], stdout=log, stderr=log, env=full))

        def idle() -> bool:
            for proc in procs:
                if proc.poll() is not None:
                    raise RuntimeError(f"{proc.args[0]} exited with {proc.returncode}: {_tail(root)}")
            out = subprocess.run(["sinfo", "-h", "-N", "-o", "%T"], capture_output=True, text=True, env=full, timeout=30)
            return out.stdout.split() == ["idle"] * len(names)

        _until(idle, timeout, "the nodes did not become idle", root)
    except BaseException:
        cluster.stop()
        raise
    cluster.started_in = time.monotonic() - t0
    return cluster


def _tail(root: Path) -> str:
    parts = []
    for path in [root / "log" / "daemons.log", root / "log" / "slurmctld.log",
                 *sorted((root / "log").glob("slurmd*.log")), root / "munge" / "munged.log"]:
        name = path.relative_to(root)
        if path.exists():
            parts.append(f"--- {name}\n" + "\n".join(path.read_text(errors="replace").splitlines()[-15:]))
    return "\n".join(parts)


def _until(check, timeout: float, what: str, root: Path) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} within {timeout:.0f} s:\n{_tail(root)}")
        time.sleep(0.1)
