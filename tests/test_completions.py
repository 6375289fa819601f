"""Completion scripts: generated from the option table, checked in without drift, and driven through
real bash (zsh and fish where installed) to the GPU indices of a snapshot."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from cli_run import scrubbed
from gpu_launch.options import args

from gpu_launch.commands import completions

ROOT = Path(__file__).resolve().parent.parent
CHECKED_IN = {"bash": "gpulaunch.bash", "zsh": "_gpulaunch", "fish": "gpulaunch.fish"}
BASH_COMPLETION = Path("/usr/share/bash-completion/bash_completion")


@pytest.fixture(scope="module")
def shell_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """PATH with a `gpulaunch` that is this checkout, a clean HOME, no config, no inherited snapshot."""
    bin_dir = tmp_path_factory.mktemp("bin")
    exe = bin_dir / "gpulaunch"
    exe.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m gpu_launch "$@"\n')
    exe.chmod(0o755)
    home = tmp_path_factory.mktemp("home")
    env = scrubbed(("GPULAUNCH_", "XDG_", "BASH_"))
    env.update(PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', os.defpath)}", HOME=str(home), GPULAUNCH_CONFIG="",
               PYTHONPATH=str(ROOT))
    return env


@pytest.mark.parametrize("shell", completions.SHELLS)
def test_checked_in_scripts_match_the_generator(shell: str) -> None:
    path = ROOT / "completions" / CHECKED_IN[shell]
    assert path.read_text() == completions.script(shell), (
        f"completions/{CHECKED_IN[shell]} is stale: run `python -m gpu_launch completions {shell} > {path.relative_to(ROOT)}`")


@pytest.mark.parametrize("shell", completions.SHELLS)
def test_the_command_prints_the_script(shell: str, shell_env: dict[str, str]) -> None:
    proc = subprocess.run([sys.executable, "-m", "gpu_launch", "completions", shell], capture_output=True, text=True,
                          env=shell_env, timeout=60)
    assert proc.returncode == 0 and proc.stdout == completions.script(shell)


def test_every_option_and_subcommand_is_in_every_script() -> None:
    for shell in completions.SHELLS:
        text = completions.script(shell)
        for opt in args.OPTIONS:
            for name in opt.names:
                token = name.lstrip("-") if shell == "fish" else name
                assert token in text, (shell, name)
        for sub in args.SUBCOMMANDS:
            assert sub in text


@pytest.mark.parametrize("shell", completions.SHELLS)
def test_scripts_parse_in_their_shell(shell: str) -> None:
    if shutil.which(shell) is None:
        pytest.skip(f"{shell} is not installed")
    proc = subprocess.run([shell, "-n", str(ROOT / "completions" / CHECKED_IN[shell])], capture_output=True, text=True,
                          timeout=60)
    assert (proc.returncode, proc.stderr) == (0, "")


def test_unknown_shell_is_a_usage_error(shell_env: dict[str, str]) -> None:
    proc = subprocess.run([sys.executable, "-m", "gpu_launch", "completions", "tcsh"], capture_output=True,
                          text=True, env=shell_env, timeout=60)
    assert proc.returncode == 2 and "unknown shell 'tcsh'" in proc.stderr


# ------------------------------------------------------------------------------------------ helper

def helper(*words: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gpu_launch", "__complete", *words], capture_output=True,
                          text=True, env=env, timeout=60)


def test_helper_leaves_out_the_gpus_already_listed(shell_env: dict[str, str]) -> None:
    assert helper("gpus", "--taken=3", "--snapshot", "workstation-4x", env=shell_env).stdout.split() == ["0", "1", "2"]
    assert helper("gpus", "--taken=0-2,bogus,", "--snapshot", "workstation-4x", env=shell_env).stdout.split() == ["3"]
    assert completions.gpu_words(["--snapshot", "workstation-4x"], {}, taken="GPU-no-such,1") == ["0", "2", "3"]


def test_the_duration_pattern_agrees_with_the_parser() -> None:
    import re

    from gpu_launch.base.units import parse_duration

    for word in ("90", "90s", "30m", "2h", "1h30m", "1d", "1.5h", "2H", "python", "cat", "2x", "h", "", "-1", "1h 30m"):
        try:
            parse_duration(word)
            ok = True
        except Exception:
            ok = False
        assert bool(re.fullmatch(completions.DURATION_ERE.strip("^$"), word)) == ok, word


def test_helper_reads_the_snapshot_on_the_line(shell_env: dict[str, str]) -> None:
    assert helper("gpus", "--snapshot", "workstation-4x", env=shell_env).stdout.split() == ["0", "1", "2", "3", "all"]
    assert helper("gpus", "--snapshot=dgx-h100", "--auto", env=shell_env).stdout.split()[-2:] == ["7", "all"]
    env = {**shell_env, "GPULAUNCH_SNAPSHOT": "pcie-8x"}
    assert len(helper("gpus", env=env).stdout.split()) == 9


@pytest.mark.parametrize("words", [["gpus", "--snapshot", "/no/such/file.json"], ["gpus", "--snapshot", "nonsense"],
                                   ["bogus"], []])
def test_helper_fails_silently(words: list[str], shell_env: dict[str, str]) -> None:
    """A bad file, a bad verb: nothing on stdout or stderr, exit 0. (No driver at all: the example machine's
    GPUs, as `ls` shows them: test_the_helper_offers_the_example_machines_gpus_without_a_driver.)"""
    proc = helper(*words, env={**shell_env, "PYTHONPATH": str(ROOT)})
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "", "")


# -------------------------------------------------------------------------------------------- bash

BASH_DRIVER = r"""
{preload}
source "$1"
complete -p gpulaunch
line=$2
read -ra COMP_WORDS <<< "$line"
[[ $line == *" " ]] && COMP_WORDS+=("")
COMP_LINE=$line
COMP_POINT=${{#line}}
COMP_CWORD=$(( ${{#COMP_WORDS[@]}} - 1 ))
_gpulaunch gpulaunch "${{COMP_WORDS[COMP_CWORD]}}" "${{COMP_WORDS[COMP_CWORD-1]}}" 2>/dev/null
printf 'REPLY:%s\n' "${{COMPREPLY[@]}}"
"""


def bash_complete(line: str, env: dict[str, str], preload: bool = False) -> list[str]:
    """Run real bash with the checked-in script loaded and complete ``line`` (cursor at its end).

    COMP_WORDS is split on blanks only, and '=' stays inside the word: the COMP_WORDBREAKS-splitting
    case ("--gpus", "=", "") is tested separately.
    """
    script = BASH_DRIVER.format(preload=f"source {BASH_COMPLETION}" if preload else "")
    proc = subprocess.run(["bash", "--norc", "--noprofile", "-c", script, "bash",
                           str(ROOT / "completions" / "gpulaunch.bash"), line],
                          capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "complete -F _gpulaunch gpulaunch" in proc.stdout
    return [w[len("REPLY:"):] for w in proc.stdout.splitlines() if w.startswith("REPLY:") and w != "REPLY:"]


needs_bash = pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")


@needs_bash
def test_bash_gpus_offers_the_snapshots_indices(shell_env: dict[str, str]) -> None:
    assert bash_complete("gpulaunch --snapshot dgx-h100 --gpus ", shell_env) == [*map(str, range(8)), "all"]
    assert bash_complete("gpulaunch --snapshot workstation-4x -x ", shell_env) == ["0", "1", "2", "3", "all"]
    # a GPU already in the list is not offered again, nor `all` after a comma
    assert bash_complete("gpulaunch --snapshot workstation-4x --gpus 2,", shell_env) == ["2,0", "2,1", "2,3"]
    assert bash_complete("gpulaunch --snapshot dgx-h100 --gpus=3,1-2,", shell_env) == [
        "--gpus=3,1-2,0", *(f"--gpus=3,1-2,{i}" for i in range(4, 8))]
    assert bash_complete("gpulaunch --snapshot=pcie-8x --gpus=1", shell_env) == ["--gpus=1"]
    env = {**shell_env, "GPULAUNCH_SNAPSHOT": "workstation-4x"}
    assert bash_complete("gpulaunch --gpus ", env) == ["0", "1", "2", "3", "all"]


@needs_bash
def test_bash_with_equals_split_by_wordbreaks(shell_env: dict[str, str]) -> None:
    script = BASH_DRIVER.format(preload="").replace('read -ra COMP_WORDS <<< "$line"',
                                                    "COMP_WORDS=(gpulaunch --snapshot mig-a100 --exclude =)")
    proc = subprocess.run(["bash", "--norc", "-c", script, "bash", str(ROOT / "completions" / "gpulaunch.bash"),
                           "gpulaunch --snapshot mig-a100 --exclude="], capture_output=True, text=True,
                          env=shell_env, timeout=60)
    assert [w for w in proc.stdout.splitlines() if w.startswith("REPLY:")] == ["REPLY:0", "REPLY:1", "REPLY:all"]


@needs_bash
def test_bash_subcommands_options_and_values(shell_env: dict[str, str]) -> None:
    assert bash_complete("gpulaunch ", shell_env) == list(args.SUBCOMMANDS)
    assert bash_complete("gpulaunch co", shell_env)[:2] == ["config", "completions"]
    assert bash_complete("gpulaunch ls --", shell_env) == ["--gpus", "--lock-dir", "--json", "--topo", "--wide", "--processes",
                                                           "--watch", "--snapshot", "--quiet", "--verbose", "--help",
                                                           "--version"]
    assert "--min-free" in bash_complete("gpulaunch --m", shell_env)
    assert bash_complete("gpulaunch completions ", shell_env) == ["bash", "zsh", "fish"]
    assert bash_complete("gpulaunch --snapshot dgx", shell_env)[:2] == ["dgx-h100", "dgx1-v100"]
    assert bash_complete("gpulaunch --auto ", shell_env) == []
    assert bash_complete("gpulaunch --bind ", shell_env) == ["auto", "on", "off"]
    assert bash_complete("gpulaunch env --shell f", shell_env) == ["fish"]


@needs_bash
def test_bash_falls_back_to_command_completion(shell_env: dict[str, str], tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    prog = Path(shell_env["PATH"].split(os.pathsep)[0]) / "zzgl-tool"
    prog.write_text("#!/bin/sh\n")
    prog.chmod(0o755)
    # after --, after --auto N, and at the first word that is a command
    assert "zzgl-tool" in bash_complete("gpulaunch -- zzgl", shell_env)
    assert "zzgl-tool" in bash_complete("gpulaunch --auto 2 zzgl", shell_env)
    assert bash_complete("gpulaunch zzgl", shell_env) == ["zzgl-tool"]
    # the command's own arguments: files here (no bash-completion), its options with bash-completion
    (tmp_path / "train_zz.py").write_text("")
    monkeypatch.chdir(tmp_path)
    assert bash_complete("gpulaunch --gpus 0 python train_z", shell_env) == ["train_zz.py"]
    assert "--gpus" not in bash_complete("gpulaunch -- ls --", shell_env)


@needs_bash
def test_bash_after_wait_comes_the_command_unless_a_duration(shell_env: dict[str, str], tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "sizes.txt").write_text("")
    (tmp_path / "jobs.txt").write_text("")
    monkeypatch.chdir(tmp_path)
    # `cat` is the command, not --wait's value: its argument completes (files without bash-completion)
    assert bash_complete("gpulaunch --wait cat si", shell_env) == ["sizes.txt"]
    assert bash_complete("gpulaunch --gpus 0 --wait cat si", shell_env) == ["sizes.txt"]
    # a duration is --wait's value, then the command comes
    assert bash_complete("gpulaunch --wait 30m cat si", shell_env) == ["sizes.txt"]
    assert bash_complete("gpulaunch --wait=1h30m cat si", shell_env) == ["sizes.txt"]
    assert bash_complete("gpulaunch --wait=", shell_env) == []
    assert bash_complete("gpulaunch --wait ", shell_env) == list(args.SUBCOMMANDS)


@needs_bash
def test_bash_each_completes_the_job_file(shell_env: dict[str, str], tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "jobs.txt").write_text("")
    monkeypatch.chdir(tmp_path)
    assert bash_complete("gpulaunch each jo", shell_env) == ["jobs.txt"]
    assert bash_complete("gpulaunch each --gpus-per-job 2 jo", shell_env) == ["jobs.txt"]


@needs_bash
@pytest.mark.skipif(not BASH_COMPLETION.exists(), reason="bash-completion is not installed")
def test_bash_uses_command_offset_from_bash_completion(shell_env: dict[str, str]) -> None:
    reply = bash_complete("gpulaunch --gpus 0 ls --al", shell_env, preload=True)
    assert "--all" in reply  # ls's own completion, reached through _command_offset
    assert bash_complete("gpulaunch --snapshot dgx-h100 --gpus ", shell_env, preload=True)[-1] == "all"
    assert "--all" in bash_complete("gpulaunch --gpus 0 --wait ls --al", shell_env, preload=True)


# --------------------------------------------------------------------------------------------- zsh

ZSH_DRIVER = r"""
# compadd/compset/_files/_normal exist only inside a completion widget: stand-ins that print.
compadd() { while (( $# )) && [[ $1 != -- ]]; do shift; done; shift; print -rl -- "${@/#/ADD:}" }
compset() { return 1 }
_files() { print -r -- "FILES${*:+:$*}" }
_normal() { print -r -- "NORMAL:${words[*]}:$CURRENT" }
_command_names() { print -r -- COMMANDS }
source $1
words=(${(z)2})
[[ $2 == *" " ]] && words+=("")
CURRENT=${#words}
_gpulaunch
"""


def zsh_complete(line: str, env: dict[str, str]) -> list[str]:
    """Run real zsh (no completion system: compadd, _files, _normal print what they were given)."""
    proc = subprocess.run(["zsh", "-f", "-c", ZSH_DRIVER, "zsh", str(ROOT / "completions" / "_gpulaunch"), line],
                          capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode in (0, 1), proc.stderr
    assert proc.stderr == ""
    return proc.stdout.splitlines()


@pytest.mark.skipif(shutil.which("zsh") is None, reason="zsh is not installed (apt-get install zsh)")
def test_zsh(shell_env: dict[str, str]) -> None:
    assert zsh_complete("gpulaunch --snapshot dgx-h100 --gpus ", shell_env) == [f"ADD:{i}" for i in range(8)] + ["ADD:all"]
    assert zsh_complete("gpulaunch --snapshot=workstation-4x --exclude=", shell_env)[-1] == "ADD:all"
    assert zsh_complete("gpulaunch ", shell_env) == [f"ADD:{s}" for s in args.SUBCOMMANDS]
    assert zsh_complete("gpulaunch completions ", shell_env) == ["ADD:bash", "ADD:zsh", "ADD:fish"]
    assert zsh_complete("gpulaunch --bind ", shell_env) == ["ADD:auto", "ADD:on", "ADD:off"]
    assert "ADD:--topo" in zsh_complete("gpulaunch ls --", shell_env)
    assert "ADD:--auto" not in zsh_complete("gpulaunch ls --", shell_env)
    assert zsh_complete("gpulaunch --auto 2 -- python tr", shell_env) == ["NORMAL:python tr:2"]
    assert zsh_complete("gpulaunch --gpus 0 pyth", shell_env) == ["NORMAL:pyth:1"]
    # the loose ends: --wait's optional value, each's job file, a GPU not offered twice
    assert zsh_complete("gpulaunch --wait cat si", shell_env) == ["NORMAL:cat si:2"]
    assert zsh_complete("gpulaunch --wait 30m cat si", shell_env) == ["NORMAL:cat si:2"]
    assert zsh_complete("gpulaunch --gpus 1 --wait cat si", shell_env) == ["NORMAL:cat si:2"]
    assert zsh_complete("gpulaunch each ", shell_env) == ["FILES"]
    assert zsh_complete("gpulaunch --snapshot workstation-4x --gpus 1,", shell_env) == ["ADD:0", "ADD:2", "ADD:3"]
    assert zsh_complete("gpulaunch --snapshot workstation-4x --gpus=0,3,", shell_env) == ["ADD:1", "ADD:2"]


# -------------------------------------------------------------------------------------------- fish

def fish_complete(line: str, env: dict[str, str], cwd: Path | None = None) -> list[str]:
    script = f"source {ROOT / 'completions' / 'gpulaunch.fish'}; complete --do-complete=$argv[1]"
    proc = subprocess.run(["fish", "--no-config", "-c", script, line], capture_output=True, text=True, env=env,
                          timeout=60, cwd=cwd)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    return [w.split("\t")[0] for w in proc.stdout.splitlines()]


@pytest.mark.skipif(shutil.which("fish") is None, reason="fish is not installed (apt-get install fish)")
def test_fish(shell_env: dict[str, str], tmp_path: Path) -> None:
    assert fish_complete("gpulaunch --snapshot dgx-h100 --gpus ", shell_env) == [*map(str, range(8)), "all"]
    assert fish_complete("gpulaunch --snapshot workstation-4x --gpus 1,", shell_env) == ["1,0", "1,2", "1,3"]
    assert fish_complete("gpulaunch --snapshot=pcie-8x --exclude=", shell_env)[0] == "--exclude=0"
    assert sorted(fish_complete("gpulaunch ", shell_env)) == sorted(args.SUBCOMMANDS)
    assert fish_complete("gpulaunch completions ", shell_env) == ["bash", "fish", "zsh"]
    assert sorted(fish_complete("gpulaunch env --shell ", shell_env)) == ["bash", "fish", "sh", "zsh"]
    assert "--topo" in fish_complete("gpulaunch ls --", shell_env)
    assert "--auto" not in fish_complete("gpulaunch ls --", shell_env)
    assert "--gpus" not in fish_complete("gpulaunch --auto 2 -- ls --", shell_env)
    (tmp_path / "sizes.txt").write_text("")
    (tmp_path / "jobs.txt").write_text("")
    assert fish_complete("gpulaunch --wait cat si", shell_env, tmp_path) == ["sizes.txt"]
    assert fish_complete("gpulaunch --wait 30m cat si", shell_env, tmp_path) == ["sizes.txt"]
    assert fish_complete("gpulaunch each jo", shell_env, tmp_path) == ["jobs.txt"]


# ------------------------------------------------------------------------------------------ job ids

@pytest.fixture
def with_jobs(shell_env: dict[str, str], tmp_path: Path) -> Iterator[dict[str, str]]:
    """A job dir with job 1 done and job 2 running (its supervisor's lock on the log is held here)."""
    import fcntl
    import time

    from gpu_launch.jobs import status
    from gpu_launch.jobs.store import Job, JobDir

    env = {**shell_env, "XDG_STATE_HOME": str(tmp_path / "state")}
    jobs = JobDir.open(env, create=True)
    assert jobs is not None
    logs = []
    for state, argv in (("done", ("python", "eval.py")), ("running", ("python", "train.py", "--lr", "3e-4"))):
        job_id, log = jobs.new_id()
        jobs.write(Job(job_id, state, argv, (), "/", status.host(), status.boot_id(), str(tmp_path), time.time()))
        logs.append(log)
    fcntl.flock(logs[1], fcntl.LOCK_EX)  # job 2's supervisor lives
    yield env
    for log in logs:
        os.close(log)
    jobs.close()


def test_helper_offers_your_job_ids_with_what_each_is(with_jobs: dict[str, str]) -> None:
    assert helper("jobs", "all", env=with_jobs).stdout == "1\tdone: python eval.py\n2\trunning: python train.py --lr 3e-4\n"
    assert helper("jobs", "active", env=with_jobs).stdout == "2\trunning: python train.py --lr 3e-4\n"


@needs_bash
def test_bash_completes_job_ids(with_jobs: dict[str, str]) -> None:
    assert bash_complete("gpulaunch log ", with_jobs) == ["1", "2"]
    assert bash_complete("gpulaunch jobs --clear ", with_jobs) == ["1", "2"]
    assert bash_complete("gpulaunch cancel --grace 5 ", with_jobs) == ["2"]  # only what can be cancelled
    assert bash_complete("gpulaunch log -f 2", with_jobs) == ["2"]


@pytest.mark.skipif(shutil.which("zsh") is None, reason="zsh is not installed (apt-get install zsh)")
def test_zsh_completes_job_ids(with_jobs: dict[str, str]) -> None:
    assert zsh_complete("gpulaunch log ", with_jobs) == ["ADD:1", "ADD:2"]
    assert zsh_complete("gpulaunch cancel ", with_jobs) == ["ADD:2"]


@pytest.mark.skipif(shutil.which("fish") is None, reason="fish is not installed (apt-get install fish)")
def test_fish_completes_job_ids(with_jobs: dict[str, str]) -> None:
    assert fish_complete("gpulaunch jobs ", with_jobs) == ["1", "2"]
    assert fish_complete("gpulaunch cancel ", with_jobs) == ["2"]


# ------------------------------------------------- models, engines, KV types, no driver (issue 36 item 5)

NO_DRIVER_PYNVML = """\
import sys
sys.path.insert(0, {tests!r})
from fake_pynvml import FakeNvml, make_gpu, NVML_ERROR_LIBRARY_NOT_FOUND
_fake = FakeNvml([make_gpu(0)], errors={{("nvmlInit", None): NVML_ERROR_LIBRARY_NOT_FOUND}})


def __getattr__(name):
    return getattr(_fake, name)
"""


@pytest.fixture
def models_here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A directory with what a model reader takes (a GGUF, a safetensors file, a folder) and what it does not."""
    for name in ("ll-8b.gguf", "ll-st.safetensors", "ll-notes.txt", "ll.json"):
        (tmp_path / name).write_text("")
    (tmp_path / "ll-folder").mkdir()
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def no_driver(shell_env: dict[str, str], tmp_path: Path) -> dict[str, str]:
    """No NVIDIA driver: a pynvml whose nvmlInit says the library is not there, first on the path."""
    fake = tmp_path / "nvml"
    fake.mkdir()
    (fake / "pynvml.py").write_text(NO_DRIVER_PYNVML.format(tests=str(ROOT / "tests")))
    return {**shell_env, "PYTHONPATH": f"{fake}{os.pathsep}{shell_env['PYTHONPATH']}"}


ENGINES = ["llama.cpp", "vllm", "sglang", "mlc", "tgi", "transformers"]


def test_the_helper_offers_the_example_machines_gpus_without_a_driver(no_driver: dict[str, str]) -> None:
    """Was: nothing, while `ls` showed the example machine."""
    assert helper("gpus", env=no_driver).stdout.split() == [*map(str, range(8)), "all"]


@needs_bash
def test_bash_models_engines_kv_types_and_gpus_without_a_driver(shell_env: dict[str, str], models_here: Path,
                                                                no_driver: dict[str, str]) -> None:
    models = ["ll-8b.gguf", "ll-folder", "ll-st.safetensors"]
    assert sorted(bash_complete("gpulaunch plan ./ll", shell_env)) == [f"./{m}" for m in models]
    assert sorted(bash_complete("gpulaunch plan --ctx 8192 ll", shell_env)) == models
    assert sorted(bash_complete("gpulaunch --fit ll", shell_env)) == models
    assert sorted(bash_complete("gpulaunch --fit=ll", shell_env)) == [f"--fit={m}" for m in models]
    assert bash_complete("gpulaunch plan ll.gguf --engine ", shell_env) == ENGINES
    assert bash_complete("gpulaunch --fit ll-8b.gguf --kv-type q8", shell_env) == ["q8_0"]
    assert bash_complete("gpulaunch --gpus ", no_driver) == [*map(str, range(8)), "all"]


@pytest.mark.skipif(shutil.which("zsh") is None, reason="zsh is not installed (apt-get install zsh)")
def test_zsh_models_engines_kv_types_and_gpus_without_a_driver(shell_env: dict[str, str],
                                                               no_driver: dict[str, str]) -> None:
    models = ["FILES:-g *.(gguf|safetensors)"]  # _files offers the folders too
    assert zsh_complete("gpulaunch plan ./ll", shell_env) == models
    assert zsh_complete("gpulaunch --fit ", shell_env) == models
    assert zsh_complete("gpulaunch --engine ", shell_env) == [f"ADD:{e}" for e in ENGINES]
    assert zsh_complete("gpulaunch plan m.gguf --kv-type ", shell_env)[:3] == ["ADD:f32", "ADD:f16", "ADD:bf16"]
    assert zsh_complete("gpulaunch --gpus ", no_driver) == [f"ADD:{i}" for i in range(8)] + ["ADD:all"]


@pytest.mark.skipif(shutil.which("fish") is None, reason="fish is not installed (apt-get install fish)")
def test_fish_models_engines_kv_types_and_gpus_without_a_driver(shell_env: dict[str, str], models_here: Path,
                                                                no_driver: dict[str, str]) -> None:
    models = ["ll-8b.gguf", "ll-folder/", "ll-st.safetensors"]
    assert sorted(fish_complete("gpulaunch plan ll", shell_env, models_here)) == models
    assert sorted(fish_complete("gpulaunch --fit ll", shell_env, models_here)) == models
    assert sorted(fish_complete("gpulaunch --engine ", shell_env)) == sorted(ENGINES)
    assert fish_complete("gpulaunch --kv-type q4", shell_env) == ["q4_0", "q4_1"]
    assert fish_complete("gpulaunch --gpus ", no_driver) == [*map(str, range(8)), "all"]
