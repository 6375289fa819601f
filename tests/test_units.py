"""Sizes and durations as users type them."""

from __future__ import annotations

import pytest

from gpu_launch.errors import UsageError
from gpu_launch.base.units import Size, fmt_duration, fmt_mib, parse_duration, parse_size


@pytest.mark.parametrize("text, mib", [
    ("20GiB", 20480), ("512MiB", 512), ("20G", 20480), ("1.5GiB", 1536), ("1TiB", 1024 * 1024),
    ("20GB", 20e9 / 2**20), ("500MB", 500e6 / 2**20), ("20gib", 20480), (" 8 GiB ", 8192),
    ("1PiB", 1024**3),  # the largest size gpulaunch takes can be written in its own unit
])
def test_sizes(text, mib):
    assert parse_size(text).mib == pytest.approx(mib)


def test_percent_is_a_share_of_each_gpu():
    size = parse_size("80%")
    assert size == Size(percent=80.0) and size.of(1000) == 800 and size.of(None) is None
    assert parse_size("12.5%").of(81559) == 10194.875  # --min-free 12.5% of an H100: not rounded down to whole MiB


@pytest.mark.parametrize("text, fragment", [
    ("20XB", "unknown unit 'XB'"), ("20", "has no unit"), ("abc", "is not a size"), ("", "is not a size"),
    ("150%", "over 100%"), ("-5GiB", "is not a size"),
])
def test_bad_sizes(text, fragment):
    with pytest.raises(UsageError) as info:
        parse_size(text, "--min-free")
    assert fragment in info.value.message and info.value.message.startswith("--min-free")


@pytest.mark.parametrize("text, seconds", [("90", 90), ("90s", 90), ("30m", 1800), ("2h", 7200), ("1h30m", 5400),
                                           ("1d", 86400), ("0.5h", 1800)])
def test_durations(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "2x", "h", "1h 30m", "-5s", "2hh"])
def test_bad_durations(text):
    with pytest.raises(UsageError, match="is not a duration"):
        parse_duration(text, "--wait")


def test_fmt_mib():
    assert fmt_mib(None) == "–" and fmt_mib(512) == "512 MiB" and fmt_mib(81559) == "79.6 GiB"


@pytest.mark.parametrize("seconds, shown", [(0, "0s"), (59.4, "59s"), (59.6, "1m00s"), (61, "1m01s"),
                                            (3599, "59m59s"), (3600, "1h00m"), (3661, "1h01m"), (90061, "25h01m")])
def test_durations_are_shown_in_seconds_minutes_or_hours(seconds, shown):
    """How long a job waited or ran, a wait that timed out (`still pending after 30s`): seconds under a
    minute, minutes and seconds under an hour, then hours and minutes."""
    assert fmt_duration(seconds) == shown
