"""What the completion scripts share: the option table read for the shells (which options take a value,
which value each completes, what each subcommand takes after it), from :mod:`gpu_launch.options.args`."""

from __future__ import annotations

from collections.abc import Sequence

from gpu_launch.options.args import OPTIONS, SUBCOMMANDS, Option, options_for

__all__ = ["SHELLS", "DURATION_ERE", "SELECTING_DESTS", "GPU_DESTS", "POSITIONALS", "FILE_POSITIONAL", "JOB_POSITIONAL",
           "MODEL_POSITIONAL", "MODEL_SUFFIXES",
           "option_names",
           "word_kinds", "choices", "value_kind", "examples", "for_command"]

SHELLS = ("bash", "zsh", "fish")
SELECTING_DESTS = ("gpus", "auto", "fit")  # after one of these, a subcommand name is a program
GPU_DESTS = ("gpus", "exclude")
#: Words a subcommand takes after it.
POSITIONALS: dict[str, tuple[str, ...]] = {"completions": SHELLS, "help": tuple(SUBCOMMANDS), "locks": ("init",)}
FILE_POSITIONAL = ("each",)  # the job file
MODEL_POSITIONAL = ("plan",)  # the model
#: What a model reader takes (modelfile/): a GGUF or a safetensors file, or a folder (safetensors with
#: config.json, MLC-LLM); a completion offers these files and every folder (one may hold a model, or lead to one).
MODEL_SUFFIXES = (".gguf", ".safetensors")
#: Subcommands that take job ids, and which jobs to offer (``gpulaunch __complete jobs WHICH``).
JOB_POSITIONAL = {"jobs": "all", "log": "all", "wait": "all", "cancel": "active"}
#: What units.parse_duration accepts (90, 90s, 30m, 2h, 1h30m, 1d), as a POSIX ERE for the shells;
#: an optional value (--wait's TIMEOUT) is taken from the next word only when it matches.
DURATION_ERE = r"^([0-9]+([.][0-9]+)?[smhdSMHD]?)+$"


def option_names(opts: Sequence[Option]) -> list[str]:
    return [name for opt in opts for name in opt.names]


def word_kinds() -> tuple[list[str], list[str], list[str]]:
    """Option names that, in the scan for the command, take the next word: always, when selecting
    (after which a subcommand name is a program), and only when it is a duration (``--wait``)."""
    value_opts = [o for o in OPTIONS if o.takes_value]
    selecting = option_names([o for o in value_opts if o.dest in SELECTING_DESTS])
    optional = option_names([o for o in value_opts if o.optional])
    other_values = option_names([o for o in value_opts if o.dest not in SELECTING_DESTS and not o.optional])
    return selecting, other_values, optional


def choices() -> dict[str, tuple[str, ...]]:
    """Options whose value is one of a few words (the modules that check them own the lists)."""
    from gpu_launch.fit.engines import ENGINES
    from gpu_launch.fit.kv_units import KV_TYPES
    from gpu_launch.reservations.waiting import FALLBACKS
    from gpu_launch.run.affinity import MODES
    from gpu_launch.views.shellenv import SHELLS as ENV_SHELLS

    return {"bind": MODES, "shell": ENV_SHELLS, "fallback": FALLBACKS, "engine": tuple(ENGINES),
            "kv_type": tuple(KV_TYPES)}


def value_kind(opt: Option) -> str:
    """How to complete the option's value: gpus, snapshot, model, choices, file, dir or none."""
    if opt.dest in GPU_DESTS:
        return "gpus"
    if opt.dest == "fit":  # SIZE or MODEL: only a model is a path
        return "model"
    if opt.dest == "snapshot":
        return "snapshot"
    if opt.dest in choices():
        return "choices"
    return {"FILE": "file", "DIR": "dir", "PATH": "file"}.get(opt.metavar, "none")


def examples() -> list[str]:
    from gpu_launch.hardware.snapshot import example_names

    return example_names()


def for_command(cmd: str) -> list[Option]:
    return list(options_for(cmd))
