"""A real one-node Slurm for the tests: munged, slurmctld and slurmd from the Debian packages.

The node has ``Gres=gpu:8`` backed by eight fake character devices (``mknod``, major 195 as the NVIDIA
driver's), ``AutoDetect=off``, no cgroups (``ProctrackType=proctrack/linuxproc``, ``TaskPlugin=task/none``),
so slurmd writes CUDA_VISIBLE_DEVICES with the allocation's global indices, as on a cluster without
``ConstrainDevices``. No slurmdbd: accounting is off, so ``sacct`` does not work (gpulaunch follows
with ``scontrol`` and the tasks' own records). Everything lives in one private directory with its own
munge key, socket and ports, so it neither needs nor touches a Slurm or munge of the machine.
"""

from __future__ import annotations

import os
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


def _which(name: str) -> str | None:
    return shutil.which(name, path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class Cluster:
    root: Path
    node: str
    env: dict[str, str]  # SLURM_CONF and PATH for the clients
    started_in: float  # seconds from the first daemon to an idle node
    procs: list[subprocess.Popen[bytes]]

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


def start(root: Path, gpus: int = 8, cpus: int = 8, timeout: float = 60) -> Cluster:
    """Start munged, slurmctld and slurmd under ``root``; return when the node is idle."""
    node = socket.gethostname().split(".")[0]
    for sub in ("munge", "state", "spool", "log", "dev"):
        (root / sub).mkdir(mode=0o700, exist_ok=True)
    (root / "munge" / "munge.key").write_bytes(os.urandom(1024))
    (root / "munge" / "munge.key").chmod(0o600)
    devices = []
    for i in range(gpus):
        dev = root / "dev" / f"nvidia{i}"
        os.mknod(dev, 0o600 | 0o020000, os.makedev(195, i))  # S_IFCHR, as the driver's /dev/nvidiaN
        devices.append(dev)
    sock = root / "munge" / "munge.sock"
    conf = root / "slurm.conf"
    conf.write_text(f"""\
ClusterName=gltest
SlurmctldHost=localhost
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={sock}
SlurmctldPort={_free_port()}
SlurmdPort={_free_port()}
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/log/slurmctld.log
SlurmdLogFile={root}/log/slurmd.log
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
NodeName={node} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory=1000 Gres=gpu:{gpus} State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
""")
    (root / "gres.conf").write_text(f"AutoDetect=off\nName=gpu File={root}/dev/nvidia[0-{gpus - 1}]\n")
    env = {"SLURM_CONF": str(conf), "PATH": os.environ.get("PATH", "") + ":/usr/sbin:/sbin"}
    full = {**os.environ, **env}
    t0 = time.monotonic()
    log = open(root / "log" / "daemons.log", "ab")
    procs: list[subprocess.Popen[bytes]] = []
    cluster = Cluster(root, node, env, 0.0, procs)
    try:
        procs.append(subprocess.Popen(
            [_which("munged") or "munged", "-F", f"--key-file={root}/munge/munge.key", f"--socket={sock}",
             f"--pid-file={root}/munge/munged.pid", f"--log-file={root}/munge/munged.log",
             f"--seed-file={root}/munge/munged.seed", "--force"], stdout=log, stderr=log, env=full))
        _until(lambda: sock.exists(), timeout, "munged did not create its socket", root)
        procs.append(subprocess.Popen([_which("slurmctld") or "slurmctld", "-D", "-c", "-i"], stdout=log, stderr=log,
                                      env=full))
        procs.append(subprocess.Popen([_which("slurmd") or "slurmd", "-D"], stdout=log, stderr=log, env=full))

        def idle() -> bool:
            for proc in procs:
                if proc.poll() is not None:
                    raise RuntimeError(f"{proc.args[0]} exited with {proc.returncode}: {_tail(root)}")
            out = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, env=full, timeout=30)
            return out.stdout.strip() == "idle"

        _until(idle, timeout, "the node did not become idle", root)
    except BaseException:
        cluster.stop()
        raise
    cluster.started_in = time.monotonic() - t0
    return cluster


def _tail(root: Path) -> str:
    parts = []
    for name in ("log/daemons.log", "log/slurmctld.log", "log/slurmd.log", "munge/munged.log"):
        path = root / name
        if path.exists():
            parts.append(f"--- {name}\n" + "\n".join(path.read_text(errors="replace").splitlines()[-15:]))
    return "\n".join(parts)


def _until(check, timeout: float, what: str, root: Path) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} within {timeout:.0f} s:\n{_tail(root)}")
        time.sleep(0.1)
