"""Shell completion: scripts for bash, zsh and fish generated from the option table, and their helper.

``gpulaunch completions SHELL`` prints a script; the copies in ``completions/`` are its output
(regenerate with ``python -m gpu_launch completions bash > completions/gpulaunch.bash``, likewise
``zsh > completions/_gpulaunch`` and ``fish > completions/gpulaunch.fish``; a test fails on drift).
Every script follows the parser's rules (:mod:`gpu_launch.options.args`): options and subcommands complete
until the command starts (after ``--``, or at the first word that is not an option or subcommand),
and from there the shell's own completion for that command takes over. ``--gpus``/``--exclude``
values come from the hidden ``gpulaunch __complete gpus [--taken=LIST] WORDS...``, which reads the
snapshot named on the line (or ``GPULAUNCH_SNAPSHOT``, or NVML) and prints the GPU indices and ``all``
(after ``3,``: the indices not yet in the list, without ``all``); it prints nothing at all on any
failure and gives up after :data:`HELPER_TIMEOUT_S`. ``--wait``'s value is optional, as in the parser:
the next word is its TIMEOUT only when it looks like a duration (:data:`DURATION_ERE`), otherwise it is
the command (``gpulaunch --wait cat si<TAB>`` completes ``cat``'s arguments). ``each`` completes files.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Mapping, Sequence
from typing import IO

from gpu_launch.options.args import OPTIONS, SUBCOMMANDS, Option, options_for
from gpu_launch.errors import UsageError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from gpu_launch.hardware.model import Machine

__all__ = ["SHELLS", "HELPER_TIMEOUT_S", "DURATION_ERE", "script", "command", "helper", "gpu_words"]

SHELLS = ("bash", "zsh", "fish")
HELPER_TIMEOUT_S = 2.0
_SELECTING_DESTS = ("gpus", "auto", "fit")  # after one of these, a subcommand name is a program
_GPU_DESTS = ("gpus", "exclude")
#: Words a subcommand takes after it.
_POSITIONALS: dict[str, tuple[str, ...]] = {"completions": SHELLS, "help": tuple(SUBCOMMANDS), "locks": ("init",)}
_FILE_POSITIONAL = ("each",)  # the job file
#: What units.parse_duration accepts (90, 90s, 30m, 2h, 1h30m, 1d), as a POSIX ERE for the shells;
#: an optional value (--wait's TIMEOUT) is taken from the next word only when it matches.
DURATION_ERE = r"^([0-9]+([.][0-9]+)?[smhdSMHD]?)+$"


def _names(opts: Sequence[Option]) -> list[str]:
    return [name for opt in opts for name in opt.names]


def _word_kinds() -> tuple[list[str], list[str], list[str]]:
    """Option names that, in the scan for the command, take the next word: always, when selecting
    (after which a subcommand name is a program), and only when it is a duration (``--wait``)."""
    value_opts = [o for o in OPTIONS if o.takes_value]
    selecting = _names([o for o in value_opts if o.dest in _SELECTING_DESTS])
    optional = _names([o for o in value_opts if o.optional])
    other_values = _names([o for o in value_opts if o.dest not in _SELECTING_DESTS and not o.optional])
    return selecting, other_values, optional


def _choices() -> dict[str, tuple[str, ...]]:
    """Options whose value is one of a few words (the modules that check them own the lists)."""
    from gpu_launch.share.acquire import FALLBACKS
    from gpu_launch.run.affinity import MODES
    from gpu_launch.views.shellenv import SHELLS as ENV_SHELLS

    return {"bind": MODES, "shell": ENV_SHELLS, "fallback": FALLBACKS}


def _value_kind(opt: Option) -> str:
    """How to complete the option's value: gpus, snapshot, choices, file, dir or none."""
    if opt.dest in _GPU_DESTS:
        return "gpus"
    if opt.dest == "snapshot":
        return "snapshot"
    if opt.dest in _choices():
        return "choices"
    return {"FILE": "file", "DIR": "dir", "PATH": "file"}.get(opt.metavar, "none")


def _examples() -> list[str]:
    from gpu_launch.hardware.snapshot import example_names

    return example_names()


def _for_command(cmd: str) -> list[Option]:
    return list(options_for(cmd))


# --------------------------------------------------------------------------------------------- bash

def _bash() -> str:
    value_opts = [o for o in OPTIONS if o.takes_value]
    selecting, other_values, optional = _word_kinds()
    subs = " ".join(SUBCOMMANDS)
    eq_selecting = "|".join(f"{n}=*" for n in selecting)
    value_cases = []
    for kind, body in (
        ("gpus", '_gpulaunch_gpus "$eq"'),
        ("snapshot", 'compopt -o filenames 2>/dev/null\n'
                     f'            COMPREPLY=( $(compgen -P "$eq" -W "{" ".join(_examples())}" -- "$cur") '
                     '$(compgen -P "$eq" -f -- "$cur") )'),
        ("file", 'compopt -o filenames 2>/dev/null\n            COMPREPLY=( $(compgen -P "$eq" -f -- "$cur") )'),
        ("dir", 'compopt -o filenames 2>/dev/null\n            COMPREPLY=( $(compgen -P "$eq" -d -- "$cur") )'),
        ("none", ":  # a free value (a count, a size): nothing to offer"),
    ):
        names = _names([o for o in value_opts if _value_kind(o) == kind and not o.optional])
        if names:
            value_cases.append(f"        {'|'.join(names)})\n            {body}\n            return ;;")
    value_cases.append(f"        {'|'.join(optional)})\n"
                       "            (( valued )) && return  # --wait=TIMEOUT; after `--wait ` comes the command\n"
                       "            ;;")
    for opt in (o for o in value_opts if _value_kind(o) == "choices"):
        words = " ".join(_choices()[opt.dest])
        value_cases.append(f"        {'|'.join(opt.names)})\n"
                           f"            COMPREPLY=( $(compgen -P \"$eq\" -W \"{words}\" -- \"$cur\") )\n            return ;;")
    sub_opts = []
    for cmd in SUBCOMMANDS:
        sub_opts.append(f"        {cmd}) opts=\"{' '.join(_names(_for_command(cmd)))}\" ;;")
    positional_cases = [f"        {cmd}) COMPREPLY=( $(compgen -W \"{' '.join(words)}\" -- \"$cur\") ) ;;"
                        for cmd, words in _POSITIONALS.items()]
    positional_cases += [f"        {cmd})\n            compopt -o filenames 2>/dev/null\n"
                         "            COMPREPLY=( $(compgen -f -- \"$cur\") ) ;;" for cmd in _FILE_POSITIONAL]
    return f"""\
# bash completion for gpulaunch                                  -*- shell-script -*-
# Generated by `gpulaunch completions bash` from gpulaunch's option table; do not edit.
# Install: gpulaunch completions bash > ~/.local/share/bash-completion/completions/gpulaunch
# (or `source` it from ~/.bashrc). After `--` or the command word, bash-completion's
# _command_offset completes the command itself.

_gpulaunch_gpus() {{
    # GPU indices and `all` from `gpulaunch __complete gpus`, which reads the --snapshot on this
    # line, $GPULAUNCH_SNAPSHOT or NVML; it prints nothing on failure and gives up after 2 s.
    # After `3,` it is told the list so far (--taken=3) and leaves those GPUs and `all` out.
    local pre=$1 last=$cur taken= vals
    if [[ $cur == *,* ]]; then
        pre+=${{cur%,*}},
        last=${{cur##*,}}
        taken=--taken=${{cur%,*}}
    fi
    vals=$(command gpulaunch __complete gpus ${{taken:+"$taken"}} "${{COMP_WORDS[@]:1:COMP_CWORD-1}}" 2>/dev/null)
    COMPREPLY=( $(compgen -P "$pre" -W "$vals" -- "$last") )
}}

_gpulaunch() {{
    local cur=${{COMP_WORDS[COMP_CWORD]}} prev= sub= eq= w opts
    local -i i=1 start=0 selecting=0 valued=0
    COMPREPLY=()
    # Find the subcommand, or where the command to run starts (the parser's rules, args.py).
    while (( i < COMP_CWORD )); do
        w=${{COMP_WORDS[i]}}
        case $w in
        --)
            start=$((i + 1))
            break ;;
        {'|'.join(selecting)})
            selecting=1
            [[ ${{COMP_WORDS[i+1]}} == = ]] && i+=1
            i+=2
            continue ;;
        {'|'.join(other_values)})
            [[ ${{COMP_WORDS[i+1]}} == = ]] && i+=1
            i+=2
            continue ;;
        {'|'.join(optional)})
            # Its value is optional: the next word is the timeout only if it is a duration.
            if [[ ${{COMP_WORDS[i+1]}} == = ]]; then
                i+=3
                continue
            elif (( i + 1 < COMP_CWORD )) && [[ ${{COMP_WORDS[i+1]}} =~ {DURATION_ERE} ]]; then
                i+=2
                continue
            fi ;;
        {eq_selecting})
            selecting=1 ;;
        -*) ;;
        *)
            if [[ -z $sub && $selecting == 0 && " {subs} " == *" $w "* ]]; then
                sub=$w
            elif [[ -z $sub ]]; then
                start=$i
                break
            fi ;;
        esac
        i+=1
    done
    if (( start == 0 && selecting == 1 && COMP_CWORD == i )) && [[ $cur != -* ]]; then
        start=$COMP_CWORD  # after --gpus/--auto/--fit the first plain word is the command
    fi
    if (( start > 0 )); then
        if declare -F _command_offset >/dev/null; then
            _command_offset $start
        elif (( start == COMP_CWORD )); then
            COMPREPLY=( $(compgen -c -- "$cur") )
        else
            COMPREPLY=( $(compgen -f -- "$cur") )
        fi
        return
    fi
    prev=${{COMP_WORDS[COMP_CWORD-1]}}
    if [[ $cur == = ]]; then
        cur=
        valued=1
    elif [[ $prev == = ]]; then
        prev=${{COMP_WORDS[COMP_CWORD-2]}}
        valued=1
    elif [[ $cur == -*=* ]]; then  # COMP_WORDBREAKS without '='
        prev=${{cur%%=*}}
        eq=$prev=
        cur=${{cur#*=}}
        valued=1
    fi
    case $prev in
{chr(10).join(value_cases)}
    esac
    if [[ $cur == -* ]]; then
        case $sub in
{chr(10).join(sub_opts)}
        *) opts="{' '.join(_names(OPTIONS))}" ;;
        esac
        COMPREPLY=( $(compgen -W "$opts" -- "$cur") )
        return
    fi
    case $sub in
{chr(10).join(positional_cases)}
        '')
            COMPREPLY=( $(compgen -W "{subs}" -- "$cur") )
            [[ -n $cur ]] && COMPREPLY+=( $(compgen -c -- "$cur") ) ;;
    esac
}}

complete -F _gpulaunch gpulaunch
"""


# ---------------------------------------------------------------------------------------------- zsh

def _zq(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


def _bash_like_scan(indent: str, index: str, first: str) -> str:
    """The scan loop shared in spirit with bash, in zsh syntax (words is 1-based)."""
    selecting, other_values, optional = _word_kinds()
    eq_selecting = "|".join(f"{n}=*" for n in selecting)
    return f"""\
{indent}local -i {index}={first}
{indent}while (( {index} < CURRENT )); do
{indent}    w=${{words[{index}]}}
{indent}    case $w in
{indent}    (--) start=$(( {index} + 1 )); break ;;
{indent}    ({'|'.join(selecting)}) selecting=1; (( {index} += 2 )); continue ;;
{indent}    ({'|'.join(other_values)}) (( {index} += 2 )); continue ;;
{indent}    ({'|'.join(optional)})  # the next word is the timeout only if it is a duration
{indent}        if (( {index} + 1 < CURRENT )) && [[ ${{words[{index}+1]}} =~ {_zq(DURATION_ERE)} ]]; then
{indent}            (( {index} += 2 )); continue
{indent}        fi ;;
{indent}    ({eq_selecting}) selecting=1 ;;
{indent}    (-*) ;;
{indent}    (*)
{indent}        if [[ -z $sub && $selecting == 0 && -n ${{_gpulaunch_subs[(r)$w]}} ]]; then
{indent}            sub=$w
{indent}        elif [[ -z $sub ]]; then
{indent}            start=${index}; break
{indent}        fi ;;
{indent}    esac
{indent}    (( {index}++ ))
{indent}done
"""


def _zsh() -> str:
    value_opts = [o for o in OPTIONS if o.takes_value]
    optional = _names([o for o in value_opts if o.optional])
    subs = " ".join(SUBCOMMANDS)
    value_cases = []
    for kind, body in (
        ("gpus", "_gpulaunch_gpus"),
        ("snapshot", f"compadd -- {' '.join(_examples())}; _files"),
        ("file", "_files"),
        ("dir", "_files -/"),
        ("none", "return 1"),  # a free value (a count, a size): nothing to offer
    ):
        names = _names([o for o in value_opts if _value_kind(o) == kind and not o.optional])
        if names:
            value_cases.append(f"    ({'|'.join(names)}) {body}; return ;;")
    # --wait=TIMEOUT: nothing to offer; after `--wait ` comes the command, as after no option
    value_cases.append(f"    ({'|'.join(optional)}) [[ $cur == -*=* ]] && return 1 ;;")
    for opt in (o for o in value_opts if _value_kind(o) == "choices"):
        value_cases.append(f"    ({'|'.join(opt.names)}) compset -P '*='; compadd -- {' '.join(_choices()[opt.dest])}; return ;;")
    option_lines = []
    for opt in OPTIONS:
        commands = " ".join(sorted(c for c in opt.commands if opt in options_for(c)))
        for name in opt.names:
            option_lines.append(f"    {_zq(name)} {_zq(commands)} {_zq(opt.help[:70])}")
    sub_lines = [f"    {_zq(name)} {_zq(text[:70])}" for name, text in SUBCOMMANDS.items()]
    positional_cases = [f"    ({cmd}) compadd -- {' '.join(words)} ;;" for cmd, words in _POSITIONALS.items()]
    positional_cases += [f"    ({cmd}) _files ;;" for cmd in _FILE_POSITIONAL]
    return f"""\
#compdef gpulaunch
# zsh completion for gpulaunch. Generated by `gpulaunch completions zsh` from gpulaunch's option
# table; do not edit. Install: put it on $fpath as _gpulaunch, e.g.
#   gpulaunch completions zsh > ~/.zfunc/_gpulaunch   # with fpath=(~/.zfunc $fpath) before compinit
# After `--` or the command word, zsh's own completion (_normal) completes the command itself.

_gpulaunch_subs=({subs})
# option, the commands it applies to, its help
_gpulaunch_options=(
{chr(10).join(option_lines)}
)
_gpulaunch_subhelp=(
{chr(10).join(sub_lines)}
)

_gpulaunch_gpus() {{
    # GPU indices and `all` from `gpulaunch __complete gpus` (the --snapshot on this line,
    # $GPULAUNCH_SNAPSHOT or NVML); it prints nothing on failure and gives up after 2 s.
    # After `3,` it is told the list so far (--taken=3) and leaves those GPUs and `all` out.
    local -a vals
    local value=${{words[CURRENT]#-*=}} taken=
    [[ $value == *,* ]] && taken=--taken=${{value%,*}}
    vals=(${{(f)"$(command gpulaunch __complete gpus $taken ${{words[2,CURRENT-1]}} 2>/dev/null)"}})
    compset -P '*='
    compset -P '*,'
    compadd -- $vals
}}

_gpulaunch() {{
    local cur=${{words[CURRENT]}} prev=${{words[CURRENT-1]}} sub= w
    local -i start=0 selecting=0
{_bash_like_scan("    ", "i", "2")}    if (( start == 0 && selecting == 1 && CURRENT == i )) && [[ $cur != -* ]]; then
        start=$CURRENT  # after --gpus/--auto/--fit the first plain word is the command
    fi
    if (( start > 0 )); then
        words=("${{(@)words[start,-1]}}")
        (( CURRENT -= start - 1 ))
        _normal
        return
    fi
    if [[ $cur == -*=* ]]; then
        prev=${{cur%%=*}}
    fi
    case $prev in
{chr(10).join(value_cases)}
    esac
    local -a opts descs
    local -i k
    if [[ $cur == -* ]]; then
        for (( k = 1; k <= ${{#_gpulaunch_options}}; k += 3 )); do
            if [[ -z $sub || " ${{_gpulaunch_options[k+1]}} " == *" $sub "* ]]; then
                opts+=(${{_gpulaunch_options[k]}})
                descs+=("${{(r:22:)_gpulaunch_options[k]}} ${{_gpulaunch_options[k+2]}}")
            fi
        done
        compadd -l -d descs -- $opts
        return
    fi
    case $sub in
{chr(10).join(positional_cases)}
    ('')
        for (( k = 1; k <= ${{#_gpulaunch_subhelp}}; k += 2 )); do
            opts+=(${{_gpulaunch_subhelp[k]}})
            descs+=("${{(r:12:)_gpulaunch_subhelp[k]}} ${{_gpulaunch_subhelp[k+1]}}")
        done
        compadd -l -d descs -- $opts
        [[ -n $cur ]] && _command_names -e ;;
    esac
}}

# Autoloaded from $fpath: complete now; sourced (after compinit): register.
if [[ $zsh_eval_context[-1] == loadautofunc ]]; then
    _gpulaunch "$@"
elif (( $+functions[compdef] )); then
    compdef _gpulaunch gpulaunch
fi
"""


# --------------------------------------------------------------------------------------------- fish

def _fq(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _fish() -> str:
    selecting, other_values, optional = _word_kinds()
    eq_selecting = " ".join(f"'{n}=*'" for n in selecting if n.startswith("--"))
    subs = " ".join(SUBCOMMANDS)
    lines = []
    for opt in OPTIONS:
        flags = " ".join(f"-l {n[2:]}" if n.startswith("--") else f"-s {n[1:]}" for n in opt.names)
        kind = "optional" if opt.optional else _value_kind(opt) if opt.takes_value else ""
        value = {
            "gpus": "-x -a '(__gpulaunch_gpus)'",
            "snapshot": f"-r -F -a {_fq(' '.join(_examples()))}",
            "file": "-r -F",
            "dir": "-x -a '(__fish_complete_directories)'",
            "choices": f"-x -a {_fq(' '.join(_choices().get(opt.dest, ())))}",
            "none": "-x",
            "optional": "-f",  # no -r: after `--wait ` comes the command unless the word is a duration
            "": "",
        }[kind]
        commands = " ".join(sorted(c for c in opt.commands if opt in options_for(c)))
        cond = f"'__gpulaunch_option_ok {commands}'"
        lines.append(f"complete -c gpulaunch -n {cond} {flags} {value} -d {_fq(opt.help)}".replace("  ", " "))
    for name, text in SUBCOMMANDS.items():
        lines.append(f"complete -c gpulaunch -n __gpulaunch_at_first -a {name} -d {_fq(text)}")
    for cmd, words in _POSITIONALS.items():
        lines.append(f"complete -c gpulaunch -n '__gpulaunch_sub_is {cmd}' -a {_fq(' '.join(words))}")
    for cmd in _FILE_POSITIONAL:
        lines.append(f"complete -c gpulaunch -n '__gpulaunch_sub_is {cmd}' -F")
    return f"""\
# fish completion for gpulaunch. Generated by `gpulaunch completions fish` from gpulaunch's option
# table; do not edit. Install:
#   gpulaunch completions fish > ~/.config/fish/completions/gpulaunch.fish
# After `--` or the command word, fish's own completion for that command takes over.

function __gpulaunch_scan --description 'print the subcommand (or -) and where the command starts (or 0)'
    set -l tokens (commandline -opc)
    set -l sub -
    set -l selecting 0
    set -l i 2
    while test $i -le (count $tokens)
        set -l w $tokens[$i]
        switch $w
            case --
                echo $sub; math $i + 1; return
            case {' '.join(selecting)}
                set selecting 1; set i (math $i + 2); continue
            case {' '.join(other_values)}
                set i (math $i + 2); continue
            case {' '.join(optional)}
                # the next word is the timeout only if it is a duration
                if test $i -lt (count $tokens); and string match -qr -- {_fq(DURATION_ERE)} $tokens[(math $i + 1)]
                    set i (math $i + 2); continue
                end
            case {eq_selecting}
                set selecting 1
            case '-*'
            case '*'
                if test $sub = - -a $selecting = 0; and contains -- $w {subs}
                    set sub $w
                else if test $sub = -
                    echo $sub; echo $i; return
                end
        end
        set i (math $i + 1)
    end
    if test $selecting = 1 -a $sub = - -a $i -eq (math (count $tokens) + 1); and not string match -q -- '-*' (commandline -ct)
        echo $sub; math (count $tokens) + 1; return  # after --gpus/--auto/--fit: the command word
    end
    echo $sub; echo 0
end

function __gpulaunch_in_command
    set -l s (__gpulaunch_scan)
    test $s[2] -gt 0
end

function __gpulaunch_option_ok --description 'true before the command, when the option fits the subcommand'
    set -l s (__gpulaunch_scan)
    test $s[2] -eq 0; or return 1
    test $s[1] = -; or contains -- $s[1] $argv
end

function __gpulaunch_at_first
    set -l s (__gpulaunch_scan)
    test $s[1] = - -a $s[2] -eq 0
end

function __gpulaunch_sub_is
    set -l s (__gpulaunch_scan)
    test $s[2] -eq 0 -a $s[1] = $argv[1]
end

function __gpulaunch_gpus --description 'GPU indices and all, from `gpulaunch __complete gpus`'
    set -l tokens (commandline -opc)
    set -l cur (string replace -r -- '^-[^=]*=' '' (commandline -ct))
    set -l pre ''
    set -l taken
    if string match -q -- '*,*' $cur
        set pre (string replace -r -- ',[^,]*$' ',' $cur)
        set taken --taken=(string replace -r -- ',[^,]*$' '' $cur)  # leaves those GPUs and `all` out
    end
    set -l vals (command gpulaunch __complete gpus $taken $tokens[2..-1] 2>/dev/null)
    for v in $vals
        echo $pre$v
    end
end

function __gpulaunch_complete_command --description 'complete the command after gpulaunch'
    set -l s (__gpulaunch_scan)
    set -l tokens (commandline -opc)
    set -l words $tokens[$s[2]..-1] (commandline -ct)
    complete --do-complete=(string join -- ' ' (string escape -- $words[1..-2]) $words[-1])
end

function __gpulaunch_first_command --description 'programs, once a name is started'
    set -l cur (commandline -ct)
    test -n "$cur"; and complete --do-complete="$cur"
end

complete -c gpulaunch -n 'not __gpulaunch_in_command' -f
complete -c gpulaunch -n __gpulaunch_in_command -f -a '(__gpulaunch_complete_command)'
complete -c gpulaunch -n __gpulaunch_at_first -a '(__gpulaunch_first_command)'
{chr(10).join(lines)}
"""


_GENERATORS = {"bash": _bash, "zsh": _zsh, "fish": _fish}


def script(shell: str) -> str:
    """The completion script for ``shell`` (bash, zsh or fish)."""
    if shell not in _GENERATORS:
        raise UsageError(f"completions: unknown shell {shell!r}", hint="choose bash, zsh or fish")
    return _GENERATORS[shell]()


def command(positionals: Sequence[str], out: IO[str]) -> int:
    """``gpulaunch completions SHELL``."""
    if len(positionals) != 1:
        raise UsageError("completions: name one shell", hint="gpulaunch completions bash (or zsh, fish)")
    out.write(script(positionals[0]))
    return 0


# ------------------------------------------------------------------------------------------- helper

def _snapshot_on_line(words: Sequence[str], environ: Mapping[str, str]) -> str | None:
    """The last ``--snapshot`` before ``--`` on the line being completed, else the environment's."""
    found = None
    for i, word in enumerate(words):
        if word == "--":
            break
        if word == "--snapshot" and i + 1 < len(words):
            found = words[i + 1] if words[i + 1] != "=" or i + 2 >= len(words) else words[i + 2]
        elif word.startswith("--snapshot="):
            found = word.split("=", 1)[1]
    if found:
        return os.path.expanduser(found)
    return environ.get("GPULAUNCH_SNAPSHOT") or None


def gpu_words(words: Sequence[str], environ: Mapping[str, str], taken: str | None = None) -> list[str]:
    """What ``--gpus`` can be on this machine: each GPU index, then ``all``.

    ``taken`` is the list typed so far (``3,1-2`` while completing ``3,1-2,``): its GPUs are left
    out, and so is ``all``, which cannot follow a comma.
    """
    from gpu_launch.hardware.read import Needs, read_machine

    snap = _snapshot_on_line(words, environ)
    if snap is None:
        from gpu_launch.options import config

        setting = config.layered(environ).get("snapshot")
        snap = setting.value if setting else None
    machine = read_machine(snap, Needs(processes=False, topology=False, mig=False))
    indices = sorted(g.index for g in machine.gpus)
    if taken is None:
        return [*map(str, indices), "all"]
    used = _taken_indices(taken, machine)
    return [str(i) for i in indices if i not in used]


def _taken_indices(text: str, machine: Machine) -> set[int]:
    """The GPU indices named in a partial ``--gpus`` list; items that do not parse or match are skipped."""
    from gpu_launch.choose import spec

    used: set[int] = set()
    for word in text.split(","):
        try:
            used.update(d.gpu.index for d in spec.resolve(spec.parse(word), machine) if d.mig is None)
        except UsageError:
            continue
    return used


def helper(argv: Sequence[str], environ: Mapping[str, str]) -> int:
    """``gpulaunch __complete gpus [--taken=LIST] WORDS...``: candidates one a line; silent and 0 on any failure.

    The work runs in a daemon thread so that a hung NVML call cannot hang the user's shell: after
    :data:`HELPER_TIMEOUT_S` we print nothing and leave without waiting for it.
    """
    if not argv or argv[0] != "gpus":
        return 0
    words = list(argv[1:])
    taken = words.pop(0).partition("=")[2] if words and words[0].startswith("--taken=") else None
    result: list[str] = []

    def work() -> None:
        try:
            result.extend(gpu_words(words, environ, taken))
        except BaseException:  # noqa: BLE001 - a completion helper must never print a traceback
            result.clear()

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    thread.join(HELPER_TIMEOUT_S)
    if thread.is_alive():
        os._exit(0)  # a stuck C call in the thread would block interpreter shutdown
    if result:
        print("\n".join(result))
    return 0


def run(inv) -> int:  # inv: Invocation
    """``gpulaunch completions SHELL``: print the completion script."""
    return command(inv.positionals, sys.stdout)
