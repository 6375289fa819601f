"""Text from other people, made safe for a terminal.

GPU names and process lines in a snapshot, other users' command lines (NVML, psutil) and the holder
line in someone else's lock file are foreign text: an escape sequence in them must never reach the
terminal raw (it could rewrite the screen, fake a line, or set the window title). Every such string
goes through :func:`printable` where it enters gpulaunch, so every view (``ls`` plain and rich,
``--explain``, the mapping table, warnings and errors) shows it escaped, ``repr``-style (``\\x1b``).

Command lines that users write (a job file's lines, ``GPULAUNCH_SBATCH_ARG``) are split into words
by :func:`split_words`, the rules of ``shlex.split`` in linear time. :func:`clip` keeps a message to a
length a person can read (an error that quotes a crafted file's 60,000-element array is one line of
a few hundred characters, not of 400 KB).
"""

from __future__ import annotations

import re

__all__ = ["printable", "split_words", "clip", "MAX_MESSAGE", "MAX_WORD"]

_BLANKS = re.compile(r"[ \t\r\n]+")  # shlex's whitespace: nothing else separates words
_PLAIN = re.compile(r"[^ \t\r\n#'\"\\]+")  # characters that stand for themselves outside quotes
_PLAIN_NO_COMMENT = re.compile(r"[^ \t\r\n'\"\\]+")
_IN_DOUBLE = re.compile(r'[^"\\]+')


def printable(text: str) -> str:
    """``text`` with every non-printable character (C0/C1 controls, DEL, line and paragraph separators,
    format characters) written as a backslash escape; printable text, accents and symbols unchanged."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in text)


#: The longest error message (and hint) gpulaunch prints, and the longest word in one that is too long:
#: past them a word (a quoted value, a path), then the message, loses its middle.
MAX_MESSAGE = 1000
MAX_WORD = 120
_LONG_WORD = re.compile(rf"\S{{{MAX_WORD + 1},}}")


def clip(text: str, limit: int = MAX_MESSAGE) -> str:
    """``text`` if it is at most ``limit`` characters. Else each word longer than MAX_WORD (a 5000-digit
    value, a 6000-character path) keeps its start and end around a note of how much was left out, and
    if that is not enough the text itself does: the start names the thing, the end says what is wrong."""
    if len(text) <= limit:
        return text
    text = _LONG_WORD.sub(lambda m: _cut(m.group(), MAX_WORD, "…[{} characters left out]…"), text)
    return text if len(text) <= limit else _cut(text, limit, " […{} characters left out…] ")


def _cut(text: str, limit: int, note: str) -> str:
    room = limit - len(note.format(len(text)))  # (the count has at most this many digits)
    tail = room // 3
    head = room - tail
    return text[:head] + note.format(len(text) - head - tail) + text[len(text) - tail:]


def split_words(line: str, comments: bool = False) -> list[str]:
    """``shlex.split(line, comments)``, word for word and error for error, in linear time.

    shlex adds a word's characters one at a time to an attribute (``self.token += c``), which
    copies the word each time: a 0.8 MB word took 8 s, a 10 MB one did not finish. Here each run of
    ordinary characters is taken whole. The rules (POSIX mode): words are separated by space, tab,
    CR and LF; ``'...'`` keeps everything literally; inside ``"..."`` a backslash escapes only ``"``
    and ``\\``; outside quotes it escapes any character; with ``comments``, ``#`` where a word could
    end (also right after a word: ``a#b`` is ``a``) skips to the end of the line. ValueError("No
    closing quotation" / "No escaped character") as shlex raises it.
    """
    plain = _PLAIN if comments else _PLAIN_NO_COMMENT
    words: list[str] = []
    end = len(line)
    pos = 0
    while True:
        blank = _BLANKS.match(line, pos)
        if blank:
            pos = blank.end()
        if pos >= end:
            return words
        if comments and line[pos] == "#":
            pos = _after_comment(line, pos)
            continue
        parts: list[str] = []
        while pos < end:
            ch = line[pos]
            if ch in " \t\r\n":
                break
            if comments and ch == "#":  # ends the word, and the line
                break
            if ch == "'":
                close = line.find("'", pos + 1)
                if close < 0:
                    raise ValueError("No closing quotation")
                parts.append(line[pos + 1:close])
                pos = close + 1
            elif ch == '"':
                pos = _double_quoted(line, pos + 1, parts)
            elif ch == "\\":
                if pos + 1 >= end:
                    raise ValueError("No escaped character")
                parts.append(line[pos + 1])
                pos += 2
            else:
                run = plain.match(line, pos)
                assert run is not None  # ch is none of the characters handled above
                parts.append(run.group())
                pos = run.end()
        words.append("".join(parts))


def _after_comment(line: str, pos: int) -> int:
    newline = line.find("\n", pos)
    return len(line) if newline < 0 else newline + 1


def _double_quoted(line: str, pos: int, parts: list[str]) -> int:
    """The inside of ``"..."`` from ``pos`` (just after the opening quote) into ``parts``; the
    position after the closing quote."""
    end = len(line)
    while True:
        run = _IN_DOUBLE.match(line, pos)
        if run:
            parts.append(run.group())
            pos = run.end()
        if pos >= end:
            raise ValueError("No closing quotation")
        if line[pos] == '"':
            return pos + 1
        if pos + 1 >= end:  # a backslash, last
            raise ValueError("No escaped character")
        escaped = line[pos + 1]
        parts.append(escaped if escaped in '"\\' else "\\" + escaped)
        pos += 2
