"""The model readers' path helpers (modelfile/bounded.py) write paths as pathlib does, without importing it.

pathlib (with the urllib.parse and ipaddress it imports) costs a plan ~3 ms, so the readers work on
text: these tests hold the helpers to what ``str(Path(...))``, ``Path.expanduser`` and
``Path.exists`` give, so a model's files, labels and messages read as before.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpu_launch.errors import ModelFileError
from gpu_launch.modelfile.bounded import exists, joined, path_text, user_path

PATHS = st.text(alphabet="/.a~b", max_size=12)


@given(PATHS)
def test_path_text_is_what_pathlib_writes(text: str) -> None:
    assert path_text(text) == str(Path(text))


@given(PATHS, st.lists(st.text(alphabet=".ab", min_size=1, max_size=4), max_size=3))
def test_joined_is_pathlib_joining(folder: str, names: list[str]) -> None:
    assert joined(folder, *names) == str(Path(folder, *names))


@pytest.mark.parametrize("home", ["/home/u", "/home/u/", "/", "//net/u", ""])
@pytest.mark.parametrize("text", ["~", "~/", "~/m.gguf", "~//a/./b/", "~root/x", "~root", "a/~/b", "./~",
                                  "~no-such-user-here/m.gguf", "~no-such-user-here"])
def test_user_path_expands_as_pathlib_does(text: str, home: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", home)
    try:
        want: str | None = str(Path(text).expanduser())
    except RuntimeError:
        want = None
    if want is None:
        with pytest.raises(ModelFileError, match="names no home directory"):
            user_path(text, "model")
    else:
        assert user_path(text, "model") == want


def test_exists_is_path_exists(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    for name in ("f", "nowhere", "dangling", "loop", "f/under-a-file", "x\0y"):
        path = os.path.join(tmp_path, name)
        assert exists(path) == Path(path).exists(), name
    too_long = os.path.join(tmp_path, "n" * 300)  # ENAMETOOLONG: raised by both, not taken as absent
    with pytest.raises(OSError):
        Path(too_long).exists()
    with pytest.raises(OSError):
        exists(too_long)
