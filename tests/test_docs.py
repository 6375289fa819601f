"""Every example in README.md and docs/*.md runs as written, and every link in them resolves.

How examples are found (also stated in docs/index.md, "How the examples are checked"):

- A fenced block tagged ``console``, ``sh``, ``bash``, ``shell`` or not tagged at all is a shell block
  (``text`` marks pictures and output: never run).
  If some of its lines start with the prompt ``$ ``, those lines are its commands (the rest is the
  output they print); otherwise every line that calls ``gpulaunch`` (the word, followed by a space)
  is a command. Lines that do not call gpulaunch (``.venv/bin/python -m pytest -q``) are not run here.
- Each command runs through ``bash -c`` in a hermetic environment: a private lock directory, no config
  file, a temporary HOME and working directory (which hold a no-op ``train.py``, ``serve.py``,
  ``eval.py`` and small job files), no inherited ``CUDA_*``/``SLURM_*`` variables, and
  ``GPULAUNCH_SNAPSHOT=dgx-h100``, so a bare ``gpulaunch ls`` reads a bundled example machine instead
  of NVML. A launch (gpulaunch running a command, not a subcommand) gets ``--dry-run`` added, so
  ``torchrun``/``vllm`` examples need not be installed; everything else runs for real.
- An HTML comment right before a block changes how it runs: ``<!-- docs-test: exit=4 -->`` (the exit
  code every command of the block must give; 0 otherwise), ``snapshot=NAME`` (another bundled
  machine), ``env=NAME=VALUE`` (repeatable), ``real`` (no ``--dry-run`` added: the launch really
  execs, for examples about a missing command). ``<!-- not run: REASON -->`` skips the block and is
  listed in the test's output with its reason.
- ``models=NAME:KIND,...`` (and ``files=NAME:KIND,...``) write the model files an example names before it
  runs: header-only GGUF/safetensors layouts of real models, truncated up to their full size
  (tests/docs_fixtures.py); an ``org/name`` NAME goes into the block's private Hugging Face cache.
- ``output``: the block is a terminal session: every ``$ `` line runs (not only those calling gpulaunch),
  and each must print (stdout and stderr merged, ``COLUMNS=80``) the lines that follow
  it; a line ``...`` stands for any lines, ``...`` within a line for any text on it.
- Python blocks must compile, and those not marked ``not run`` run (in the same environment, exit 0
  or the ``exit=`` given); ``json`` blocks must parse; ``toml`` blocks must parse where a TOML
  reader is available.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import docs_fixtures
from cli_run import ROOT

DOCS = ROOT / "docs"
PAGES = [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]
SHELL_TAGS = {"", "console", "sh", "bash", "shell"}
_FENCE = re.compile(r"^(\s*)(```+|~~~+)\s*([\w+-]*)")
_CALLS_GPULAUNCH = re.compile(r"(^|[\s\"'(|;&`])gpulaunch(\s|$)")
_DIRECTIVE = re.compile(r"^<!--\s*(docs-test|not run)\s*:\s*(.*?)\s*-->$")


@dataclass
class Block:
    page: Path
    line: int  # 1-based line of the opening fence
    tag: str
    text: str
    directive: tuple[str, str] | None = None

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


@dataclass
class Settings:
    exit: int = 0
    snapshot: str = "dgx-h100"
    env: dict[str, str] = field(default_factory=dict)
    real: bool = False  # launch for real: no --dry-run added
    output: bool = False  # the block's output lines must be what the commands print
    models: list[tuple[str, str]] = field(default_factory=list)  # (name, kind): written before the block runs
    files: list[tuple[str, str]] = field(default_factory=list)


def blocks(page: Path) -> list[Block]:
    """The fenced code blocks of a Markdown page, each with the directive comment right before it."""
    found: list[Block] = []
    lines = page.read_text("utf-8").splitlines()
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, fence, tag = m.groups()
        start = i
        body: list[str] = []
        i += 1
        while i < len(lines) and not lines[i].strip().startswith(fence):
            body.append(lines[i][len(indent):] if lines[i].startswith(indent) else lines[i])
            i += 1
        prev = start - 1
        while prev >= 0 and not lines[prev].strip():
            prev -= 1
        directive = None
        if prev >= 0:
            d = _DIRECTIVE.match(lines[prev].strip())
            if d:
                directive = (d.group(1), d.group(2))
        found.append(Block(page, start + 1, tag.lower(), "\n".join(body), directive))
        i += 1
    return found


def commands(block: Block) -> list[str]:
    lines = block.text.splitlines()
    if any(line.startswith("$ ") for line in lines):
        picked = [line[2:] for line in lines if line.startswith("$ ")]
    else:
        picked = [line for line in lines if line.strip() and not line.lstrip().startswith("#")]
    return [line.strip() for line in picked if _CALLS_GPULAUNCH.search(line)]


def settings(block: Block) -> Settings:
    s = Settings()
    if block.directive and block.directive[0] == "docs-test":
        for word in shlex.split(block.directive[1]):
            key, _, value = word.partition("=")
            if key == "exit":
                s.exit = int(value)
            elif key == "snapshot":
                s.snapshot = value
            elif key == "real":
                s.real = True
            elif key == "output":
                s.output = True
            elif key in ("models", "files"):
                for item in value.split(","):
                    name, sep, kind = item.rpartition(":")
                    assert sep and name and kind, f"{block.where}: {key}= takes NAME:KIND,... not {item!r}"
                    getattr(s, key).append((name, kind))
            elif key == "env":
                name, _, val = value.partition("=")
                s.env[name] = val
            else:
                raise AssertionError(f"{block.where}: unknown docs-test setting {word!r}")
    return s


ALL_BLOCKS = [b for page in PAGES for b in blocks(page)]
SHELL_BLOCKS = [b for b in ALL_BLOCKS if b.tag in SHELL_TAGS and commands(b)]
RUN_BLOCKS = [b for b in SHELL_BLOCKS if not (b.directive and b.directive[0] == "not run")]
NOT_RUN = [b for b in SHELL_BLOCKS if b.directive and b.directive[0] == "not run"]

# The `gpulaunch` the examples call: the checkout's own, with --dry-run added to a launch.
_WRAPPER = textwrap.dedent(f"""\
    #!{sys.executable}
    import os, sys
    sys.path.insert(0, {str(ROOT)!r})
    argv = sys.argv[1:]
    try:
        if os.environ.pop("DOCS_TEST_REAL_LAUNCH", "") or os.environ.get("DOCS_TEST_REAL_LAUNCH_ALL"):
            raise LookupError("the block asks for a real launch")
        from gpu_launch.options.args import parse
        inv = parse(argv)
        if inv.command == "run" and not inv.options.get("dry_run") and not inv.options.get("explain"):
            argv = ["--dry-run", *argv]
    except Exception:
        pass  # a usage error: let gpulaunch itself say so, with its own exit code
    os.execv(sys.executable, [sys.executable, "-m", "gpu_launch", *argv])
""")

_FILES = {
    "train.py": "import sys\nprint('train.py', *sys.argv[1:])\n",
    "serve.py": "print('serve.py')\n",
    "eval.py": "print('eval.py')\n",
    "jobs.txt": "# one command a line\npython train.py --lr 1e-3\npython train.py --lr 3e-4\n",
    "sweep.txt": "python train.py --lr 1e-3\npython train.py --lr 3e-4\n",
}


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("docs")
    (base / "bin").mkdir()
    wrapper = base / "bin" / "gpulaunch"
    wrapper.write_text(_WRAPPER)
    wrapper.chmod(0o755)
    return base


def _environment(base: Path, home: Path, s: Settings) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("GPULAUNCH_", "CUDA_", "NVIDIA_VISIBLE", "SLURM_", "PYTEST_"))}
    env.pop("NO_COLOR", None)
    env.update({
        "PATH": os.pathsep.join([str(base / "bin"), os.path.dirname(sys.executable), env.get("PATH", "")]),
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_STATE_HOME": str(home / ".local" / "state"),  # detached jobs (submit): the block's own, numbered from 1
        "GPULAUNCH_CONFIG": "",
        "GPULAUNCH_LOCK_DIR": str(base / "locks"),
        "GPULAUNCH_HARDENED_LOCK_DIR": str(base / "no-hardened-dir"),
        "GPULAUNCH_SNAPSHOT": s.snapshot,
        "COLUMNS": "80",  # the pages show output at 80 columns
        # private (empty unless the block's marker names an `org/name` model), never the user's own cache
        "HF_HUB_CACHE": str(home.parent / "hf-hub"),
    })
    env.update(s.env)
    if s.real:
        env["DOCS_TEST_REAL_LAUNCH"] = "1"
    return env


def transcript(block: Block) -> list[tuple[str, list[str]]]:
    """An output block's prompt lines, each with the lines the page shows it printing."""
    pairs: list[tuple[str, list[str]]] = []
    for line in block.text.splitlines():
        if line.startswith("$ "):
            pairs.append((line[2:].strip(), []))
        else:
            assert pairs, f"{block.where}: an output block starts with its `$ ` command"
            pairs[-1][1].append(line)
    return pairs


def shows(expected: list[str], printed: str) -> bool:
    """Whether ``printed`` is what the page shows: line by line, trailing spaces aside; a line that
    is only ``...`` stands for any number of lines the page leaves out, and ``...`` within a line for
    any text on that line (a number that depends on the machine running the example)."""
    def line(x: str) -> str:
        if x.strip() == "...":
            return r"(?:[^\n]*\n)*?"
        return "[^\n]*?".join(re.escape(part) for part in x.rstrip().split("...")) + r"[ \t]*\n"
    pattern = "".join(line(x) for x in expected)
    text = "".join(x.rstrip() + "\n" for x in printed.splitlines())
    return re.fullmatch(pattern, text) is not None


def _prepare(s: Settings, workdir: Path) -> None:
    """The working directory and environment a block runs in, with the files its marker names."""
    home = workdir / "home"
    # a new user's home: no completion directories, so an install line that writes into one must make it
    (home / ".config").mkdir(parents=True, exist_ok=True)
    for name, text in _FILES.items():
        (workdir / name).write_text(text)
    hub = workdir / "hf-hub"
    hub.mkdir()
    if s.models:
        pytest.importorskip("gguf")
        pytest.importorskip("numpy")
    for name, kind in s.models:
        docs_fixtures.materialise(name, kind, workdir, hub, docs_fixtures.MODEL_KINDS)
    for name, kind in s.files:
        docs_fixtures.materialise(name, kind, workdir, hub, docs_fixtures.FILE_KINDS)


@pytest.mark.parametrize("block", RUN_BLOCKS, ids=[b.where for b in RUN_BLOCKS])
def test_command_examples_run_as_documented(block: Block, sandbox: Path, tmp_path: Path) -> None:
    s = settings(block)
    _prepare(s, tmp_path)
    env = _environment(sandbox, tmp_path / "home", s)
    # An output block is a terminal session: every `$ ` line runs (a `printf > jobs.txt` set-up too).
    wanted = dict(transcript(block)) if s.output else {}
    for command in (list(wanted) if s.output else commands(block)):
        done = subprocess.run(["bash", "-o", "pipefail", "-c", command], cwd=tmp_path, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT if s.output else subprocess.PIPE,
                              text=True, errors="backslashreplace", timeout=120, stdin=subprocess.DEVNULL)
        stderr = done.stderr or ""
        assert done.returncode == s.exit, (
            f"{block.where}: `{command}` exited {done.returncode}, the docs predict {s.exit}\n"
            f"stdout: {done.stdout[-2000:]}\nstderr: {stderr[-2000:]}")
        assert "Traceback" not in stderr + (done.stdout if s.output else ""), f"{block.where}: `{command}`\n{stderr}"
        if s.output:
            assert shows(wanted[command], done.stdout), (
                f"{block.where}: `{command}` printed (stdout and stderr, as a terminal shows them):\n"
                f"{done.stdout}\nthe page shows:\n" + "\n".join(wanted[command]))


def test_output_comparison_can_fail() -> None:
    """The output check is not vacuous: a changed number, a missing line or extra lines are caught."""
    printed = "GPU  FREE\n0    14.4 GiB\n1    79.6 GiB\n"
    assert shows(["GPU  FREE", "0    14.4 GiB", "1    79.6 GiB"], printed)
    assert shows(["GPU  FREE", "...", "1    79.6 GiB"], printed)
    assert shows(["...", "1    79.6 GiB  "], printed)
    assert not shows(["GPU  FREE", "0    14.3 GiB", "1    79.6 GiB"], printed)
    assert not shows(["GPU  FREE", "1    79.6 GiB"], printed)
    assert not shows(["GPU  FREE", "0    14.4 GiB"], printed)
    assert not shows(["GPU  FREE (.*)", "..."], printed)
    assert shows(["GPU  FREE", "0    ... GiB", "1    79.6 GiB"], printed)
    assert not shows(["GPU  FREE", "0    ... MiB", "1    79.6 GiB"], printed)


def test_output_blocks_are_checked() -> None:
    """The README's pictures of `ls` and of a launch are output blocks, so they cannot go stale."""
    checked = [b for b in RUN_BLOCKS if settings(b).output]
    readme = [c for b in checked if b.page.name == "README.md" for c, _ in transcript(b)]
    assert any(c.endswith(" ls") for c in readme), readme
    assert any("--auto 2 --" in c for c in readme), readme
    assert any(b.page.name == "model-sizing.md" for b in checked)


def test_examples_are_found_and_the_ones_not_run_say_why() -> None:
    """The finder sees the examples (a broken finder would pass every page vacuously)."""
    assert len(RUN_BLOCKS) >= 30, [b.where for b in RUN_BLOCKS]
    readme = [b for b in RUN_BLOCKS if b.page.name == "README.md"]
    assert any("ls" in c for b in readme for c in commands(b)), "README's `gpulaunch ls` example is not run"
    for b in NOT_RUN:
        assert b.directive and b.directive[1], f"{b.where}: `not run` needs a reason"
    print(f"\n{len(NOT_RUN)} example block(s) not run:")
    for b in NOT_RUN:
        print(f"  {b.where}: {b.directive[1] if b.directive else ''}")


def test_directives_sit_on_a_block() -> None:
    """A directive that no block follows (a typo, a block moved away) would silently do nothing."""
    for page in PAGES:
        lines = page.read_text("utf-8").splitlines()
        for n, line in enumerate(lines):
            if _DIRECTIVE.match(line.strip()):
                nxt = next((x for x in lines[n + 1:] if x.strip()), "")
                assert _FENCE.match(nxt), f"{page.relative_to(ROOT)}:{n + 1}: directive not followed by a code block"


PY_BLOCKS = [b for b in ALL_BLOCKS if b.tag in ("python", "py")]


@pytest.mark.parametrize("block", PY_BLOCKS, ids=[b.where for b in PY_BLOCKS])
def test_python_examples_compile(block: Block) -> None:
    compile(block.text, block.where, "exec")


PY_RUN = [b for b in PY_BLOCKS if not (b.directive and b.directive[0] == "not run")]


@pytest.mark.parametrize("block", PY_RUN, ids=[b.where for b in PY_RUN])
def test_python_examples_run(block: Block, sandbox: Path, tmp_path: Path) -> None:
    s = settings(block)
    _prepare(s, tmp_path)
    env = _environment(sandbox, tmp_path / "home", s)
    env["PYTHONPATH"] = str(ROOT)
    done = subprocess.run([sys.executable, "-c", block.text], cwd=tmp_path, env=env, capture_output=True,
                          text=True, errors="backslashreplace", timeout=120, stdin=subprocess.DEVNULL)
    assert done.returncode == s.exit, f"{block.where}: exited {done.returncode}\n{done.stderr[-3000:]}"


def test_there_are_python_examples() -> None:
    assert any(b.page.name == "python-api.md" for b in PY_RUN)


@pytest.mark.parametrize("block", [b for b in ALL_BLOCKS if b.tag == "json"],
                         ids=[b.where for b in ALL_BLOCKS if b.tag == "json"])
def test_json_examples_parse(block: Block) -> None:
    json.loads(block.text)


@pytest.mark.parametrize("block", [b for b in ALL_BLOCKS if b.tag == "toml"],
                         ids=[b.where for b in ALL_BLOCKS if b.tag == "toml"])
def test_toml_examples_parse(block: Block) -> None:
    try:
        import tomllib
    except ImportError:  # Python 3.10
        tomllib = pytest.importorskip("tomli")
    tomllib.loads(block.text)


# --- links -----------------------------------------------------------------------------------------

_LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
_INLINE_CODE = re.compile(r"`+[^`]*`+")


def _outside_code_blocks(page: Path) -> Iterator[str]:
    """The page's lines that are not in a fenced code block (nor its fences)."""
    fence = None
    for line in page.read_text("utf-8").splitlines():
        m = _FENCE.match(line)
        if fence is None and m:
            fence = m.group(2)
            continue
        if fence is not None:
            if line.strip().startswith(fence):
                fence = None
            continue
        yield line


def _prose(page: Path) -> str:
    """The page without its code blocks and inline code (a `[x](y)` there is not a link)."""
    return "\n".join(_INLINE_CODE.sub("", line) for line in _outside_code_blocks(page))


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"`", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    result = set()
    for line in _prose(page).splitlines():
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        slug = _slug(m.group(1))
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        result.add(slug if n == 0 else f"{slug}-{n}")
    return result


def _headings_with_code(page: Path) -> set[str]:
    """Anchors of headings, computed from the raw text (inline code in a heading is kept as text)."""
    result = set()
    for line in _outside_code_blocks(page):
        h = re.match(r"^#{1,6}\s+(.*?)\s*$", line)
        if h:
            result.add(_slug(h.group(1)))
    return result


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_links_resolve(page: Path) -> None:
    broken = []
    for target in _LINK.findall(_prose(page)):
        if re.match(r"^[a-z]+:", target):
            continue  # an outside address: not checked here
        path_part, _, anchor = target.partition("#")
        dest = (page.parent / path_part).resolve() if path_part else page
        if not dest.exists():
            broken.append(f"{target}: no such file")
            continue
        if anchor and dest.suffix == ".md" and anchor not in anchors(dest) | _headings_with_code(dest):
            broken.append(f"{target}: no heading with anchor #{anchor} in {dest.relative_to(ROOT)}")
    assert not broken, f"{page.relative_to(ROOT)}: " + "; ".join(broken)


def test_readme_links_every_docs_page() -> None:
    readme = _prose(ROOT / "README.md")
    linked = {(ROOT / t.partition("#")[0]).resolve() for t in _LINK.findall(readme)}
    assert DOCS / "index.md" in linked
    index = _prose(DOCS / "index.md")
    in_index = {(DOCS / t.partition("#")[0]).resolve() for t in _LINK.findall(index)}
    missing = [p.name for p in DOCS.glob("*.md") if p.name != "index.md" and p not in in_index]
    assert not missing, f"docs/index.md does not link: {missing}"


def test_user_docs_carry_no_development_history() -> None:
    """Commit hashes, 'pending until it exists' and issue numbers belong in git, not in user docs."""
    for page in PAGES:
        text = page.read_text("utf-8")
        for pattern in (r"\b(commit|main at|at) [0-9a-f]{7,40}\b", r"pending until", r"\bissue \d+",
                        r"was fixed in"):
            m = re.search(pattern, text, re.IGNORECASE)
            assert not m, f"{page.relative_to(ROOT)}: {m.group(0)!r}"


# --- the developer's set-up ------------------------------------------------------------------------

def _setup_line() -> str:
    lines = [x for x in (ROOT / "README.md").read_text("utf-8").splitlines() if x.startswith("python3 -m venv .venv")]
    assert len(lines) == 1, "README.md should have exactly one set-up line starting `python3 -m venv .venv`"
    return lines[0]


#: The README's test command: the environment's python by its path, so that it runs in any shell, activated
#: or not, on a system where `python` does not exist (Debian has `python3` only).
TEST_COMMAND = ".venv/bin/python -m pytest -q"


def test_readme_setup_is_two_commands_and_ci_runs_the_test_command() -> None:
    """The set-up line installs and runs the main job; TEST_COMMAND runs the tests; .ci/run runs that same
    test command (so the README's promise is what CI checks), under `env -i`, in a clone at a long path."""
    line = _setup_line()
    assert "pip install -e '.[test]'" in line and "gpulaunch" in line
    assert re.search(r"(^| )python( |$)", line.split(" -- ")[0]) is None  # `python` may not exist: python3
    readme = (ROOT / "README.md").read_text("utf-8")
    assert f"\n```\n{TEST_COMMAND}\n```\n" in readme
    ci = (ROOT / ".ci" / "run").read_text("utf-8")
    assert f"\n{TEST_COMMAND}\n" in ci and "pip install -q -e '.[test]'" in ci
    assert "env -i PATH=" in ci and "sixty-characters-or-more" in ci


def test_readme_setup_demo_runs(sandbox: Path, tmp_path: Path) -> None:
    """The gpulaunch part of the set-up line (after the venv and pip steps) runs here, with no
    snapshot set, so `gpulaunch ls` meets this machine's NVML or its absence, as on a fresh clone."""
    parts = _setup_line().split(" && ")
    demo = " && ".join(p for p in parts if not p.startswith(("python3 -m venv", ". .venv", "pip install")))
    assert "gpulaunch" in demo
    home = tmp_path / "home"
    (home / ".config").mkdir(parents=True)
    env = _environment(sandbox, home, Settings(real=True))
    del env["GPULAUNCH_SNAPSHOT"]
    env.pop("DOCS_TEST_REAL_LAUNCH")  # the wrapper reads it once; the demo's launch must not be a dry run
    env["DOCS_TEST_REAL_LAUNCH_ALL"] = "1"
    done = subprocess.run(["bash", "-c", demo], cwd=tmp_path, env=env, capture_output=True, text=True,
                          errors="backslashreplace", timeout=120, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    assert "CUDA_VISIBLE_DEVICES = " in done.stdout
    assert "Traceback" not in done.stderr
