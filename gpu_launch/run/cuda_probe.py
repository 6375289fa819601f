"""``gpulaunch check``: does CUDA really see the chosen GPUs, in order? And is the inherited CVD sane?

NVML ignores ``CUDA_VISIBLE_DEVICES`` and numbers GPUs its own way, so the only authority on what a
CUDA program will see is CUDA itself, initialised in a fresh process with the child's environment
(CVD is read once, at ``cuInit``). :data:`PROBE` is that process: a few lines of Python that load
the driver library with ctypes and print the UUIDs of ``cuda:0..n-1`` as JSON
(``cuInit`` → ``cuDeviceGetCount`` → ``cuDeviceGet`` → ``cuDeviceGetUuid_v2``, else
``cuDeviceGetUuid``). The parent compares them with the chosen devices by UUID (:func:`compare`).
For a MIG device ``cuDeviceGetUuid_v2`` gives the MIG UUID; the older call may give the parent
GPU's, which is accepted and said.

``GPULAUNCH_LIBCUDA`` names another driver library to load (tests use a stand-in).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gpu_launch.errors import CheckFailed, ExitCode, NvmlUnavailable
from gpu_launch.hardware.model import Device

__all__ = ["PROBE", "ProbeResult", "probe", "compare", "uuid_body"]

PROBE = r"""
import ctypes, json, os, sys
names = [os.environ["GPULAUNCH_LIBCUDA"]] if os.environ.get("GPULAUNCH_LIBCUDA") else ["libcuda.so.1", "libcuda.so"]
lib = None
errors = []
for name in names:
    try:
        lib = ctypes.CDLL(name)
        break
    except OSError as exc:
        errors.append(str(exc))
if lib is None:
    print(json.dumps({"status": "no_driver", "error": "; ".join(errors)}))
    sys.exit(0)
def name_of(rc):
    text = ctypes.c_char_p()
    try:
        lib.cuGetErrorName(rc, ctypes.byref(text))
    except AttributeError:
        return str(rc)
    return (text.value or b"").decode() or str(rc)
needed = ["cuInit", "cuDeviceGetCount", "cuDeviceGet", "cuDeviceGetName"]
missing = [n for n in needed if not hasattr(lib, n)]
missing += [] if hasattr(lib, "cuDeviceGetUuid_v2") or hasattr(lib, "cuDeviceGetUuid") else ["cuDeviceGetUuid"]
if missing:  # a stub or a mock that is no driver: say so rather than fail on the first call
    print(json.dumps({"status": "not_driver", "error": name + " has no " + ", ".join(missing)}))
    sys.exit(0)
rc = lib.cuInit(0)
if rc == 100:  # CUDA_ERROR_NO_DEVICE: nothing visible (e.g. an empty CUDA_VISIBLE_DEVICES)
    print(json.dumps({"status": "ok", "uuids": [], "names": []}))
    sys.exit(0)
if rc != 0:
    print(json.dumps({"status": "init_failed", "error": "cuInit: " + name_of(rc)}))
    sys.exit(0)
count = ctypes.c_int()
rc = lib.cuDeviceGetCount(ctypes.byref(count))
if rc != 0:
    print(json.dumps({"status": "init_failed", "error": "cuDeviceGetCount: " + name_of(rc)}))
    sys.exit(0)
get_uuid = getattr(lib, "cuDeviceGetUuid_v2", None) or lib.cuDeviceGetUuid
uuids, names_out = [], []
for i in range(count.value):
    dev = ctypes.c_int()
    raw = (ctypes.c_ubyte * 16)()
    name = ctypes.create_string_buffer(256)
    if lib.cuDeviceGet(ctypes.byref(dev), i) != 0 or get_uuid(raw, dev) != 0:
        uuids.append(None)
    else:
        h = bytes(raw).hex()
        uuids.append("%s-%s-%s-%s-%s" % (h[:8], h[8:12], h[12:16], h[16:20], h[20:]))
    lib.cuDeviceGetName(name, 256, dev)
    names_out.append(name.value.decode(errors="replace"))
print(json.dumps({"status": "ok", "uuids": uuids, "names": names_out}))
"""


@dataclass(frozen=True)
class ProbeResult:
    """What the probe child saw: the UUID bodies of cuda:0.. (no GPU-/MIG- head) and device names."""

    uuids: tuple[str | None, ...]
    names: tuple[str, ...] = ()


def uuid_body(uuid: str) -> str:
    """``GPU-abc…``/``MIG-abc…`` → ``abc…`` (lower case): CUDA returns 16 bytes without the head."""
    low = uuid.lower()
    for head in ("gpu-", "mig-"):
        if low.startswith(head):
            return low[len(head):]
    return low


def probe(env: Mapping[str, str], timeout: float = 120.0) -> ProbeResult:
    """Run :data:`PROBE` in a child with ``env``; NvmlUnavailable (exit 3) when there is no driver."""
    try:
        done = subprocess.run([sys.executable, "-c", PROBE], env=dict(env), capture_output=True, text=True,
                              timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        raise CheckFailed(f"the CUDA probe did not finish within {timeout:.0f} s") from None
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        detail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise CheckFailed(f"the CUDA probe failed (exit {done.returncode}: {detail})")
    doc = json.loads(lines[-1])
    if doc["status"] == "no_driver":
        raise NvmlUnavailable("no CUDA driver: libcuda cannot be loaded here, so CUDA's view cannot be checked",
                              hint="run `gpulaunch check` on the GPU machine (the lint above needs no driver)",
                              exit_code=ExitCode.NO_DRIVER)
    if doc["status"] == "not_driver":
        raise NvmlUnavailable(f"the libcuda found is no CUDA driver, so CUDA's view cannot be checked "
                              f"({doc.get('error')})",
                              hint="a stub or mock libcuda comes first on the loader's path (LD_LIBRARY_PATH?); "
                                   "`gpulaunch check` needs the NVIDIA driver's", exit_code=ExitCode.NO_DRIVER)
    if doc["status"] != "ok":
        raise NvmlUnavailable(f"the CUDA driver did not start ({doc.get('error')})",
                              hint="is the driver loaded and the GPU visible to this container/job?")
    return ProbeResult(tuple(doc["uuids"]), tuple(doc.get("names", ())))


def compare(devices: Sequence[Device], seen: ProbeResult) -> tuple[list[str], list[str]]:
    """Lines per ``cuda:i`` and the problems: cuda:i must be exactly ``devices[i]`` by UUID."""
    lines: list[str] = []
    problems: list[str] = []
    for i in range(max(len(devices), len(seen.uuids))):
        want = devices[i] if i < len(devices) else None
        got = seen.uuids[i] if i < len(seen.uuids) else None
        if want is None:
            lines.append(f"  cuda:{i} ✗ CUDA shows an extra device {got}")
            problems.append(f"cuda:{i} is {got}, which was not chosen")
            continue
        if got is None:
            lines.append(f"  cuda:{i} ✗ expected {want.label} ({want.uuid}); CUDA does not show it")
            problems.append(f"cuda:{i} should be {want.label}, but CUDA shows {len(seen.uuids)} device(s)")
            continue
        body = uuid_body(got)
        if body == uuid_body(want.uuid):
            lines.append(f"  cuda:{i} ✓ {want.label}  {want.uuid}")
        elif want.mig is not None and body == uuid_body(want.gpu.uuid):
            lines.append(f"  cuda:{i} ✓ {want.label}  (this driver reports the parent GPU's UUID {want.gpu.uuid})")
        else:
            lines.append(f"  cuda:{i} ✗ expected {want.label} ({want.uuid}), CUDA shows {got}")
            problems.append(f"cuda:{i} should be {want.label}, but CUDA shows {got}")
    return lines, problems
