"""The table of gpulaunch's options and subcommands: what each option is called, where its value goes,
which commands take it, and its help. The parser (:mod:`gpu_launch.options.args`), the help, the man page,
the config file and the shell completions all read this one table.
"""

from __future__ import annotations

from collections.abc import Callable

from gpu_launch.base.records import dataclass
from gpu_launch.base.units import parse_size
from gpu_launch.choose import spec
from gpu_launch.options.values import (
    bind_mode,
    count,
    directory,
    engine,
    fallback,
    file_name,
    fit,
    head,
    interval,
    kv_type,
    lock_dir,
    percent,
    positive,
    shell,
    slurm_time,
    tokens,
    total_size,
    train_method,
    users,
    wait,
    whole_number,
    is_user,
)

# Annotations only: importing typing costs ~3 ms of every launch (docs/performance.md).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

RUN = "run"
SUBCOMMANDS: dict[str, str] = {
    "ls": "list the GPUs: memory, utilisation, processes (--topo: the link matrix)",
    "topo": "the GPU link matrix, like `nvidia-smi topo -m` (same as `ls --topo`)",
    "env": "print the chosen environment for the current shell: eval \"$(gpulaunch env --auto 2)\" (--shell fish, --json)",
    "check": "check that CUDA sees exactly the chosen GPUs, in order; lint an inherited CUDA_VISIBLE_DEVICES",
    "config": "show the effective settings and where each came from (config file, GPULAUNCH_* env, flags)",
    "completions": "print the shell completion script: completions bash|zsh|fish",
    "each": "run the commands in FILE (one a line; - or none: stdin), each on its own free GPUs (--gpus-per-job)",
    "locks": "locks init [DIR]: set up the hardened lock directory (root; default /var/lib/gpulaunch/locks)",
    "plan": "plan MODEL or plan -- COMMAND: how a model would be laid out on the GPUs it would get (--json)",
    "submit": "submit [OPTIONS] -- COMMAND: run a launch as a detached job (it waits for its GPUs); prints its id",
    "jobs": "list your detached jobs: waiting, running, done, failed (exit 3), killed (SIGTERM), ... (jobs ID: one in full; --json; --clear: remove the ended ones)",
    "log": "log ID: a detached job's output so far (-f: follow it until the job ends, and exit with its exit code)",
    "wait": "wait ID...: wait until the jobs end; exit with the job's own exit code (the first failing one's), as `tsp -w`",
    "cancel": "cancel ID...: a waiting job leaves the queue; a running one gets SIGTERM, then SIGKILL (--grace)",
    "help": "show this help",
}
# `config` takes the launch's options too, so that it can show what a flag would override, and `submit`
# passes them on to the launch it detaches...
SELECTING = frozenset({RUN, "config", "submit"})
CHOOSING = frozenset({RUN, "env", "check", "config", "submit"})  # options that choose GPUs: a launch, env and check
SIZING = CHOOSING | {"plan"}  # what describes a model's run, and the GPUs `plan` may lay it on
CONSTRAINING = CHOOSING | {"each", "plan"}  # constraints also apply to every job of `each`, and to `plan`
# ...except these, which choose what one launch does and have no default (config.py, docs/configuration.md).
PER_LAUNCH = frozenset({"gpus", "auto", "fit", "min_count", "max_count",  # how many: this launch's own
                        "dry_run", "explain", "share",  # share: a default would defeat reservations
                        "slurm",  # slurm: a default would leave no way to run `each` locally
                        "nodes", "node_rank", "head",  # where one run stands among its nodes
                        "ctx", "parallel", "kv_type", "engine",  # they describe one model's run
                        "train_seq", "train_method", "micro_batch",
                        "no_shell",  # no way back to the shell either
                        "detach",  # a default would detach every launch
                        "clear"})  # and make every `jobs` remove jobs
EACH = frozenset({"each", "config"})
#: The options that say how GPUs are chosen: one of them (or --min-count/--max-count) per command.
CHOOSE_HOW = frozenset({"gpus", "auto", "fit", "min_count", "max_count"})
SUBMITTING = frozenset({RUN, "each", "config"})  # what `each --slurm` and `--nodes N --slurm` hand to sbatch
#: Subcommands whose first word that is not an option starts the command (as a launch's does).
PASS_THROUGH = frozenset({"submit"})
ANY = frozenset({RUN, *SUBCOMMANDS})


@dataclass(frozen=True)
class Option:
    """One option: its spellings, where it goes, whether it takes a value, and its help."""

    names: tuple[str, ...]
    dest: str
    help: str
    metavar: str = ""  # empty: a flag
    convert: Callable[[str, str], Any] | None = None
    commands: frozenset[str] = ANY
    group: str = "Output"
    counted: bool = False  # -v, -vv
    optional: bool = False  # the value may be left out: taken from the next word only if it converts
    default: Any = None  # the value when ``optional`` and left out
    #: ``optional``: whether the next word is the value (default: whether it converts)
    takes_next: Callable[[str], bool] | None = None
    repeat: bool = False  # may be given more than once: the values are kept in order, as a tuple

    @property
    def takes_value(self) -> bool:
        return bool(self.metavar)


OPTIONS: tuple[Option, ...] = (
    Option(("--gpus", "-g"), "gpus", "physical GPUs as `gpulaunch ls` numbers them: 4-7, 0,2,5, all, or GPU-/MIG- UUIDs (order kept: 3,1 makes cuda:0 GPU 3); "
           "each: the GPUs the sweep may use; ls, topo: show only these",
           "SPEC", lambda v, o: spec.parse(v, o), SIZING | {"each", "ls", "topo"}, "Selection"),
    Option(("--auto", "-n"), "auto", "pick the best N GPUs: idle first, one model, best links, most free memory",
           "N", count, CHOOSING, "Selection"),
    Option(("--fit",), "fit", "pick the fewest GPUs (1, 2, 4 or 8) whose free memory together holds SIZE, or MODEL "
           "(a model file or folder, a cached Hugging Face id, or `model`: the one the command names); a model also "
           "fills {tp} {gpu_layers} {tensor_split} {ctx} {gpu_mem_util} {max_memory}",
           "SIZE|MODEL", fit, CHOOSING, "Selection"),
    Option(("--min-count",), "min_count", "an elastic count, as nvisel's: at least N GPUs (default 1), and with "
           "--max-count as many eligible ones as there are up to its M; {n} gets the count taken", "N", count,
           CHOOSING | {"each"}, "Selection"),
    Option(("--max-count",), "max_count", "an elastic count: as many eligible GPUs as there are, up to N (at least "
           "--min-count's, default 1): --max-count 4 is \"up to 4, at least 1\"", "N", count, CHOOSING | {"each"},
           "Selection"),
    Option(("--ctx",), "ctx", "--fit MODEL, plan: size the KV cache for N tokens (default: the command's -c/--max-model-len, "
           "else the model's own)", "N", tokens, SIZING, "Model"),
    Option(("--parallel",), "parallel", "--fit MODEL, plan: N sequences at once (default: the command's -np, else "
           "llama-server's 4 slots, else 1)",
           "N", positive, SIZING, "Model"),
    Option(("--kv-type",), "kv_type", "--fit MODEL, plan: the KV cache type: f16, bf16, q8_0, q4_0, fp8 (default: the "
           "command's -ctk/--kv-cache-dtype, else f16)", "T", kv_type, SIZING, "Model"),
    Option(("--engine",), "engine", "--fit MODEL, plan: llama.cpp, vllm, sglang, mlc, tgi, transformers (default: from the "
           "command word, else from the model's format)", "E", engine, SIZING, "Model"),
    Option(("--reserve",), "reserve", "--fit MODEL, plan: keep SIZE per GPU for compute buffers and the CUDA context "
           "instead of the engine's allowance", "SIZE", lambda v, o: parse_size(v, o, allow_percent=False), SIZING,
           "Model"),
    Option(("--train-seq",), "train_seq", "--fit MODEL, plan, a training launch: N tokens a sequence (default: the "
           "launch's max length, else 2048, stated as assumed)", "N", tokens, SIZING, "Model"),
    Option(("--train-method",), "train_method", "--fit MODEL, plan, a training launch: full, lora or qlora (default: "
           "what the launch says, else full, stated as assumed)", "M", train_method, SIZING, "Model"),
    Option(("--micro-batch",), "micro_batch", "--fit MODEL, plan, a training launch: N sequences a GPU a step "
           "(default: the launch's per-device batch; {micro_batch} in the command: the most that fit)", "N",
           positive, SIZING, "Model"),
    Option(("--min-free",), "min_free", "only GPUs with at least SIZE free each (20GiB, 512MiB, 20GB, 80%)",
           "SIZE", parse_size, CONSTRAINING, "Constraints"),
    Option(("--max-util",), "max_util", "only GPUs at or below PCT utilisation; given (100: all), --auto/--fit may "
           "also take GPUs busy or full with others' work, which they skip otherwise", "PCT", percent, CONSTRAINING,
           "Constraints"),
    Option(("--idle",), "idle", "only idle GPUs (no compute process, at most 5% of memory used)",
           commands=CONSTRAINING, group="Constraints"),
    Option(("--min-total-memory",), "min_total_memory", "only GPUs with at least SIZE of memory in all (the 80 GB "
           "cards of a mixed box: 80GB = 80*10^9 bytes; an 80 GB card has 79.6 GiB)", "SIZE", total_size,
           CONSTRAINING, "Constraints"),
    Option(("--account-as-free",), "account_as_free", "count USER's processes (yours, without USER; several: "
           "alice,bob) as gone when choosing: their memory free, a GPU only they use idle. USER is only read from "
           "the next word when it names a user here: write --account-as-free=USER to be unambiguous", "USER", users,
           CONSTRAINING, "Constraints", optional=True, default="", takes_next=is_user),
    Option(("--exclude", "-x"), "exclude", "never pick these GPUs (same syntax as --gpus)", "SPEC",
           lambda v, o: spec.parse(v, o), CONSTRAINING, "Constraints"),
    Option(("--wait",), "wait", "when the GPUs are not free, wait for them (for ever, or at most TIMEOUT: 30m, 2h); "
           "waiters are served first come, first served. TIMEOUT is only read from the next word when it is a "
           "duration: write --wait=2h to be unambiguous. each --slurm: follow the job array until it ends (at most "
           "TIMEOUT)", "TIMEOUT", wait, SELECTING | {"each"}, "Sharing", optional=True,
           default=float("inf")),
    Option(("--no-backfill",), "no_backfill", "--wait: strictly first come, first served: never start ahead of "
           "an earlier waiter, and as the head of the queue lend no GPU to later ones (default: backfill on GPUs "
           "the head lends; the GPUs that free up are kept for it)", commands=SELECTING | {"each"}, group="Sharing"),
    Option(("--fallback",), "fallback", "when the GPUs cannot be had (after --wait), run anyway on the CPU: "
           "CUDA_VISIBLE_DEVICES= (empty)", "cpu", fallback, SELECTING, "Sharing"),
    Option(("--share",), "share", "--gpus: use GPUs reserved by another gpulaunch job anyway",
           commands=SELECTING, group="Sharing"),
    Option(("--no-lock",), "no_lock", "take no reservation (others' reservations are still avoided)",
           commands=SELECTING, group="Sharing"),
    Option(("--lock-dir",), "lock_dir", "where reservations live, shared by all users "
           "[env GPULAUNCH_LOCK_DIR, default /tmp/gpulaunch-locks]", "DIR", lock_dir,
           commands=frozenset({RUN, "ls", "env", "check", "each", "config", "plan", "submit"}), group="Sharing"),
    Option(("--gpus-per-job",), "gpus_per_job", "each: GPUs per job (default 1)", "K", count,
           frozenset({"each", "config"}), "Jobs"),
    Option(("--log-dir",), "log_dir", "each: one log file per job in DIR (default ./gpulaunch-logs/TIMESTAMP); "
           "--nodes: the batch script, the nodes' logs and the head's address (a directory every node sees)",
           "DIR", directory, SUBMITTING, group="Jobs"),
    Option(("--jobs-per-gpu",), "jobs_per_gpu", "each: up to K jobs share one GPU, which stays reserved for the "
           "sweep while any of them runs (default 1)", "K", positive, EACH, "Jobs"),
    Option(("--no-shell",), "no_shell", "each: run each line's words directly instead of through /bin/sh -c (no "
           "redirections, pipes or &&)", commands=frozenset({"each"}), group="Jobs"),
    Option(("--nodes",), "nodes", "run COMMAND over N nodes: with --slurm, submit it; inside a Slurm step (srun), "
           "or with --node-rank and --head, be one of them. Each node chooses and reserves its GPUs, and the "
           "engine gets its own rank, head and port flags ({nnodes} {node_rank} {head_addr} {head_port} {pp} for "
           "other commands)", "N", positive, frozenset({RUN}), "Nodes"),
    Option(("--gpus-per-node",), "gpus_per_node", "--nodes: GPUs on each node (default: every GPU the node's "
           "allotment holds); --fit MODEL, plan: a node has G GPUs like this machine's (default: all of them), and a "
           "model one such node cannot hold is planned over N nodes (tp within, pp across)", "G", count, SIZING,
           "Nodes"),
    Option(("--node-rank",), "node_rank", "--nodes by hand (no Slurm): this machine's rank, 0 (the head) to N-1",
           "R", lambda v, o: whole_number(v, o, "1"), frozenset({RUN}), "Nodes"),
    Option(("--head",), "head", "--nodes by hand (no Slurm): the head's address as the other nodes reach it, and "
           "the rendezvous port (the head picks a free one when it has none)", "HOST[:PORT]", head, frozenset({RUN}),
           "Nodes"),
    Option(("--slurm",), "slurm", "each: submit the jobs to Slurm as one job array instead of running them here; "
           "each task runs its line through `gpulaunch --auto K` inside its allocation. --nodes N: submit one job "
           "of N nodes, one gpulaunch node task a node", commands=frozenset({RUN, "each"}), group="Slurm"),
    Option(("--partition",), "partition", "--slurm: the Slurm partition (sbatch --partition)", "P",
           commands=SUBMITTING, group="Slurm"),
    Option(("--time",), "time", "the job's time limit (30m, 2h, 1d, or Slurm's 1-12:00:00), as Slurm's: "
           "backfill starts it ahead of a waiting job only if it ends in time; submit and each end it there "
           "(SIGTERM, then SIGKILL; outcome timeout, exit 124); --slurm: sbatch --time",
           "T", slurm_time, SUBMITTING | {"submit"}, "Sharing"),
    Option(("--max-running",), "max_running", "each: at most K jobs at once (--slurm: --array=1-M%K)",
           "K", positive, EACH, "Jobs"),
    Option(("--sbatch-arg",), "sbatch_arg", "--slurm: pass ARG on to sbatch (repeat it: --sbatch-arg=--account=lab "
           "--sbatch-arg=--qos=high)", "ARG", commands=SUBMITTING, group="Slurm", repeat=True),
    Option(("--follow", "-f"), "follow", "--slurm: after submitting, follow the jobs until they end, with the live "
           "view and summary of a local `each` (same as --wait); log: follow the job's log until the job ends",
           commands=SUBMITTING | {"log"}, group="Slurm"),
    Option(("--cancel-on-interrupt",), "cancel_on_interrupt", "--slurm --follow: Ctrl-C cancels the job "
           "(scancel) without asking; without it, only a terminal is asked", commands=SUBMITTING, group="Slurm"),
    Option(("--detach",), "detach", "run the launch as a detached job: the same as `gpulaunch submit OPTIONS -- "
           "COMMAND`", commands=frozenset({RUN}), group="Jobs"),
    Option(("--clear",), "clear", "jobs: remove the records and logs of your jobs that have ended (done, failed "
           "to start, cancelled, lost), or of the ids given; never a waiting or running one",
           commands=frozenset({"jobs"}), group="Jobs"),
    Option(("--grace",), "grace", "seconds a job has between SIGTERM and SIGKILL (default 10): cancel's; submit and "
           "each: at its --time limit (Slurm's KillWait; refused with each --slurm: there it is the cluster's)",
           "SECONDS", interval, frozenset({"cancel", "submit", "each"}), "Jobs"),
    Option(("--uuid",), "uuid", "write GPU UUIDs into CUDA_VISIBLE_DEVICES instead of indices",
           commands=CHOOSING, group="Environment"),
    Option(("--mig",), "mig", "let --auto/--fit choose one MIG device (most free memory; --fit: the smallest that holds SIZE)",
           commands=CHOOSING, group="Selection"),
    Option(("--bind",), "bind", "pin the command to the CPUs local to its GPUs: auto (when they share a NUMA node), on, off",
           "MODE", lambda v, o: bind_mode(v, o), SELECTING, "Environment"),
    Option(("--shell",), "shell", "env: write for this shell: bash, zsh, sh (export X=...) or fish (set -gx X ...)",
           "SHELL", lambda v, o: shell(v, o), frozenset({"env"}), "Output"),
    Option(("--dry-run",), "dry_run", "print the environment and command that would run, and exit",
           commands=SELECTING - {"submit"}, group="Output"),
    Option(("--explain",), "explain", "show why these GPUs: links, memory, exclusions, next-best sets",
           commands=SELECTING - {"submit"}, group="Output"),
    Option(("--json",), "json", "machine-readable output on stdout (ls, env, config, plan, jobs, submit, --dry-run, --explain)", group="Output"),
    Option(("--topo",), "topo", "ls: add the link matrix (NVLink, PCIe, NUMA)", commands=frozenset({"ls"}), group="Output"),
    Option(("--wide",), "wide", "ls: add power, fan, clocks, reserved memory and PCI bus id (and each holder's "
           "whole line where the table has room only for its user and command)",
           commands=frozenset({"ls"}), group="Output"),
    Option(("--processes", "-p"), "processes", "ls: list every process under the table: GPU, pid, user, GPU memory "
           "and command (like gpustat -c)", commands=frozenset({"ls"}), group="Output"),
    Option(("--watch",), "watch", "ls: redraw every SECONDS (default 2) until Ctrl-C, like `watch nvidia-smi`; "
           "not on a terminal, print one listing after another", "SECONDS", interval, frozenset({"ls"}), "Output",
           optional=True, default=2.0),
    Option(("--snapshot",), "snapshot", "read this snapshot file or example (dgx-h100, pcie-8x, ...) instead of NVML [env GPULAUNCH_SNAPSHOT]",
           "FILE", file_name, group="Input"),
    Option(("--quiet", "-q"), "quiet", "print nothing but errors (no mapping table), and the warning that a GPU "
           "someone else computes on was taken", group="Output"),
    Option(("--verbose", "-v"), "verbose", "more detail: NVML query timings", group="Output", counted=True),
    Option(("--help", "-h"), "help", "show this help and exit", group="Output"),
    Option(("--version", "-V"), "version", "print the version and exit", group="Output"),
)
