"""Cursor.skip_strings: a tokenizer's string array passed without decoding it, by runs in C or one by one.

A large array (MANY_STRINGS or more) is passed in runs of short strings by a regular expression and
read up to a MiB at a time; what the expression does not take (a long string, a window's end, the
last few) goes one string at a time. Both ways must end at the same byte as a plain walk of the
lengths, refuse the same crafted files, and read nothing past the array but the usual read-ahead.
"""

from __future__ import annotations

import random
import struct
from pathlib import Path

import pytest

from gpu_launch.errors import ModelFileError
from gpu_launch.modelfile import bounded

LEAD = b"GGUF\x03\x00\x00\x00"  # some header before the array, so it starts at an odd place


def _strings(seed: int, n: int, long_every: int) -> list[bytes]:
    """Mostly short strings (0 to 63 bytes, some holding what looks like a length prefix), a long one
    (64 to 5000 bytes) every ``long_every``."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        if long_every and i % long_every == long_every - 1:
            out.append(rng.randbytes(rng.choice((64, 65, 255, 256, 300, 5000))))
        elif i % 97 == 0:
            out.append(struct.pack("<Q", rng.randrange(64)) + b"x" * rng.randrange(20))  # a length inside a string
        else:
            out.append(rng.randbytes(rng.choice((0, 1, 3, 5, 8, 12, 15, 16, 40, 63))))
    return out


def _file(tmp_path: Path, strings: list[bytes], tail: bytes = b"TAIL" * 8) -> tuple[Path, int]:
    body = b"".join(struct.pack("<Q", len(s)) + s for s in strings)
    path = tmp_path / "strings.bin"
    path.write_bytes(LEAD + body + tail)
    return path, len(LEAD) + len(body)


def _skip(path: Path, count: int, *, runs: bool) -> tuple[int, int]:
    """(position after the array, bytes read), the runs in C switched on or off."""
    with bounded.open_cursor(str(path), "model file") as cur:
        cur.take(len(LEAD))
        many = bounded.MANY_STRINGS
        try:
            bounded.MANY_STRINGS = many if runs else count + 1
            cur.skip_strings(count, "array tokenizer.ggml.tokens")
        finally:
            bounded.MANY_STRINGS = many
        return cur.pos, cur.bytes_read


@pytest.mark.parametrize("seed, n, long_every", [(1, 20_000, 0), (2, 70_000, 50), (3, 40_000, 7), (4, 17_000, 1)])
def test_runs_end_where_the_lengths_say(tmp_path: Path, seed: int, n: int, long_every: int) -> None:
    assert n >= bounded.MANY_STRINGS  # the runs are used
    path, end = _file(tmp_path, _strings(seed, n, long_every))
    assert _skip(path, n, runs=True)[0] == end == _skip(path, n, runs=False)[0]
    _, read = _skip(path, n, runs=True)
    assert read <= end + bounded.READ_AHEAD  # nothing past the array but one read-ahead
    # one string fewer stops at the last one's start: the count is obeyed exactly
    assert _skip(path, n - 1, runs=True)[0] == end - 8 - len(_strings(seed, n, long_every)[-1])


@pytest.mark.parametrize("where", [0, 1, 127, 128, 129, 5_000, 19_999])
def test_a_crafted_length_is_refused_either_way(tmp_path: Path, where: int) -> None:
    strings = _strings(5, 20_000, 0)
    body = [struct.pack("<Q", len(s)) + s for s in strings]
    body[where] = struct.pack("<Q", 2**40) + strings[where]  # runs past the end of the file
    path = tmp_path / "crafted.bin"
    path.write_bytes(LEAD + b"".join(body) + b"TAIL")
    for runs in (True, False):
        with pytest.raises(ModelFileError, match="runs past the end of the file"):
            _skip(path, len(strings), runs=runs)


def test_a_truncated_array_is_refused_either_way(tmp_path: Path) -> None:
    strings = _strings(6, 20_000, 300)
    path, end = _file(tmp_path, strings, tail=b"")
    with open(path, "r+b") as fh:
        fh.truncate(end - 100)
    for runs in (True, False):
        with pytest.raises(ModelFileError, match="truncated|runs past the end"):
            _skip(path, len(strings), runs=runs)


@pytest.mark.parametrize("fill", [b"\x00", b"\x07", b"a"])
def test_a_run_is_exactly_its_strings(fill: bytes) -> None:
    # Zero-filled strings look like more length prefixes: a run that took a wrong length would still
    # match, and end somewhere else.
    run, k = bounded._short_run(), bounded.SHORT_RUN
    for length in range(bounded.SHORT_STRING):
        one = struct.pack("<Q", length) + fill * length
        m = run(one * k + b"\xff" * 16, 0)
        assert m is not None and m.end() == k * len(one), length
        assert run(one * (k - 1), 0) is None  # a run is SHORT_RUN strings, no fewer
    too_long = struct.pack("<Q", bounded.SHORT_STRING) + fill * bounded.SHORT_STRING
    assert run(too_long * k, 0) is None
    assert run((struct.pack("<Q", 1 << 8) + fill) * k, 0) is None  # a length whose high bytes are not zero
