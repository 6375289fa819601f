"""Where a program's own arguments begin in ``python [python's options] -m MODULE ARGS`` or ``python
[options] script.py ARGS``: python's options (``-u``, ``-X dev``, ``-W ignore``, ``-um MODULE``) are
python's, never the program's, so a table reads from the module's (or script's) first word on.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["python_start"]

#: CPython's own options (Modules/main.c, Python/getopt.c; ``python --help``): those that take a value
#: (``-W arg``, ``-X opt``; ``-c``/``-m`` end python's options), and those that take none. Short options
#: combine (``-uBm MODULE``, ``-Wignore``, ``-mMODULE``): getopt takes an option's value from the rest of
#: the word, else from the next word.
_PY_VALUED = "WX"
_PY_SWITCHES = "bBdEhiIOPqsSuvVx?"
_PY_LONG_VALUED = ("--check-hash-based-pycs",)


def python_start(argv: Sequence[str]) -> tuple[str, int]:
    """``python [python's options] -m MODULE ARGS`` -> (MODULE, index of ARGS' first word);
    ``python [options] script.py ARGS`` -> ("", index of the script); ``-c CODE ARGS`` -> ("", index of
    ARGS); python's own options are never the program's (``python -X dev -m M`` is no ``-m`` of M's)."""
    i = 1
    while i < len(argv):
        arg = argv[i]
        if not arg.startswith("-") or arg == "-":
            return "", i  # the script (`python train.py -m x`: the script's own -m), or stdin
        if arg == "--":
            return "", i + 1
        if arg.startswith("--"):
            i += 2 if arg in _PY_LONG_VALUED else 1
            continue
        for j, letter in enumerate(arg[1:], start=1):
            if letter in "mc" + _PY_VALUED:
                inline = arg[j + 1:]
                value = inline or (argv[i + 1] if i + 1 < len(argv) else "")
                i += 1 if inline else 2
                if letter in "mc":
                    return (value if letter == "m" else ""), i
                break
            if letter not in _PY_SWITCHES:
                return "", len(argv)  # python refuses it ("Unknown option"): nothing runs
        else:
            i += 1
    return "", i
