"""The help text: ``gpulaunch --help``, ``gpulaunch help SUBCOMMAND`` and the short usage of a bare ``gpulaunch``.

Generated from the option table (:data:`gpu_launch.options.args.OPTIONS`), as the man page
(:mod:`gpu_launch.options.manpage`) and the completion scripts are, so that the three cannot drift apart.
The text wraps to the terminal (``COLUMNS``, else the terminal's width, else 80; at most 100 columns,
which reads better than a full-width line).
"""

from __future__ import annotations

from gpu_launch.errors import MEANINGS
from gpu_launch.options.args import RUN, SUBCOMMANDS, Option, options_for

__all__ = ["EXAMPLES", "COMMAND_EXAMPLES", "NOTES", "SYNOPSIS", "usage", "short_usage", "width", "option_flags",
           "examples_for"]

#: The widest help is drawn; beyond it lines get harder to read, not better.
MAX_WIDTH = 100
#: Where an option's or subcommand's text starts in the help.
OPTION_COLUMN = 25
SUBCOMMAND_COLUMN = 15

EXAMPLES = (
    ("gpulaunch ls", "the GPUs, their memory, load and processes"),
    ("gpulaunch --gpus 4-7 python train.py --lr 3e-4", "run on physical GPUs 4..7 (cuda:0 = GPU 4)"),
    ("gpulaunch --auto 2 -- torchrun --nproc-per-node 2 train.py", "pick the best 2 GPUs, then run"),
    ("gpulaunch --fit 60GiB -- vllm serve M --tensor-parallel-size {n}", "fewest GPUs that hold 60 GiB; {n} becomes the count"),
    ("gpulaunch --fit model -- llama-server -m ./q4.gguf -c 8192 -ngl {gpu_layers}",
     "GPUs sized by the model itself; {gpu_layers} becomes the layers that fit (the rest stay on the CPU)"),
    ("gpulaunch --snapshot dgx-h100 --auto 4 --explain", "try it on a bundled example machine"),
    ('eval "$(gpulaunch env --auto 2)"', "set CUDA_VISIBLE_DEVICES & co. in this shell (no reservation: no command runs to hold one)"),
    ("gpulaunch check --auto 2", "start CUDA in a child and confirm cuda:i is the i-th chosen GPU; lint the inherited CUDA_VISIBLE_DEVICES"),
    ("gpulaunch --auto 2 --wait 2h -- python train.py", "wait up to 2 hours for 2 GPUs, in turn with other waiters"),
    ("gpulaunch each jobs.txt --gpus-per-job 2", "run every line of jobs.txt, each on 2 free GPUs as they free up"),
    ("gpulaunch --nodes 2 --gpus-per-node 8 --slurm --follow -- vllm serve M",
     "one run over 2 nodes of 8 GPUs through Slurm; every node gets vLLM's own rank, head and port flags"),
)
#: Examples shown by ``gpulaunch SUBCOMMAND --help`` (every one must parse: tests/test_help.py).
COMMAND_EXAMPLES: dict[str, tuple[tuple[str, str], ...]] = {
    "ls": (
        ("gpulaunch ls", "the GPUs, their memory, load and processes"),
        ("gpulaunch ls --topo", "add the link matrix: which GPUs share NVLink, PCIe switch, NUMA node"),
        ("gpulaunch ls --json > box.json", "save a snapshot; `gpulaunch --snapshot box.json ...` reads it back"),
    ),
    "topo": (
        ("gpulaunch topo", "the link matrix with CPU and NUMA affinity, like `nvidia-smi topo -m`"),
        ("gpulaunch --snapshot dgx-h100 topo", "the matrix of a bundled example machine"),
    ),
    "env": (
        ('eval "$(gpulaunch env --auto 2)"', "set CUDA_VISIBLE_DEVICES & co. in this bash/zsh (no reservation)"),
        ("gpulaunch env --auto 2 --shell fish | source", "the same in fish"),
        ("gpulaunch --snapshot dgx-h100 env --gpus 3,1 --json", "the devices and variables as JSON"),
    ),
    "check": (
        ("gpulaunch check --auto 2", "start CUDA in a child and confirm cuda:i is the i-th chosen GPU"),
        ("gpulaunch check --gpus 3,1 --uuid", "the same for an explicit choice, written as UUIDs"),
        ("gpulaunch check", "lint the inherited CUDA_VISIBLE_DEVICES and check the best single GPU"),
    ),
    "config": (
        ("gpulaunch config", "every setting, its value and where it came from"),
        ("GPULAUNCH_MIN_FREE=20GiB gpulaunch config --json", "the same as JSON, with an environment override"),
        ("gpulaunch config --idle", "what a flag on the command line would change"),
    ),
    "completions": (
        ("gpulaunch completions bash > ~/.local/share/bash-completion/completions/gpulaunch", "install for bash"),
        ("gpulaunch completions zsh > ~/.zfunc/_gpulaunch", "install for zsh (~/.zfunc on $fpath)"),
        ("gpulaunch completions fish > ~/.config/fish/completions/gpulaunch.fish", "install for fish"),
    ),
    "each": (
        ("gpulaunch each jobs.txt", "run every line of jobs.txt, each on 1 GPU as GPUs free up; logs in ./gpulaunch-logs"),
        ("gpulaunch each jobs.txt --gpus-per-job 2 --min-free 40GiB", "each job on 2 GPUs with 40 GiB free each"),
        ("gpulaunch each - --log-dir logs", "read the commands from stdin, one a line (each runs through /bin/sh -c)"),
        ("gpulaunch each jobs.txt --gpus 0-3 --jobs-per-gpu 2 --max-running 6",
         "on GPUs 0-3 only, two small jobs a GPU, at most 6 at once"),
        ("gpulaunch each jobs.txt --slurm --gpus-per-job 2 --max-running 8 --follow",
         "on a Slurm cluster: one job array, each task on 2 GPUs chosen inside its allocation; follow it"),
    ),
    "plan": (
        ("gpulaunch plan ./Llama-3.1-8B-Q4_K_M.gguf --ctx 32768", "weights, KV cache and allowance per GPU; -ngl"),
        ("gpulaunch --snapshot dgx-h100 plan --json -- vllm serve ./Llama-3.1-70B --max-model-len 32768",
         "the tensor-parallel size vLLM needs, read from the command, as JSON"),
    ),
    "locks": (
        ("gpulaunch locks init", "as root: root-owned /var/lib/gpulaunch/locks, a lock file per GPU; used when present"),
        ("gpulaunch --snapshot dgx-h100 locks init /srv/gpulaunch", "as root: another directory, for a snapshot's GPUs"),
    ),
    "submit": (
        ("gpulaunch submit --auto 2 -- python train.py --lr 3e-4",
         "a detached job: prints its id and returns; it waits for 2 GPUs, then runs (log out if you like)"),
        ("gpulaunch submit --gpus 3 --wait 2h -- python eval.py", "give up if GPU 3 is not free within 2 hours"),
        ("gpulaunch submit -q --auto 1 -- python train.py", "print nothing but the job id: id=$(gpulaunch submit ...)"),
    ),
    "jobs": (
        ("gpulaunch jobs", "your jobs: waiting (and where in the queue), running, done with the exit code, ..."),
        ("gpulaunch jobs 3", "job 3 in full: command, directory, times, GPUs, log, why it failed"),
        ("gpulaunch jobs --json", "the same for scripts"),
    ),
    "log": (
        ("gpulaunch log 3", "job 3's output so far"),
        ("gpulaunch log 3 -f", "follow it until the job ends; exit with the job's exit code"),
    ),
    "wait": (
        ("gpulaunch wait 3", "wait for job 3 to end; exit with its exit code (tsp -w)"),
        ("gpulaunch wait 3 4 5 && echo all done", "wait for all three; exit with the first failing one's code"),
    ),
    "cancel": (
        ("gpulaunch cancel 3", "a waiting job leaves the queue; a running one gets SIGTERM, SIGKILL 10 s later"),
        ("gpulaunch cancel 3 4 --grace 60", "give them a minute to save a checkpoint"),
    ),
    "help": (
        ("gpulaunch help ls", "the options and examples of one subcommand"),
        ("gpulaunch --help", "everything a launch accepts"),
    ),
}


#: Extra lines for ``gpulaunch SUBCOMMAND --help``, after the examples.
NOTES: dict[str, tuple[str, ...]] = {
    "submit": (
        "`gpulaunch --detach OPTIONS -- COMMAND` is the same, written as a launch. The job runs exactly as that "
        "launch would (in the --wait queue, reserving its GPUs for as long as the command runs), in a session of its "
        "own with stdin closed; its output goes to its log. Jobs and logs live in ~/.local/state/gpulaunch/jobs "
        "($XDG_STATE_HOME), readable by you alone; the command sees GPULAUNCH_JOB_ID.",
    ),
    "config": (
        "The file: ~/.config/gpulaunch/config.toml ($XDG_CONFIG_HOME; GPULAUNCH_CONFIG=FILE picks another, "
        "GPULAUNCH_CONFIG= none), TOML keys named like the long options:",
        '    min-free = "20GiB"',
        "    max-util = 30",
        "    idle = true",
        "Then GPULAUNCH_MIN_FREE=... variables, then flags: each overrides the one before. "
        "--gpus, --auto, --fit, --dry-run, --explain, --json have no default.",
    ),
}
SYNOPSIS = {"plan": "gpulaunch plan [OPTIONS] MODEL | gpulaunch plan [OPTIONS] -- COMMAND...",
            "completions": "gpulaunch completions bash|zsh|fish", "help": "gpulaunch help [SUBCOMMAND]",
            "each": "gpulaunch each [OPTIONS] [FILE | -]", "locks": "gpulaunch locks init [DIR]",
            "submit": "gpulaunch submit [OPTIONS] [--] COMMAND [ARGS...]", "jobs": "gpulaunch jobs [--json] [ID]",
            "log": "gpulaunch log [-f] ID", "wait": "gpulaunch wait [-q] ID...", "cancel": "gpulaunch cancel [--grace SECONDS] ID..."}


def width() -> int:
    """The width to wrap to: ``COLUMNS`` or the terminal's, 80 when neither is known, at most MAX_WIDTH."""
    import shutil

    return max(40, min(shutil.get_terminal_size((80, 24)).columns, MAX_WIDTH))


def _wrap(text: str, columns: int, first: str, rest: str) -> list[str]:
    """``text`` wrapped to ``columns``: the first line after ``first``, the others after ``rest``."""
    import textwrap

    return textwrap.wrap(text, columns, initial_indent=first, subsequent_indent=rest, break_on_hyphens=False,
                         break_long_words=True) or [first.rstrip()]


def _row(name: str, text: str, columns: int, column: int) -> list[str]:
    """``  NAME   text...`` with the text wrapped in its column; a long name gets a line of its own."""
    head = f"  {name}"
    if len(head) + 1 > column:
        return [head] + _wrap(text, columns, " " * column, " " * column)
    return _wrap(text, columns, head.ljust(column), " " * column)


def _example(command: str, columns: int) -> list[str]:
    """An example command, broken with shell continuations (`` \\``) where it does not fit."""
    import textwrap

    lines = textwrap.wrap(command, columns - 2, initial_indent="  ", subsequent_indent="    ",
                          break_long_words=False, break_on_hyphens=False)
    return [line + " \\" for line in lines[:-1]] + lines[-1:]


def option_flags(opt: Option) -> str:
    """``--wait [TIMEOUT]``, ``--gpus, -g SPEC``: how the help and the man page name an option."""
    value = f"[{opt.metavar}]" if opt.optional else opt.metavar
    return ", ".join(opt.names) + (f" {value}" if value else "")


def examples_for(command: str) -> list[tuple[str, str]]:
    """The examples ``gpulaunch COMMAND --help`` shows."""
    return (list(EXAMPLES) if command == RUN else list(COMMAND_EXAMPLES.get(command, ()))
            or [e for e in EXAMPLES if f" {command}" in e[0]] or list(EXAMPLES[:1]))


def usage(command: str = RUN, columns: int | None = None) -> str:
    """The help text for ``command``, generated from the option table, wrapped to ``columns``."""
    from gpu_launch import __version__

    columns = columns or width()
    lines = [f"gpulaunch {__version__}: put a command on the right NVIDIA GPUs", ""]
    if command == RUN:
        lines += ["usage: gpulaunch [OPTIONS] [--] COMMAND [ARGS...]", "       gpulaunch [OPTIONS] SUBCOMMAND", ""]
        lines.append("Subcommands:")
        for name, text in SUBCOMMANDS.items():
            lines += _row(name, text, columns, SUBCOMMAND_COLUMN)
        lines.append("")
    else:
        forms = SYNOPSIS.get(command, f"gpulaunch {command} [OPTIONS]").split(" | gpulaunch ")  # one form a line
        lines += [f"usage: {forms[0]}", *(f"       gpulaunch {form}" for form in forms[1:]), ""]
        lines += _wrap(SUBCOMMANDS.get(command, ""), columns, "  ", "  ") + [""]
    groups: dict[str, list[Option]] = {}
    for opt in options_for(command):
        groups.setdefault(opt.group, []).append(opt)
    for group, opts in groups.items():
        lines.append(f"{group}:")
        for opt in opts:
            lines += _row(option_flags(opt), opt.help, columns, OPTION_COLUMN)
        lines.append("")
    lines.append("Examples:")
    for example, what in examples_for(command):
        lines += _example(example, columns)
        lines += _wrap(what, columns, "      ", "      ")
    if command in NOTES:  # prose is wrapped; an indented line (a file's contents) is kept as it is
        lines.append("")
        for note in NOTES[command]:
            lines += [note] if note.startswith(" ") else _wrap(note, columns, "", "")
    lines += [""] + _wrap("Defaults for most options can be set in ~/.config/gpulaunch/config.toml or as GPULAUNCH_* "
                          "environment variables (GPULAUNCH_MIN_FREE=20GiB); flags win. `gpulaunch config` shows the "
                          "result.", columns, "", "")
    if command == RUN:
        lines += [""] + _wrap("CUDA's numbering then agrees with nvidia-smi's: CUDA_VISIBLE_DEVICES and "
                              "CUDA_DEVICE_ORDER=PCI_BUS_ID are set for the command, the cuda:i → GPU mapping is "
                              "printed on stderr, and the command is exec'd.", columns, "", "")
        lines += [""] + _wrap("Exit codes (once the command runs, its own exit status is gpulaunch's):", columns, "", "")
        for code, meaning in MEANINGS.items():
            lines += _row(str(int(code)), meaning, columns, 8)
    return "\n".join(line.rstrip() for line in lines) + "\n"


#: What a bare ``gpulaunch`` prints (on stderr, exit 2): the commands a new user needs first.
SHORT = (
    ("gpulaunch ls", "the GPUs: free memory, load, users"),
    ("gpulaunch --auto 2 -- python train.py", "run on the best 2 free GPUs"),
    ("gpulaunch each jobs.txt", "run each line on its own free GPU"),
)


def short_usage() -> str:
    """The few lines a bare ``gpulaunch`` prints: what it does, three commands, where the rest is."""
    lines = ["usage: gpulaunch [OPTIONS] [--] COMMAND [ARGS...]", "       gpulaunch SUBCOMMAND [OPTIONS]", ""]
    lines += [f"  {example:<39} {what}" for example, what in SHORT]
    lines += ["", "More: gpulaunch --help (every option, exit codes), gpulaunch help SUBCOMMAND"]
    return "\n".join(lines) + "\n"
