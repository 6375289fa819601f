"""The command line: one table of options (options/table.py), one small parser, no framework on the launch path.

``gpulaunch [OPTIONS] COMMAND [ARGS...]`` runs COMMAND; ``gpulaunch [OPTIONS] ls|env|...`` runs a
subcommand. Everything after ``--``, or from the first word that is not a gpulaunch option, belongs
to the command, its own flags included, and is passed on byte for byte. A subcommand name is only a
subcommand when no ``--gpus``/``--auto``/``--fit`` came before it (``gpulaunch --gpus 0 ls`` runs
the program ``ls``). Parsing is hand-written rather than built on click/typer: it keeps the launch
path's start-up near the interpreter's floor and gives exactly these pass-through rules.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from gpu_launch.base.records import dataclass, field
from gpu_launch.errors import UsageError
# The table itself lives in options/table.py; its names are re-exported here, where its readers import them.
from gpu_launch.options.table import (  # noqa: F401
    ANY, CHOOSE_HOW, CHOOSING, CONSTRAINING, EACH, OPTIONS, PASS_THROUGH, PER_LAUNCH, RUN, SELECTING, SIZING,
    SUBCOMMANDS, SUBMITTING, Option,
)

# Annotations only: importing typing costs ~3 ms of every launch (docs/performance.md).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["Option", "OPTIONS", "SUBCOMMANDS", "Invocation", "parse", "suggest_subcommand", "options_for", "invocation"]

_BY_NAME = {name: opt for opt in OPTIONS for name in opt.names}


@dataclass(frozen=True)
class Invocation:
    """What the user asked for: a subcommand (``run`` for a launch), its options and arguments."""

    command: str
    options: dict[str, Any] = field(default_factory=dict)
    positionals: tuple[str, ...] = ()
    argv: tuple[str, ...] = ()  # the program to run, for ``run``
    flags: frozenset[str] = frozenset()  # the options given on the command line (not defaults from config)
    words: tuple[tuple[str, ...], ...] = ()  # each option as written (``("--auto", "2")``), in order: `submit` passes them on

    def get(self, dest: str, default: Any = None) -> Any:
        return self.options.get(dest, default)


def options_for(command: str) -> tuple[Option, ...]:
    """The options ``command`` takes, as help and completion show them."""
    return tuple(o for o in OPTIONS if command in o.commands and not (command == "config" and o.dest in PER_LAUNCH))


def suggest_subcommand(word: str) -> str | None:
    """The subcommand ``word`` looks like a typo of (``lss`` -> ``ls``), if any."""
    if word in SUBCOMMANDS or not word or "/" in word:
        return None
    import difflib  # ~1 ms of start-up, paid only by a command that is not a subcommand's name

    close = difflib.get_close_matches(word, list(SUBCOMMANDS), n=1, cutoff=0.75)
    return close[0] if close else None


def _unknown(token: str) -> UsageError:
    import difflib  # only on this error path: it costs ~1 ms of start-up

    name = token.split("=", 1)[0]
    from gpu_launch.options import peers

    # Another tool's name for it first (nvisel's --min-free-memory is --min-free), then spelling distance.
    hint = peers.hint(name)
    if hint is None:
        close = difflib.get_close_matches(name, list(_BY_NAME), n=1, cutoff=0.6)
        hint = f"did you mean {close[0]}?" if close else "see `gpulaunch --help`"
    return UsageError(f"unknown option {name}", hint=hint)


def parse(argv: Sequence[str]) -> Invocation:
    """Split ``argv`` (without the program name) into gpulaunch's part and the command's."""
    options: dict[str, Any] = {}
    positionals: list[str] = []
    command: str | None = None
    words: list[tuple[str, ...]] = []
    i = 0
    while i < len(argv):
        token = argv[i]
        if token == "--":
            if command is not None and command not in PASS_THROUGH:
                positionals.extend(argv[i + 1:])
                break
            return _finish(command or RUN, options, positionals, tuple(argv[i + 1:]), words=words)
        if token.startswith("-") and token != "-":
            nxt = _take_option(argv, i, options)
            words.append(tuple(argv[i:nxt]))
            i = nxt
            continue
        if command is None and token in SUBCOMMANDS and not (CHOOSE_HOW & options.keys()):
            command = token
        elif command in PASS_THROUGH:
            return _finish(command, options, positionals, tuple(argv[i:]), words=words)
        elif command is not None:
            positionals.append(token)
        else:
            return _finish(RUN, options, positionals, tuple(argv[i:]), words=words)
        i += 1
    return _finish(command or RUN, options, positionals, (), words=words)


def _take_option(argv: Sequence[str], i: int, options: dict[str, Any]) -> int:
    token = argv[i]
    name, has_eq, inline = token.partition("=")
    opt = _BY_NAME.get(name)
    if opt is None and len(token) > 2 and token[1] != "-":
        return _take_cluster(argv, i, options)
    if opt is None:
        raise _unknown(token)
    if not opt.takes_value:
        if has_eq:
            raise UsageError(f"{name} takes no value", hint=f"write just {name}")
        options[opt.dest] = options.get(opt.dest, 0) + 1 if opt.counted else True
        return i + 1
    if has_eq:
        value, nxt = inline, i + 1
    elif opt.optional:
        # `--wait 2h` takes 2h; `--wait python train.py` takes nothing: only a word that converts.
        nxt = i + 1
        if i + 1 < len(argv) and opt.convert is not None and (opt.takes_next is None or opt.takes_next(argv[i + 1])):
            try:
                converted = opt.convert(argv[i + 1], name)
            except UsageError:
                pass
            else:
                options[opt.dest] = converted
                options.setdefault("_given", {})[opt.dest] = name
                return i + 2
        options[opt.dest] = opt.default
        options.setdefault("_given", {})[opt.dest] = name
        return nxt
    elif i + 1 < len(argv):
        value, nxt = argv[i + 1], i + 2
    else:
        raise UsageError(f"{name} needs a value", hint=f"e.g. {name} {opt.metavar}")
    converted = opt.convert(value, name) if opt.convert else value
    options[opt.dest] = (*options.get(opt.dest, ()), converted) if opt.repeat else converted
    options.setdefault("_given", {})[opt.dest] = name
    return nxt


def _take_cluster(argv: Sequence[str], i: int, options: dict[str, Any]) -> int:
    """Short options written together, as POSIX utilities take them: ``-vv`` counts twice, ``-qn2`` is
    ``-q -n 2``, ``-qn 2`` takes the value from the next word. The first short option that takes a
    value ends the cluster: the rest of the word, or the next word, is its value."""
    token = argv[i]
    for pos in range(1, len(token)):
        opt = _BY_NAME.get("-" + token[pos])
        if opt is None:
            raise _unknown("-" + token[pos]) if pos > 1 else _unknown(token)
        if not opt.takes_value:
            options[opt.dest] = options.get(opt.dest, 0) + 1 if opt.counted else True
            continue
        rest = token[pos + 1:]
        if rest:
            value, nxt = rest, i + 1
        elif i + 1 < len(argv):
            value, nxt = argv[i + 1], i + 2
        else:
            raise UsageError(f"-{token[pos]} needs a value", hint=f"e.g. -{token[pos]} {opt.metavar}")
        converted = opt.convert(value, opt.names[0]) if opt.convert else value
        options[opt.dest] = (*options.get(opt.dest, ()), converted) if opt.repeat else converted
        options.setdefault("_given", {})[opt.dest] = "-" + token[pos]
        return nxt
    return i + 1


def _finish(command: str, options: dict[str, Any], positionals: list[str], argv: tuple[str, ...],
            names: Mapping[str, str] | None = None, words: Sequence[tuple[str, ...]] = ()) -> Invocation:
    given: dict[str, str] = options.pop("_given", {})
    for dest in options:
        opt = next(o for o in OPTIONS if o.dest == dest)
        if command not in opt.commands:
            where = ("a launch" if opt.commands == SELECTING else "a launch or each --slurm"
                     if opt.commands == SELECTING | {"each"} else "a launch, env or check" if opt.commands == CHOOSING
                     else "a launch, env, check, each or plan" if opt.commands == CONSTRAINING
                     else "/".join("a launch" if c == RUN else f"`{c}`" for c in sorted(opt.commands)))
            shown = given.get(dest, opt.names[0])
            raise UsageError(f"{shown} does not apply to `{command}`", hint=f"it is for {where}")

    def name(dest: str) -> str:
        return (names or {}).get(dest) or f"--{dest.replace('_', '-')}"

    chosen = [name(d) for d in ("gpus", "auto", "fit") if d in options]
    if "min_count" in options or "max_count" in options:
        chosen.append("/".join(name(d) for d in ("min_count", "max_count") if d in options))
    if len(chosen) > 1:
        raise UsageError(f"{' and '.join(chosen)} cannot be used together",
                         hint=f"name GPUs with {name('gpus')}, or let {name('auto')}/{name('fit')} pick them"
                              + (" (--auto N is --min-count N --max-count N)" if {"min_count", "max_count"} & options.keys()
                                 else ""))
    least, most = options.get("min_count"), options.get("max_count")
    if least is not None and most is not None and least > most:
        raise UsageError(f"{name('min_count')} {least} is more than {name('max_count')} {most}",
                         hint=f"e.g. {name('min_count')} 1 {name('max_count')} {least}")
    if options.get("mig") and (least is not None or most is not None):
        raise UsageError(f"{name('mig')} chooses one MIG device: {name('min_count')}/{name('max_count')} make no "
                         "sense with it", hint="leave them out: --mig alone")
    if "gpus" in options and options.get("mig"):  # (the Python API may pass mig=False)
        raise UsageError(f"{name('mig')} makes no sense with {name('gpus')}",
                         hint=f"name the MIG device by its MIG- UUID in {name('gpus')}, or use --auto 1 --mig")
    if "gpus" in options and "exclude" in options:
        raise UsageError(f"{name('exclude')} makes no sense with {name('gpus')}",
                         hint=f"leave the GPU out of {name('gpus')} instead")
    return Invocation(command, options, tuple(positionals), argv, frozenset(options), tuple(words))


def invocation(command: str, options: Mapping[str, Any], names: Mapping[str, str] | None = None) -> Invocation:
    """An invocation of ``command`` from option values already converted (the Python API builds its
    requests so), checked as the command line is checked. ``names`` says how the caller spelled
    each option (``{"auto": "n"}``), for the messages; by default the long flag."""
    return _finish(command, {**options, "_given": dict(names or {})}, [], (), names)


