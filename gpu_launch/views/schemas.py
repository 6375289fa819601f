"""The JSON that gpulaunch prints on stdout, as JSON Schemas (draft 2020-12), one per document.

Every document starts with ``"schema": <version>``; a version changes only when a key is removed or
changes meaning (adding a key is not a break). Keys come out in the order of each schema's
``properties`` (tests/test_json.py checks both the shape and that order), and stdout carries nothing
but the document: tables, warnings and timings go to stderr.

===================  ==========================================  =====================
document             printed by                                  schema
===================  ==========================================  =====================
snapshot             ``ls --json``, ``topo --json``              :data:`SNAPSHOT`
dry run              ``--dry-run --json``                        :data:`DRY_RUN`
explain              ``--explain --json``                        :data:`EXPLAIN`
environment          ``env --json``                              :data:`ENV`
config               ``config --json``                           :data:`CONFIG`
each                 ``each --json`` (also with ``--slurm``)     :data:`EACH`
plan                 ``plan --json``, ``--fit MODEL --explain``  :data:`PLAN`
jobs                 ``jobs --json``, ``submit --json``          :data:`JOBS`
===================  ==========================================  =====================

Plain dicts, so the package needs no jsonschema at run time (the tests use it).

Nothing in the package imports this module (only tests/test_json.py does); it stays in ``views/``
because it is the written contract of what the views print, shipped with them and linked from
docs/json.md, so that a consumer can validate gpulaunch's output without reading the tests.
"""

from __future__ import annotations

from typing import Any

__all__ = ["SNAPSHOT", "DRY_RUN", "EXPLAIN", "ENV", "CONFIG", "EACH", "PLAN", "JOBS", "ALL"]

_DRAFT = "https://json-schema.org/draft/2020-12/schema"
_INT = {"type": "integer"}
_NINT = {"type": ["integer", "null"]}
_NSTR = {"type": ["string", "null"]}
_STR = {"type": "string"}


def _obj(properties: dict[str, Any], required: list[str] | None = None) -> dict[str, Any]:
    """An object with exactly these keys (in this order); all required unless listed."""
    return {
        "type": "object",
        "properties": properties,
        "required": list(properties) if required is None else required,
        "additionalProperties": False,
    }


def _doc(title: str, version: int, properties: dict[str, Any], required: list[str] | None = None) -> dict[str, Any]:
    body = _obj({"schema": {"const": version}, **properties},
                None if required is None else ["schema", *required])
    return {"$schema": _DRAFT, "title": title, **body}


_PROCESS = _obj({"pid": _INT, "used_memory_mib": _NINT, "user": _NSTR, "command": _NSTR})
_MIG = _obj({
    "uuid": {"type": "string", "pattern": "^MIG-"}, "profile": _NSTR, "memory_total_mib": _NINT,
    "memory_used_mib": _NINT, "memory_free_mib": _NINT, "gpu_instance_id": _NINT, "compute_instance_id": _NINT,
})
_LINK = {"type": "string", "pattern": "^(X|NV[1-9][0-9]*|PIX|PXB|PHB|NODE|SYS|PSB)$"}
_GPU_KEYS = {
    "index": {"type": "integer", "minimum": 0},
    "uuid": {"type": "string", "pattern": "^GPU-"},
    "name": _STR,
    "pci_bus_id": _NSTR,
    "memory_total_mib": _NINT,
    "memory_used_mib": _NINT,
    "memory_free_mib": _NINT,
    "memory_reserved_mib": _NINT,  # only when NVML told it (memory v2): the driver's own, not free
    "utilization_gpu": {"type": ["integer", "null"], "minimum": 0, "maximum": 100},
    "temperature_c": _NINT,
    "compute_capability": _NSTR,
    "numa_node": _NINT,
    "cpu_affinity": _NSTR,
    "processes": {"type": ["array", "null"], "items": _PROCESS},  # null: NVML could not list them
    "mig_mode": {"enum": ["enabled", "disabled", "unknown"]},  # NVML's current MIG mode
    "mig_devices": {"type": "array", "items": _MIG},  # only for GPUs in MIG mode that have some
    "health": {"type": "array", "items": {"type": "string", "minLength": 1}},  # problems found; [] none (or unknown)
    "available": {"const": False},  # only for a GPU NVML could not read
    "error": _NSTR,  # with available
    # ls --wide only, each when known:
    "power_draw_w": _NINT, "power_limit_w": _NINT, "fan_percent": _NINT, "clock_sm_mhz": _NINT, "clock_memory_mhz": _NINT,
}

#: ``ls --json``: the machine, also the snapshot file format that ``--snapshot FILE`` reads.
SNAPSHOT = _doc("gpulaunch snapshot (ls --json)", 1, {
    "hostname": _NSTR,
    "driver_version": _NSTR,
    "cuda_driver_version": _NSTR,
    "gpus": {"type": "array", "items": _obj(_GPU_KEYS, [k for k in _GPU_KEYS
                                                        if k not in ("memory_reserved_mib", "mig_mode", "mig_devices",
                                                                     "health", "available", "error", "power_draw_w",
                                                                     "power_limit_w", "fan_percent", "clock_sm_mhz",
                                                                     "clock_memory_mhz")])},
    "nvswitch": {"type": "boolean"},  # with links: the NVLinks go through NVSwitches
    "links": {"type": "array", "items": {"type": "array", "items": _LINK}},  # with --topo / topology read
    "gpu_count": {"type": "integer", "minimum": 0},  # `ls --json` only: the machine's GPUs in all (`ls --gpus` lists some of them)
    # `ls --json`/`topo --json` with no NVIDIA driver (and no --snapshot) only: the bundled example machine shown instead
    "example": _STR,
    # `ls --json` only (a snapshot file read back ignores it): who holds which GPU, as its lock file says
    # (display only: the lock, not its text, is what counts); "unavailable" for a lock file that cannot be used
    "holders": {"type": "array", "items": _obj({
        "gpu": _STR, "uuid": _STR, "user": _NSTR, "pid": _NINT, "started": {"type": ["number", "null"]},
        "command": _NSTR, "host": _NSTR,
        "shared_lock": {"type": "boolean"},  # not a reservation: a shared flock that blocks every job's
        "backfilled": {"type": "boolean"},  # it started ahead of earlier waiters, on GPUs the head of the queue lent
        "unavailable": _STR,
    }, required=["gpu", "uuid"])},
    # `ls --json` only (a snapshot file read back ignores it): the --wait queue, head of line first
    "queue": {"type": "array", "items": _obj({
        "position": {"type": "integer", "minimum": 1},
        "user": _STR,  # the ticket's owner (the kernel's word), as a name where one is known
        "uid": {"type": "integer", "minimum": 0},
        "pid": {"type": "integer", "minimum": 0},  # the waiter's pid, in its own PID namespace
        "since": {"type": "number"},  # when it joined the queue, seconds since the epoch
        "waited_s": {"type": "number", "minimum": 0},
        "request": _NSTR,  # "2 GPUs with ≥ 20.0 GiB free"; null: an older gpulaunch's ticket says nothing
        "command": _NSTR,  # what will run, as one shell-quoted line (the waiter's own words)
        # the head of line's (backfill): the GPUs kept for it, and the ones it lends to later waiters;
        # null for the others, and for a head that wrote none (an older gpulaunch)
        "kept": {"type": ["array", "null"], "items": _STR},
        "lends": {"type": ["array", "null"], "items": _STR},
        # the head of line's: it waits strictly first come, first served (--no-backfill): it lends nothing and
        # keeps every GPU it may use, from launches that do not wait too
        "strict": {"type": "boolean"},
        # the head of line's: when it expects to start (seconds since the epoch), from the holders' declared --time
        "expected_start": {"type": ["number", "null"]},
    }, required=["position", "user", "uid", "pid", "since", "waited_s", "request", "command"])},
}, required=["hostname", "driver_version", "cuda_driver_version", "gpus"])

_DEVICE = _obj({
    "cuda": {"type": "string", "pattern": "^cuda:[0-9]+$"},
    "index": {"type": "integer", "minimum": 0},
    "uuid": {"type": "string", "pattern": "^(GPU|MIG)-"},
    "name": _STR,
    "pci_bus_id": _NSTR,
    "memory_free_mib": _NINT,
})
_ENV_VARS = {"type": "object", "additionalProperties": {"type": "string"},
             "required": ["CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER"]}

#: ``--dry-run --json``: the devices in CUDA order, the variables gpulaunch sets, the command.
DRY_RUN = _doc("gpulaunch dry run (--dry-run --json)", 1, {
    "devices": {"type": "array", "items": _DEVICE},
    "env": _ENV_VARS,
    "argv": {"type": "array", "items": _STR},
})

#: ``env --json`` (the ``env`` subcommand): the same as a dry run, without a command.
ENV = _doc("gpulaunch env (env --json)", 1, {
    "devices": {"type": "array", "items": _DEVICE},
    "env": _ENV_VARS,
})

_INDICES = {"type": "array", "items": {"type": "integer", "minimum": 0}}
_SET_KEYS = {
    "gpus": _INDICES,
    "availability": _STR,
    "gpus_by_availability": _obj({"idle": _INT, "partly_used": _INT, "busy": _INT, "full": _INT}),
    "models": {"type": "array", "items": _STR},
    "worst_link": {"type": ["string", "null"]},
    "links": {"type": "array", "items": _obj({"a": _INT, "b": _INT, "link": {"type": ["string", "null"]}})},
    "pairs_at_worst_link": {"type": "integer", "minimum": 0},
    "nvlinks_inside": {"type": "integer", "minimum": 0},
    "nvswitch": {"type": "boolean"},  # NVLinks through NVSwitches: nvlinks_inside counts each GPU's own
    "numa_nodes": _INDICES,
    "numa_groups": {"type": "integer", "minimum": 0},
    "least_free_mib": _INT,
    "total_free_mib": _INT,
    "lost_on": _STR,  # next_best entries only: the first criterion where the set lost to the chosen one
}

#: ``--explain --json``: the choice, what was excluded and why, and (for --auto/--fit) the runners-up.
EXPLAIN = _doc("gpulaunch explain (--explain --json)", 1, {
    "how": {"enum": ["auto", "explicit"]},
    "chosen": _INDICES,
    "uuids": {"type": "array", "items": _STR},
    "warnings": {"type": "array", "items": _STR},
    "excluded": {"type": "array", "items": _obj({"gpu": _INT, "reason": _STR})},
    "thresholds": _obj({"idle_max_memory_used_percent": _INT, "busy_min_utilization_percent": _INT,
                        "busy_min_memory_used_percent": _INT, "full_min_memory_used_percent": _INT}),
    "exact": {"type": "boolean"},  # auto only: false when the search was heuristic
    "criteria": {"type": "array", "items": _STR},  # auto only
    "set": _obj({k: v for k, v in _SET_KEYS.items() if k != "lost_on"}),  # auto only
    "less_available": {"type": "array", "items": _obj({"gpu": _INT, "availability": _STR})},  # auto only
    "next_best": {"type": "array", "items": _obj(_SET_KEYS)},  # auto only
}, required=["how", "chosen", "uuids", "warnings", "excluded", "thresholds"])

#: ``config --json``: every option that can have a default, its value and where it came from.
CONFIG = _doc("gpulaunch config (config --json)", 1, {
    "config_file": _NSTR,
    "config_file_exists": {"type": "boolean"},
    "settings": {"type": "array", "items": _obj({
        "option": {"type": "string", "pattern": "^--"},
        "key": _STR,
        "env": {"type": "string", "pattern": "^GPULAUNCH_"},
        "value": {"type": ["string", "boolean", "integer", "null"]},
        "source": {"enum": ["default", "file", "env", "flag"]},
        "where": _STR,
    })},
    # the lock directory a launch would use: --lock-dir > GPULAUNCH_LOCK_DIR > file > hardened > /tmp
    "lock_dir": _obj({"path": _STR, "hardened": {"type": "boolean"}, "source": _STR}),
})

_COUNT = {"type": "integer", "minimum": 0}

#: ``each --json``: every job of the sweep, in file order, with what it ran and how it ended. With
#: ``--slurm`` and no ``--follow`` every job is still ``queued``; ``slurm_job_id`` is the array's id.
EACH = _doc("gpulaunch each (each --json)", 1, {
    "log_dir": _STR,
    "slurm_job_id": _NSTR,
    "counts": _obj({"done": _COUNT, "running": _COUNT, "queued": _COUNT, "failed": _COUNT, "timeout": _COUNT,
                    "not_started": _COUNT}),
    "jobs": {"type": "array", "items": _obj({
        "job": {"type": "integer", "minimum": 1},  # its number: job-N.log, Slurm task N
        "line": {"type": "integer", "minimum": 1},  # its line in the job file
        "status": {"enum": ["done", "failed", "timeout", "not started", "queued", "running"]},
        "exit_code": _NINT,  # the command's exit status; null: killed by a signal, or never ran
        "signal": _NSTR,  # "SIGKILL" when a signal ended it
        "note": _NSTR,  # why it never ran or did not finish ("could not start: ...", "timeout: ...", "out of memory")
        "node": _NSTR,  # each --slurm: the node it ran on
        "gpus": _INDICES,  # the physical GPUs (each --slurm: the task's allocation)
        "seconds": {"type": ["number", "null"], "minimum": 0},  # how long it ran
        "log": _NSTR,  # its log file
        "argv": {"type": "array", "items": _STR},  # what it ran: {n} and {gpus} replaced once it started
    })},
})

_BYTES = _COUNT
_LABEL = {"enum": ["exact", "rule", "allowance"]}

#: ``plan --json`` (and ``--fit MODEL --explain --json``): the model's facts, where each part of it goes,
#: and the placeholders' values. Every byte count says what kind of number it is in ``labels``:
#: weights are exact (the files' tensor bytes), the KV cache a rule (the engine's formula),
#: the allowance an allowance (compute buffers cannot be read from a file).
#: A training launch's step on one GPU (docs/json.md): peak_bytes is what PyTorch's allocator holds at the peak.
_TRAINING_GPU = _obj({
    "peak_bytes": _BYTES, "peak_at": {"enum": ["generation", "backward", "reference forward", "end of backward",
                                              "optimizer step"]},
    "weights_bytes": _BYTES, "gradients_bytes": _BYTES, "optimizer_bytes": _BYTES, "activations_bytes": _BYTES,
    "loss_bytes": _BYTES, "other_bytes": _BYTES, "generation_bytes": _BYTES, "allowance_bytes": _BYTES, "host_bytes": _BYTES, "dominant": _STR,
    "labels": {"type": "object", "additionalProperties": {"enum": ["exact", "rule", "allowance"]}},
    "rules": {"type": "array", "items": _STR}, "assumed": {"type": "array", "items": _STR},
})
_TRAINING_SETUP = _obj({
    "launcher": _STR, "method": {"enum": ["full", "lora", "qlora"]}, "precision": _STR, "micro_batch": _COUNT,
    "seq_len": _COUNT, "grad_accum": _COUNT, "gradient_checkpointing": {"type": "boolean"}, "optimizer": _STR,
    "mixed_precision": {"type": "boolean"}, "loss": _STR, "lora_r": _NINT,
    "lora_dropout": {"type": "number", "minimum": 0, "maximum": 1},
    "lora_targets": {"type": "array", "items": _STR}, "quant_bits": _NINT,
    "sharding": _STR, "offload_optimizer": {"type": "boolean"}, "offload_params": {"type": "boolean"},
    "fsdp_version": {"enum": [None, 1, 2]}, "completion_len": _COUNT, "reference_model": {"type": "boolean"},
    "rows_per_example": _COUNT, "vllm": {"enum": [None, "server", "colocate"]},
    "assumed": {"type": "array", "items": _STR}, "sources": {"type": "array", "items": _STR},
})

PLAN = _doc("gpulaunch plan (plan --json)", 1, {
    "model": _obj({
        "source": _STR, "format": {"enum": ["gguf", "safetensors", "mlc"]}, "architecture": _STR, "name": _NSTR,
        "layers": _INT, "weights_bytes": _BYTES,
        "weights_by_kind": _obj({"layers": _BYTES, "token_embedding": _BYTES, "output": _BYTES, "other": _BYTES,
                                 "mtp_not_loaded": _BYTES}),
        "weights_by_type": {"type": "object", "additionalProperties": _BYTES},
        "kv_bytes_per_token": _BYTES, "recurrent_state_bytes": _BYTES,
    }),
    "engine": {"enum": ["llama.cpp", "vllm", "sglang", "mlc", "tgi", "transformers", "training"]},
    "ctx": {"type": "integer", "minimum": 1},
    "ctx_from": _STR,
    "parallel": {"type": "integer", "minimum": 1},
    "kv_type": _STR,
    "flash_attn": {"enum": ["on", "off", "auto"]},  # llama.cpp's -fa as the command sets it (else its default)
    "swa_full": {"type": "boolean"},  # llama.cpp's sliding layers at full size (--swa-full, or a binding's default)
    "kv_cache_bytes": _BYTES,
    "kv_rules": {"type": "array", "items": _STR},
    "labels": _obj({"weights": _LABEL, "kv": _LABEL, "allowance": _LABEL}),
    "allowance": _obj({"bytes_per_gpu": _BYTES, "why": _STR}),
    "gpus": _INDICES,
    "per_gpu": {"type": "array", "items": _obj({  # a several-node plan: every rank, node after node
        "gpu": {"type": "integer", "minimum": 0}, "weights_bytes": _BYTES, "kv_bytes": _BYTES,
        "allowance_bytes": _BYTES, "free_bytes": _BYTES, "left_bytes": _INT, "layers": _NINT,
        "stage": _COUNT, "node": _COUNT, "training": _TRAINING_GPU,
    }, required=["gpu", "weights_bytes", "kv_bytes", "allowance_bytes", "free_bytes", "left_bytes", "layers",
                 "stage", "node"])},
    "cpu_weights_bytes": _BYTES,
    "cpu_kv_bytes": _BYTES,
    "whole": {"type": "boolean"},
    "gpu_layers": _NINT,
    "n_cpu_moe": _NINT,  # llama.cpp {n_cpu_moe}: the first layers whose experts stay on the CPU (null: not asked)
    "host_bytes": _BYTES,  # what the command's offload options keep on the host (in the cpu_* figures too)
    "tp": _NINT,
    "pp": _NINT,  # pipeline stages (tensor-parallel engines), null for the others
    "nodes": {"type": "integer", "minimum": 1},  # nodes of this kind the plan needs (1: this machine)
    "gpus_per_node": _COUNT,  # GPUs used on each node
    "stages": {"type": "array", "items": _obj({  # per pipeline stage: what each of its GPUs holds
        "stage": _COUNT, "layers": {"type": "array", "items": _COUNT, "minItems": 2, "maxItems": 2},
        "weights_bytes": _BYTES, "kv_bytes": _BYTES, "allowance_bytes": _BYTES,
        "nodes": {"type": "array", "items": _COUNT},
    })},
    "placeholders": {"type": "object", "additionalProperties": _STR},
    "notes": {"type": "array", "items": _STR},
    "example": _STR,  # no NVIDIA driver (and no --snapshot) only: planned on this bundled example machine
    "training": _TRAINING_SETUP,  # a training launch only: the setup it was sized for
})
PLAN["required"].remove("example")
PLAN["required"].remove("training")

_TIME = {"type": ["number", "null"]}  # seconds since the epoch

#: ``jobs --json`` (and ``submit --json``, with the new job): the user's detached jobs, oldest first.
JOBS = _doc("gpulaunch jobs (jobs --json)", 1, {
    "job_dir": _STR,
    "jobs": {"type": "array", "items": _obj({
        "id": {"type": "string", "pattern": "^[1-9][0-9]*$"},
        "state": {"enum": ["waiting", "running", "done", "failed to start", "cancelled", "timeout", "lost",
                           "lost at reboot"]},
        # what a script wants: a done job that exited non-zero "failed", one a signal ended "killed"
        "outcome": {"enum": ["waiting", "running", "done", "failed", "killed", "timeout", "failed to start", "cancelled",
                             "lost", "lost at reboot"]},
        "position": {"type": ["integer", "null"], "minimum": 1},  # in the --wait queue, while it waits there
        "exit_code": _NINT,  # the command's exit status; failed to start: gpulaunch's own
        "signal": _NSTR,  # "SIGTERM" when a signal ended it
        "note": _NSTR,  # why it failed to start, was cancelled or is lost
        "gpus": _NSTR,  # the physical GPUs it got ("2,3"; "" on --fallback cpu); null before it ran
        "submitted": {"type": "number"}, "started": _TIME, "ended": _TIME,
        "pid": _NINT,  # the launch's, which the command keeps
        "host": _STR, "cwd": _STR,
        "argv": {"type": "array", "items": _STR},  # the command
        "options": {"type": "array", "items": _STR},  # the launch's options, as given
        "log": _STR,
        # it started ahead of earlier waiters, on GPUs the head of the --wait queue lent (backfill)
        "backfilled": {"type": "boolean"},
        "limit_s": {"type": ["number", "null"]},  # its --time, seconds (null: none); it ends there: outcome timeout
    })},
})

ALL: dict[str, dict[str, Any]] = {"snapshot": SNAPSHOT, "dry-run": DRY_RUN, "explain": EXPLAIN, "env": ENV,
                                  "config": CONFIG, "each": EACH, "plan": PLAN, "jobs": JOBS}
