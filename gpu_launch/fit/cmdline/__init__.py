"""What an engine's command line means: one table per engine, one reader for them all.

Each table (a module of this package, named for its engine) lists the flags gpulaunch cares about
(the model, the context, the parallel sizes, the rank and head flags of a several-node run...), every
spelling the engine's own parser accepts for them, the engine's environment variable where it
documents one, the values it takes, and its parser's rules: whether ``--opt=value`` is read, whether
``_`` in a long option's name reads as ``-``, whether argparse's unique prefixes count, and what a
repeated option means. :func:`read` applies a table to a command and answers, for each meaning,
what the engine itself will see: the last value given (or a refusal where the engine refuses a
repeat), else the environment's. Sizing (``fit/command.py``) and the node task of a several-node
launch both read commands through it, so the two never disagree; what each engine needs on every
node of such a run is written beside its table (each module's ``on_nodes``, :mod:`.node_flags`).

A number out of the range the engine accepts is one error line (exit 2) with the valid range,
never a silent default: the table says the range, and no value is converted before its length is
bounded (``-ngl`` of 5000 nines stays text). A value that is a whole-argument placeholder
(``{tp}``) is gpulaunch's to fill and is not checked.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Mapping, Sequence

from gpu_launch.errors import UsageError
from gpu_launch.fit.cmdline.python_options import python_start
from gpu_launch.base.records import dataclass, field  # a node task reads its command on the launch path

# Annotations only: importing typing costs ~3 ms of every launch (docs/performance.md).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["Flag", "Table", "Setting", "Said", "table_for", "table_module", "read", "engine_of", "engine_args", "sized_as", "TABLES"]

#: The tables there are: engine (or launcher) name -> module of this package.
TABLES = {"llama.cpp": "llama_cpp", "llama-cpp-python": "llama_cpp_python", "vllm": "vllm", "sglang": "sglang",
          "tgi": "tgi", "mlc": "mlc", "transformers": "transformers", "torchrun": "torchrun", "accelerate": "accelerate",
          "deepspeed": "deepspeed"}
#: Tables of their own for an engine that sizes as another: llama-cpp-python's server runs llama.cpp
SIZED_AS = {"llama-cpp-python": "llama.cpp"}
_TRUE = {"1", "true", "on", "enabled", "yes"}
_FALSE = {"0", "false", "off", "disabled", "no"}
_NUMERIC = {"int", "tokens", "float"}
DEFAULT = -2  # a Setting's index when it is the engine's own default
_MAX_DIGITS = 12  # no engine number needs more; longer text is refused before any conversion


@dataclass(frozen=True)
class Flag:
    """One meaning and the spellings that set it. ``names[0]`` is how gpulaunch writes it.

    ``kind``: "text", "int", "tokens" (an int with vLLM's k/K/m/M/g/G suffixes), "float" or
    "switch" (no value: it stands for ``sets``). ``low``/``high`` bound a number; ``words`` maps
    special values (``-ngl auto``, ``--max-model-len -1``) to what they mean; ``valid`` says the
    valid values in words for the error line. ``within``: the option whose ``k=v;k=v`` value holds
    this one (MLC-LLM's ``--overrides``).
    """

    meaning: str
    names: tuple[str, ...]
    kind: str = "text"
    env: str = ""
    low: float | None = None
    high: float | None = None
    words: tuple[tuple[str, str], ...] = ()
    sets: str = "1"
    valid: str = ""
    within: str = ""
    bare: str = ""  # the value it stands for when given without one (llama.cpp's older `-fa` alone)
    append: str = ""  # a repeat adds to the value, joined by this (llama.cpp's -ot lists: ","), not replaces it


@dataclass(frozen=True)
class Table:
    """An engine's command line: its flags and its parser's rules (``source`` says where they were read)."""

    engine: str
    flags: tuple[Flag, ...]
    source: str
    equals: bool = True  # --opt=value is the option with a value
    underscores: bool = False  # `_` in a long option's name reads as `-` (vLLM, llama.cpp)
    abbreviations: bool = False  # argparse: a unique prefix of a long option is that option
    repeats: str = "last"  # "last": the last one given wins; "refused": the engine refuses a repeat (clap)
    others: tuple[str, ...] = ()  # the engine's other options that share a prefix with these (ambiguity)
    model_verbs: tuple[str, ...] = ()  # `serve M`: the word after one of these verbs is the model
    options_end_at_positional: bool = False  # launchers: what follows the script is the script's own
    commands: tuple[str, ...] = ()  # a launcher's subcommand before its options (accelerate's `launch`)
    #: launchers: their options that take no value; any other option takes the next word (so that the
    #: value of an option gpulaunch does not read is not taken for the script)
    switches: tuple[str, ...] = ()
    #: what the engine runs with where neither the command nor the environment says, when that differs
    #: from the engine it sizes as (llama-cpp-python: n_ctx 2048, n_gpu_layers 0): (meaning, value as written)
    defaults: tuple[tuple[str, str], ...] = ()

    def named(self, name: str) -> Flag | None:
        for flag in self.flags:
            if name in flag.names and not flag.within:
                return flag
        return None


@dataclass(frozen=True)
class Setting:
    """What one meaning was set to: the value as written (a switch: its ``sets``), how it was
    written (``-tp 4``, ``LLAMA_ARG_CTX_SIZE=8192``) and where (index in the command; -1: the environment;
    -2, :data:`DEFAULT`: the engine's own default, where its table states one)."""

    meaning: str
    text: str
    written: str
    index: int = -1
    flag: Flag | None = None

    @property
    def placeholder(self) -> bool:
        return self.text[:1] == "{" and self.text[-1:] == "}"

    @property
    def default(self) -> bool:
        """Neither the command nor the environment says it: the engine's own default (``Table.defaults``)."""
        return self.index == DEFAULT


@dataclass(frozen=True)
class Said:
    """A command read through its engine's table: for each meaning, what the engine will see."""

    engine: str
    settings: Mapping[str, Setting] = field(default_factory=dict)
    notes: tuple[str, ...] = ()  # spellings seen but not read, and why
    module: str = ""  # ``python -m MODULE``'s module, if it was started so
    verb: str = ""  # the subcommand it was given (``serve``, ``launch``), if any
    start: int = 1  # where the engine's own options begin in the command (after the module and the verb)
    script: int = -1  # launchers: where their options end, at the script (or module) they run; -1: none

    def get(self, meaning: str) -> Setting | None:
        return self.settings.get(meaning)

    def text(self, meaning: str) -> str | None:
        found = self.settings.get(meaning)
        return found.text if found is not None else None

    def number(self, meaning: str) -> int | float | None:
        """The value as a number (checked when read), or None: not set, a placeholder, or a special word."""
        found = self.settings.get(meaning)
        if (found is None or found.placeholder or found.flag is None or found.flag.kind not in _NUMERIC
                or dict(found.flag.words).get(found.text)):
            return None
        return _number(found.text, found.flag, found.written, self.engine)

    def defaulted(self, meaning: str) -> bool:
        """Whether ``meaning`` is the engine's own default: neither the command nor the environment set it."""
        found = self.settings.get(meaning)
        return found is not None and found.default

    def word(self, meaning: str) -> str | None:
        """The special word the value means (``auto``, ``all``), or None."""
        found = self.settings.get(meaning)
        if found is None or found.flag is None:
            return None
        return dict(found.flag.words).get(found.text)


def table_module(engine: str) -> Any:
    """The module of ``engine``'s table (its ``TABLE``, and beside it ``nodes_form``/``on_nodes``)."""
    return importlib.import_module(f"{__name__}.{TABLES[engine]}")


def table_for(engine: str) -> Table:
    table: Table = table_module(engine).TABLE
    return table


def _python_module(argv: Sequence[str]) -> tuple[str, int] | None:
    """``python [python's options] -m MODULE ...`` -> (MODULE, index of the first word after it), else None."""
    module, start = python_start(argv)
    return (module, start) if module else None


def engine_of(argv: Sequence[str]) -> str | None:
    """Which table reads ``argv``: the engine from its command word or ``python -m`` module, a
    launcher (torchrun, accelerate, deepspeed), or None."""
    if not argv:
        return None
    word = os.path.basename(argv[0])
    if word.startswith("llama-") or word in ("main", "server", "rpc-server"):
        return "llama.cpp"
    named = {"vllm": "vllm", "sglang": "sglang", "mlc_llm": "mlc", "mlc-llm": "mlc", "torchrun": "torchrun",
             "text-generation-launcher": "tgi", "accelerate": "accelerate", "accelerate-launch": "accelerate",
             "deepspeed": "deepspeed", "ds": "deepspeed", "deepspeed.pt": "deepspeed"}  # DeepSpeed's bin/: one runner
    if word in named:
        return named[word]
    if word.startswith("python"):
        found = _python_module(argv)
        top = found[0] if found else ""
        for prefix, engine in (("vllm", "vllm"), ("sglang", "sglang"), ("sglang_router", "sglang"),
                               ("mlc_llm", "mlc"), ("llama_cpp", "llama-cpp-python"),
                               ("torch.distributed.run", "torchrun"), ("torch.distributed.launch", "torchrun"),
                               ("accelerate", "accelerate"), ("deepspeed", "deepspeed")):
            if top == prefix or top.startswith(prefix + "."):
                return engine
        return "transformers"
    return None


def sized_as(table: str | None) -> str | None:
    """The engine a table's command is sized as: its own name, or llama.cpp for llama-cpp-python's server."""
    return SIZED_AS.get(table, table) if table is not None else None


def engine_args(argv: Sequence[str]) -> tuple[int, list[str]]:
    """(offset, the engine's own arguments): what follows the command word, or python's own options
    and ``-m MODULE`` (a script's: the script and what follows it)."""
    if argv and os.path.basename(argv[0]).startswith("python"):
        start = python_start(argv)[1]
        return start, list(argv[start:])
    return 1, list(argv[1:])


def _number(text: str, flag: Flag, written: str, engine: str) -> int | float:
    """``text`` as ``flag``'s kind of number, within its range; else one UsageError line (exit 2)."""
    raw = text.strip()
    value: int | float | None = None
    if raw.isascii() and 0 < len(raw) <= _MAX_DIGITS:
        if flag.kind == "float":
            try:
                value = float(raw)
            except ValueError:
                value = None
            if value is not None and value != value:  # NaN
                value = None
        else:
            value = _int(raw, tokens=flag.kind == "tokens")
    in_range = (value is not None and (flag.low is None or value >= flag.low)
                and (flag.high is None or value <= flag.high))
    if value is None or not in_range:
        shown = written if len(written) <= 48 else written[:45] + "…"
        what = "not a number" if value is None else "out of range"
        raise UsageError(f"the command's {shown} is {what} for {engine}",
                         hint=f"{flag.names[0]} takes {flag.valid or _range(flag)}")
    return value


def _bound(value: float, kind: str) -> str:
    """A bound as the flag's kind writes it: an integer whole (2147483647, never 2.14748e+09)."""
    if kind != "float" or float(value).is_integer() and abs(value) < 1e16:
        return str(int(value))
    return f"{value:g}"


def _range(flag: Flag) -> str:
    low = "" if flag.low is None else _bound(flag.low, flag.kind)
    high = "" if flag.high is None else _bound(flag.high, flag.kind)
    return f"{low} to {high}" if low and high else f"at least {low}" if low else f"at most {high}"


#: vLLM's human_readable_int (vllm/utils/argparse_utils.py): decimal k/m/g/t, binary K/M/G/T (no decimals).
_SUFFIX = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def _int(raw: str, tokens: bool) -> int | None:
    sign = -1 if raw[:1] == "-" else 1
    digits = raw[1:] if raw[:1] in "+-" else raw
    if tokens and digits[-1:] in _SUFFIX:
        number, mult = digits[:-1], _SUFFIX[digits[-1]]
        whole, dot, frac = number.partition(".")
        if not whole.isdigit() or (dot and (not frac.isdigit() or digits[-1].isupper())):
            return None
        if len(number) <= 30:  # as vLLM reads it, float rounding and all: `8.03k` is 8029 tokens to vLLM
            return sign * int(float(number) * mult)
        return sign * (int(whole) * mult + (int(frac) * mult // 10 ** len(frac) if dot else 0))  # far out of range
    return sign * int(digits) if digits.isdigit() else None


def _long_name(arg: str, table: Table) -> str:
    """The option's name as the engine looks it up: ``--max_model_len`` is ``--max-model-len`` to vLLM."""
    if table.underscores and arg.startswith("--"):
        head, dot, tail = arg.partition(".")
        return head.replace("_", "-") + dot + tail
    return arg


def _resolve(name: str, table: Table) -> Flag | None:
    """The table's flag ``name`` means, argparse's unique prefixes too (an ambiguous one is refused,
    as the engine refuses it: argparse's _parse_optional)."""
    flag = table.named(name)
    if flag is not None or not (table.abbreviations and name.startswith("--") and len(name) > 3):
        return flag
    known = [n for f in table.flags if not f.within for n in f.names if n.startswith("--")]
    matches = sorted({n for n in (*known, *table.others) if n.startswith(name)})
    if len(matches) == 1 and matches[0] in known:
        return table.named(matches[0])
    if len(matches) > 1 and any(m in known for m in matches):
        raise UsageError(f"the command's {name} is ambiguous to {table.engine}: it could be {', '.join(matches)}",
                         hint=f"{table.engine} refuses it too; write the option in full")
    return None


def read(argv: Sequence[str], engine: str | None = None, environ: Mapping[str, str] | None = None) -> Said:
    """What ``argv`` (the whole command, program first) sets, by ``engine``'s table (default: the
    one :func:`engine_of` finds), its environment variables read from ``environ`` (default none:
    the child's environment is the caller's to give). Raises UsageError (exit 2) for a number out
    of the engine's range and for a repeat the engine refuses."""
    name = engine or engine_of(argv)
    if name is None or name not in TABLES:
        return Said(name or "")
    table = table_for(name)
    offset, args = engine_args(argv)
    found: dict[str, Setting] = {}
    counts: dict[str, int] = {}
    notes: list[str] = []
    positional: list[tuple[int, str]] = []
    script = -1
    verb = args[0] if args and args[0] in (*table.model_verbs, *table.commands) else ""
    if verb:
        positional.append((offset, verb))
    i = 1 if verb else 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            positional += [(offset + j, a) for j, a in enumerate(args[i + 1:], start=i + 1)]
            break
        if not arg.startswith("-") or arg == "-" or _is_negative_number(arg):
            positional.append((offset + i, arg))
            if table.options_end_at_positional:
                script = offset + i
                break
            i += 1
            continue
        name_part, eq, inline = arg.partition("=")
        flag = _resolve(_long_name(name_part if eq else arg, table), table)
        if flag is not None and eq and not table.equals:
            notes.append(f"{arg!r} is not read: {table.engine} takes no OPTION=VALUE, the value is the next word "
                         f"(write {name_part} {inline})")
            flag = None
        if flag is None:
            i += 2 if table.options_end_at_positional and not eq and not _switch(arg, table) else 1
            continue
        if flag.kind == "switch":
            if eq:
                i += 1
                continue
            value, used = flag.sets, 1
        elif eq:
            value, used = inline, 1
        elif i + 1 < len(args) and not (flag.bare and args[i + 1].startswith("-")):
            value, used = args[i + 1], 2
        elif flag.bare:
            value, used = flag.bare, 1
        else:
            break  # the engine says "expected one argument"
        counts[flag.meaning] = counts.get(flag.meaning, 0) + 1
        written = arg if eq or used == 1 else f"{arg} {value}"
        if counts[flag.meaning] > 1 and table.repeats == "refused" and flag.kind != "switch":
            raise UsageError(f"{table.engine} refuses {written}: {found[flag.meaning].written.split()[0]} is given "
                             "twice", hint="give it once")
        if flag.meaning == "overrides":
            _overrides(value, offset + i, table, found, counts)  # argparse: the last --overrides replaces the rest
        elif flag.append and flag.meaning in found:
            before = found[flag.meaning]
            found[flag.meaning] = Setting(flag.meaning, before.text + flag.append + value,
                                          f"{before.written} {written}", before.index, flag)
        else:
            found[flag.meaning] = Setting(flag.meaning, value, written, offset + i, flag)
        i += used
    _model_positional(table, positional, found)
    _from_environment(table, environ or {}, found)
    for meaning, value in table.defaults:
        if meaning not in found:
            flag = next(f for f in table.flags if f.meaning == meaning)
            found[meaning] = Setting(meaning, value, f"{flag.names[0]} {value}", DEFAULT, flag)
    module = _python_module(argv) if argv and os.path.basename(argv[0]).startswith("python") else None
    said = Said(table.engine, found, tuple(notes), module[0] if module else "", verb, offset + (1 if verb else 0),
                script)
    for meaning in found:  # every number checked where it comes in, placeholders aside
        said.number(meaning)
    return said


def _is_negative_number(arg: str) -> bool:
    return arg[1:2].isdigit()


def _switch(arg: str, table: Table) -> bool:
    """A launcher's option that takes no value (argparse's unique prefix of one too)."""
    if arg in table.switches:
        return True
    if not (table.abbreviations and arg.startswith("--") and len(arg) > 3):
        return False
    return len({s for s in table.switches if s.startswith(arg)}) == 1


def _overrides(value: str, index: int, table: Table, found: dict[str, Setting], counts: dict[str, int]) -> None:
    """MLC-LLM's ``--overrides "k=v;k=v"``: argparse inside argparse, so the last key wins, and a
    later ``--overrides`` replaces the earlier one whole (mlc_llm/cli/serve.py, EngineConfigOverride.from_str)."""
    for meaning in [m for m, s in found.items() if s.flag is not None and s.flag.within]:
        del found[meaning]
    for part in value.split(";"):
        key, eq, text = part.partition("=")
        flag = next((f for f in table.flags if f.within and key.strip() in f.names), None)
        if flag is not None and eq:
            found[flag.meaning] = Setting(flag.meaning, text.strip(), f"{key.strip()}={text.strip()}", index, flag)


def _model_positional(table: Table, positional: list[tuple[int, str]], found: dict[str, Setting]) -> None:
    """``vllm serve M``, ``mlc_llm serve|chat M``: the word after the verb is the model (a
    ``--model`` wins where the engine moves it there: vLLM's FlexibleArgumentParser.parse_args)."""
    if "model" in found or not table.model_verbs or len(positional) < 2:
        return
    (_, verb), (index, model) = positional[0], positional[1]
    if verb in table.model_verbs and index == positional[0][0] + 1:
        found["model"] = Setting("model", model, model, index, table.named("--model") or Flag("model", ()))


def _from_environment(table: Table, environ: Mapping[str, str], found: dict[str, Setting]) -> None:
    """The engine's own variables, for what the command line leaves unset (llama.cpp reads them
    first and lets the command line override them: common_params_parse_ex; clap's ``env`` likewise)."""
    for flag in table.flags:
        if not flag.env or flag.meaning in found or flag.env not in environ:
            continue
        value = environ[flag.env]
        if flag.kind == "switch":
            truth = value.strip().lower()
            if truth not in _TRUE | _FALSE:
                continue
            positive = truth in _TRUE
            value = flag.sets if positive else ("0" if flag.sets == "1" else "1")
        found[flag.meaning] = Setting(flag.meaning, value, f"{flag.env}={value}", -1, flag)
