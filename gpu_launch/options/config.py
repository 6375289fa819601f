"""Defaults for options: the config file, then ``GPULAUNCH_*`` variables, then flags (flags win).

The file is TOML, top-level keys named like the long flags without dashes::

    # ~/.config/gpulaunch/config.toml   ($XDG_CONFIG_HOME/gpulaunch/config.toml; GPULAUNCH_CONFIG=FILE)
    min-free = "20GiB"
    max-util = 30
    exclude = "0"
    idle = true

Each key also has an environment variable (``min-free`` → ``GPULAUNCH_MIN_FREE``). Values go through
the same converters as the flags, so a bad value gets the flag's own message, prefixed with where it
came from (``FILE:LINE: min-free: ...``). Options that say what *this* command does (``--gpus``,
``--auto``, ``--fit``, ``--dry-run``, ``--explain``, ``--json``, ``--help``, ``--version``) are not
defaults and cannot be set here. The launch path pays one failed ``open`` when there is no file, and
imports ``tomllib`` only when there is one.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

from gpu_launch.base.records import dataclass, replace
from gpu_launch.options.args import OPTIONS, PER_LAUNCH, Invocation, Option
from gpu_launch.errors import ConfigError, GpuLaunchError, UsageError

# Annotations only: importing typing costs ~3 ms of every launch (docs/performance.md).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["NOT_CONFIGURABLE", "SCHEMA_VERSION", "Setting", "configurable", "key_of", "env_name", "config_path",
           "read_file", "read_env", "layered", "apply", "effective", "as_json", "as_text"]

SCHEMA_VERSION = 1
#: Options that choose what one command does; a default for them would surprise (documented in docs/configuration.md).
NOT_CONFIGURABLE = PER_LAUNCH | {"json", "help", "version"}
#: A default that makes no sense next to a flag the user did give: skipped, not an error.
_SKIP_WITH = {"exclude": "gpus", "mig": "gpus"}
_MAX_BYTES = 1024 * 1024  # a config file is a few lines: refuse /dev/zero or a log file given by mistake
_PATHS = ("DIR", "FILE")  # values that are paths: only a TOML string, never lock-dir = 5 read as ./5
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


@dataclass(frozen=True)
class Setting:
    """One option's effective value and where it came from.

    This module is on every launch's path: a frozen record (:mod:`gpu_launch.base.records`) costs next to
    nothing to create at import, a class-syntax NamedTuple would import typing (~3 ms).
    """

    option: str  # "--min-free"
    dest: str
    value: Any  # converted, as the parser would store it; None/False when unset
    text: str | bool | int | None  # as written: the file's or variable's text; bool/int for flags
    source: str  # "default" | "file" | "env" | "flag"
    where: str = ""  # "PATH:LINE", "GPULAUNCH_MIN_FREE", "--min-free"


def configurable() -> tuple[Option, ...]:
    return tuple(o for o in OPTIONS if o.dest not in NOT_CONFIGURABLE)


def key_of(opt: Option) -> str:
    """The config-file key: the long flag without its dashes (``min-free``)."""
    return next(n for n in opt.names if n.startswith("--"))[2:]


def env_name(opt: Option) -> str:
    return "GPULAUNCH_" + key_of(opt).upper().replace("-", "_")


def config_path(environ: Mapping[str, str]) -> str | None:
    """``GPULAUNCH_CONFIG`` (empty: no file), else ``$XDG_CONFIG_HOME/gpulaunch/config.toml``."""
    explicit = environ.get("GPULAUNCH_CONFIG")
    if explicit is not None:
        return os.path.expanduser(explicit) if explicit else None
    base = environ.get("XDG_CONFIG_HOME") or os.path.join(environ.get("HOME") or os.path.expanduser("~"), ".config")
    return os.path.join(base, "gpulaunch", "config.toml")


def _line_of(text: str, key: str) -> int | None:
    pattern = re.compile(rf"""^[ \t]*(?:(["']?){re.escape(key)}\1[ \t]*=|\[[ \t]*{re.escape(key)}[ \t]*\])""", re.MULTILINE)
    m = pattern.search(text)
    return text.count("\n", 0, m.start()) + 1 if m else None


def _syntax_where(path: str, text: str, message: str) -> str:
    """``PATH:LINE: key 'k'`` for a TOML syntax error (tomllib puts "at line N" in its message)."""
    m = re.search(r"line (\d+)", message)
    if not m:
        return path
    lineno = int(m.group(1))
    lines = text.splitlines()
    key = re.match(r"""^[ \t]*["']?([A-Za-z0-9_-]+)["']?[ \t]*=""", lines[lineno - 1]) if lineno <= len(lines) else None
    return f"{path}:{lineno}" + (f": key {key.group(1)!r}" if key else "")


def _convert(opt: Option, raw: Any, label: str, from_env: bool) -> tuple[Any, str | bool | int]:
    """(converted value, text as written) for ``raw``; UsageError naming ``label`` on bad input."""
    key = key_of(opt)
    if not opt.takes_value:
        if isinstance(raw, str) and from_env:
            word = raw.strip().lower()
            if opt.counted and word.isascii() and word.isdigit() and len(word) <= 3:  # not '²', not 5000 digits
                return int(word), int(word)
            if word in _TRUE or word in _FALSE:
                return word in _TRUE, word in _TRUE
        elif isinstance(raw, bool):
            return raw, raw
        elif opt.counted and isinstance(raw, int) and 0 <= raw <= 999:
            return raw, raw
        wanted = "true/false" + (" or a count" if opt.counted else "")
        example = "1" if from_env else "true"
        shown = repr(raw) if len(repr(raw)) <= 60 else repr(raw)[:57] + "…"
        raise UsageError(f"{label}: expected {wanted}, got {shown}", hint=f"e.g. {key} = {example}"
                         if not from_env else f"e.g. {label}={example}")
    if isinstance(raw, bool) or not isinstance(raw, (str, int, float)) or (opt.metavar in _PATHS and not isinstance(raw, str)):
        kind = {dict: "a table", list: "an array", int: "an integer", float: "a number"}.get(type(raw), type(raw).__name__)
        raise UsageError(f"{label}: expected a string like {opt.metavar}, got {kind}",
                         hint=f'e.g. {key} = "..." (see `gpulaunch --help` for {opt.names[0]})')
    text = str(raw)
    if opt.repeat:  # --sbatch-arg: one default holds several, split like a shell (as docs/configuration.md says)
        return _words(text, label), text
    try:
        return (opt.convert(text, label) if opt.convert else text), text
    except UsageError as exc:
        # The converter's hint spells a flag ("e.g. max-util 20"); here it is a variable or a key.
        if exc.hint and exc.hint.startswith(f"e.g. {label} ") and " or " not in exc.hint:
            value = exc.hint[len(f"e.g. {label} "):]
            exc.hint = f"e.g. {label}={value}" if from_env else \
                f"e.g. {key} = {value if value.isdigit() else repr(value).replace(chr(39), chr(34))}"
        raise


def _words(text: str, label: str) -> tuple[str, ...]:
    """The arguments in one default of a repeatable option (``GPULAUNCH_SBATCH_ARG='--qos=high --account=lab'``)."""
    from gpu_launch.base.text import split_words

    try:
        return tuple(split_words(text))
    except ValueError as exc:
        shown = repr(text) if len(text) <= 60 else repr(text[:57]) + "…"
        raise UsageError(f"{label}: cannot split {shown} into arguments ({exc})",
                         hint="check the quotes; it is split like a shell splits a command line") from None


def read_file(path: str, explicit: bool = False) -> dict[str, Setting]:
    """The settings in the TOML file at ``path``; {} if it does not exist (unless ``explicit``)."""
    if not explicit and not os.path.lexists(path):
        return {}  # the usual case on a launch: no file, and no reader to import for it
    from gpu_launch.hardware.files import read_utf8

    try:
        text = read_utf8(path, "config", ConfigError, _MAX_BYTES, what="TOML file")
    except FileNotFoundError:
        if explicit:
            raise ConfigError(f"config {path}: no such file", hint="fix or unset GPULAUNCH_CONFIG") from None
        return {}
    try:
        import tomllib  # type: ignore[import-not-found,unused-ignore]
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib  # type: ignore[no-redef,import-not-found,unused-ignore]
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config {_syntax_where(path, text, str(exc))}: not valid TOML ({exc})",
                          hint='write it like: min-free = "20GiB" (`gpulaunch help config` shows the format)') from None
    except (ValueError, RecursionError) as exc:  # an integer of over 4300 digits; arrays nested thousands deep
        what = "nested too deeply" if isinstance(exc, RecursionError) else "a number is too long"
        raise ConfigError(f"config {path}: not valid TOML ({what})",
                          hint='write it like: min-free = "20GiB" (`gpulaunch help config` shows the format)') from None
    by_key = {key_of(o): o for o in OPTIONS}
    out: dict[str, Setting] = {}
    for key, value in data.items():
        line = _line_of(text, key)
        where = f"{path}:{line}" if line else path
        opt = by_key.get(key.replace("_", "-"))
        if opt is None:
            import difflib  # only for this error: ~1 ms of start-up otherwise

            close = difflib.get_close_matches(key, list(by_key), n=1, cutoff=0.6)
            raise ConfigError(f"config {where}: unknown key {key!r}",
                              hint=f"did you mean {close[0]!r}?" if close else "keys are long option names: min-free, idle, ...")
        if opt.dest in NOT_CONFIGURABLE:
            raise ConfigError(f"config {where}: {key!r} cannot have a default",
                              hint=f"it chooses what one command does: give {opt.names[0]} on the command line")
        try:
            converted, shown = _convert(opt, value, key, from_env=False)
        except GpuLaunchError as exc:
            raise ConfigError(f"config {where}: {exc.message}", hint=exc.hint) from None
        out[opt.dest] = Setting(opt.names[0], opt.dest, converted, shown, "file", where)
    return out


def read_env(environ: Mapping[str, str]) -> dict[str, Setting]:
    """The settings in ``GPULAUNCH_*`` variables; an empty variable counts as unset."""
    out: dict[str, Setting] = {}
    for opt in configurable():
        name = env_name(opt)
        raw = environ.get(name)
        if not raw:
            continue
        converted, shown = _convert(opt, raw, name, from_env=True)
        out[opt.dest] = Setting(opt.names[0], opt.dest, converted, shown, "env", name)
    return out


def layered(environ: Mapping[str, str]) -> dict[str, Setting]:
    """File settings overridden by environment settings (flags come on top in :func:`apply`)."""
    path = config_path(environ)
    merged = read_file(path, explicit=bool(environ.get("GPULAUNCH_CONFIG"))) if path else {}
    merged.update(read_env(environ))
    return merged


def apply(inv: Invocation, environ: Mapping[str, str]) -> Invocation:
    """``inv`` with every option the command line left out filled from the environment or file."""
    defaults = layered(environ)
    if not defaults:
        return inv
    options = dict(inv.options)
    by_dest = {o.dest: o for o in OPTIONS}
    for dest, setting in defaults.items():
        opt = by_dest[dest]
        if dest in options or inv.command not in opt.commands or _SKIP_WITH.get(dest) in options:
            continue
        if setting.value is False or setting.value is None or (opt.counted and setting.value == 0):
            continue
        options[dest] = setting.value
    return replace(inv, options=options)


def _display(value: Any) -> str | bool | int:
    from gpu_launch.choose import spec

    if isinstance(value, (bool, int)):
        return value
    if isinstance(value, tuple) and all(isinstance(v, spec.Item) for v in value):
        return spec.format_items(value)
    if isinstance(value, tuple) and all(isinstance(v, str) for v in value):  # --sbatch-arg, given more than once
        import shlex

        return shlex.join(value)
    return str(value)


def effective(inv: Invocation, environ: Mapping[str, str]) -> list[Setting]:
    """Every configurable option, in table order, with its value and source (flag > env > file)."""
    defaults = layered(environ)
    out = []
    for opt in configurable():
        if opt.dest in inv.options:
            value = inv.options[opt.dest]
            shown = "yours" if value == "" and opt.dest == "account_as_free" else _display(value)  # given alone
            out.append(Setting(opt.names[0], opt.dest, value, shown, "flag", opt.names[0]))
        elif opt.dest in defaults:
            out.append(defaults[opt.dest])
        else:
            empty: bool | int | None = None if opt.takes_value else (0 if opt.counted else False)
            out.append(Setting(opt.names[0], opt.dest, empty, empty, "default"))
    return out


def as_json(settings: list[Setting], environ: Mapping[str, str]) -> dict[str, Any]:
    path = config_path(environ)
    return {
        "schema": SCHEMA_VERSION,
        "config_file": path,
        "config_file_exists": bool(path) and os.path.isfile(path),  # type: ignore[arg-type]
        "settings": [
            {"option": s.option, "key": key_of(o), "env": env_name(o), "value": s.text, "source": s.source,
             "where": s.where}
            for s, o in zip(settings, configurable())
        ],
    }


#: the VALUE column's width at most, in ``config``'s table (the built-in values all fit)
VALUE_WIDTH = 26


def as_text(settings: list[Setting], environ: Mapping[str, str], built_in: Mapping[str, str] | None = None) -> str:
    """The `config` table; an option left unset shows ``built_in[dest]`` (what gpulaunch does without it)."""
    doc = as_json(settings, environ)
    state = "" if doc["config_file_exists"] or not doc["config_file"] else " (not found)"
    lines = [f"config file: {doc['config_file'] or '(none: GPULAUNCH_CONFIG is empty)'}{state}"]
    rows = [("OPTION", "VALUE", "SOURCE")]
    for s, setting in zip(doc["settings"], settings):
        value = s["value"]
        shown = "–" if value is None else ("on" if value is True else "off" if value is False else str(value))
        if s["source"] == "default" and (built_in or {}).get(setting.dest):
            shown = (built_in or {})[setting.dest]
        where = f" {s['where']}" if s["source"] in ("file", "env") else ""
        rows.append((s["option"], shown, s["source"] + where))
    widths = [max(len(r[c]) for r in rows) for c in range(3)]
    # A long value (a lock directory or log path of the user's) widens its own row, not the whole table:
    # the rest stays within 80 columns.
    widths[1] = min(widths[1], VALUE_WIDTH)
    lines += ["  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip() for r in rows]
    lines.append("keys in the file: the long option names (min-free = \"20GiB\")")
    lines.append("variables: GPULAUNCH_ + the name in capitals, _ for - (GPULAUNCH_MIN_FREE=20GiB)")
    return "\n".join(lines) + "\n"
