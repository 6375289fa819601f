"""The words of one line of shell text, where they are in it, and what each says after quote removal.

An ``each`` job line runs through ``/bin/sh -c``. gpulaunch reads placeholders in it word by word,
as the shell will split it, so it has to know where a word starts and ends: blanks and the
operators ``; & | ( ) < >`` separate words (``a>out`` is two words and a redirection); ``'...'``,
``"..."`` and a backslash quote; a ``#`` at the start of a word begins a comment. A word that
holds an expansion (``$HOME``, ``${x}``, ``$(cmd)``, ```cmd```) has no fixed text: its ``value`` is
None. This is a reader for placeholders, not a shell: it never runs, expands or rejects anything a
shell would take, and a construct it does not know only makes a word non-literal.
"""

from __future__ import annotations

import re

from gpu_launch.base.records import dataclass

__all__ = ["Word", "words", "one_command", "SPECIAL"]

#: Characters that end a word outside quotes (blanks and the shell's operator characters).
SPECIAL = frozenset(" \t\n;&|()<>")
_NOT_PLAIN = frozenset(";&|()<>'\"\\$`#\n")  # a line with none of these is words between blanks
# Compiled on first use (re caches them): a sweep of plain lines never pays for them.
_PLAIN = r"[^ \t\n;&|()<>'\"\\$`]+"
_IN_DOUBLE = r'[^"\\$`]+'
_NAME = r"[A-Za-z_][A-Za-z0-9_]*|[0-9@*#?$!-]"


@dataclass(frozen=True)
class Word:
    start: int  # where its raw text starts in the line
    end: int  # and ends (exclusive)
    value: str | None  # the word after quote removal; None when it holds an expansion


def words(line: str) -> list[Word]:
    """Every word of ``line`` in order (operators and comments are not words). ValueError for an
    unclosed quote or a trailing backslash, as the job file's own splitting raises."""
    found: list[Word] = []
    pos, end = 0, len(line)
    if _NOT_PLAIN.isdisjoint(line):  # the usual `python train.py --lr 1e-3`: no quoting, no operator
        for word in line.replace("\t", " ").split(" "):
            if word:
                found.append(Word(pos, pos + len(word), word))
            pos += len(word) + 1
        return found
    plain_run = re.compile(_PLAIN)
    while pos < end:
        ch = line[pos]
        if ch in SPECIAL:
            pos += 1
            continue
        if ch == "#":  # a comment: only where a word could start
            break
        start, parts, literal = pos, [], True
        while pos < end and line[pos] not in SPECIAL:
            ch = line[pos]
            if ch == "'":
                close = line.find("'", pos + 1)
                if close < 0:
                    raise ValueError("No closing quotation")
                parts.append(line[pos + 1:close])
                pos = close + 1
            elif ch == '"':
                pos, plain = _double_quoted(line, pos + 1, parts)
                literal = literal and plain
            elif ch == "\\":
                if pos + 1 >= end:
                    raise ValueError("No escaped character")
                parts.append(line[pos + 1])
                pos += 2
            elif ch in "$`":
                literal = False
                pos = _expansion(line, pos)
            else:
                run = plain_run.match(line, pos)
                assert run is not None
                parts.append(run.group())
                pos = run.end()
        found.append(Word(start, pos, "".join(parts) if literal else None))
    return found


def one_command(line: str, found: list[Word]) -> bool:
    """Whether ``line`` (whose :func:`words` are ``found``) is words alone: no operator, no comment."""
    last = 0
    for w in found:
        if line[last:w.start].strip(" \t"):
            return False
        last = w.end
    return not line[last:].strip(" \t")


def _double_quoted(line: str, pos: int, parts: list[str]) -> tuple[int, bool]:
    """The inside of ``"..."`` from ``pos``: the position after the closing quote, and whether it held
    no expansion. Inside, a backslash quotes only ``$ ` " \\`` (and a newline)."""
    plain = True
    end = len(line)
    in_double = re.compile(_IN_DOUBLE)
    while True:
        run = in_double.match(line, pos)
        if run:
            parts.append(run.group())
            pos = run.end()
        if pos >= end:
            raise ValueError("No closing quotation")
        ch = line[pos]
        if ch == '"':
            return pos + 1, plain
        if ch == "\\":
            if pos + 1 >= end:
                raise ValueError("No closing quotation")
            escaped = line[pos + 1]
            parts.append(escaped if escaped in '$`"\\\n' else "\\" + escaped)
            pos += 2
        else:  # $ or `
            plain = False
            pos = _expansion(line, pos)


def _expansion(line: str, pos: int) -> int:
    """The position just after the expansion that starts at ``pos`` (``$`` or a backquote)."""
    end = len(line)
    if line[pos] == "`":
        close = pos + 1
        while close < end and line[close] != "`":
            close += 2 if line[close] == "\\" else 1
        return min(end, close + 1)
    nxt = line[pos + 1:pos + 2]
    if nxt == "(":
        return _balanced(line, pos + 1, "(", ")")
    if nxt == "{":
        return _balanced(line, pos + 1, "{", "}")
    name = re.compile(_NAME).match(line, pos + 1)
    return name.end() if name else pos + 1  # a lone $ stands for itself


def _balanced(line: str, pos: int, opening: str, closing: str) -> int:
    """The position after the ``closing`` that matches the ``opening`` at ``pos``, quotes inside
    skipped; the end of the line when there is none (the shell then says what is wrong)."""
    depth, end = 0, len(line)
    while pos < end:
        ch = line[pos]
        if ch == "\\":
            pos += 2
            continue
        if ch == "'" and opening == "(":  # in ${...} a single quote may be literal text
            close = line.find("'", pos + 1)
            pos = end if close < 0 else close + 1
            continue
        if ch == '"':
            try:
                pos, _ = _double_quoted(line, pos + 1, [])
            except ValueError:
                return end
            continue
        if ch == opening:
            depth += 1
        elif ch == closing:
            depth -= 1
            if depth == 0:
                return pos + 1
        pos += 1
    return end
