"""nvisel's options (issue 26 item 7): an elastic count (`--min-count`/`--max-count`), `--account-as-free
[USER]` and `--min-total-memory`, in a launch, `env`, `each` and the Python API.

What a user sees: the GPUs a real child got (its GPULAUNCH_GPUS and `{n}`), exit codes, one line. On
dgx-h100 six GPUs are eligible (alice's 0 and 1 are busy); `mixed-a100` has two A100 80GB (GPU 1 partly
used by carol) and two A100 40GB.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sharing_helpers import env, run, write_snapshot

from gpu_launch.hardware import snapshot
from gpu_launch.reservations.holders import current_user

SHOW = ["python3", "-c", "import os, sys; print(sys.argv[1], os.environ['GPULAUNCH_GPUS'])", "{n}"]


@pytest.fixture
def locks(tmp_path: Path) -> Path:
    return tmp_path / "locks"


# -- --min-count / --max-count -------------------------------------------------------------------

def test_max_count_takes_as_many_eligible_gpus_as_there_are_up_to_it(locks: Path) -> None:
    four = run(["--snapshot", "dgx-h100", "--max-count", "4", "--", *SHOW], locks)
    assert four.returncode == 0 and four.stdout == "4 2,3,4,6\n", four.stderr  # {n} is the count taken
    # Up to 8: the six eligible ones (bob's partly used GPU 5 among them, with a warning), never alice's.
    most = run(["--snapshot", "dgx-h100", "--max-count", "8", "--", *SHOW], locks)
    assert most.returncode == 0 and most.stdout == "6 2,3,4,5,6,7\n", most.stderr
    assert "warning: GPU 5 is partly used by bob" in most.stderr
    at_least = run(["--snapshot", "dgx-h100", "--min-count", "3", "--", *SHOW], locks)  # no --max-count: all
    assert at_least.stdout == "6 2,3,4,5,6,7\n", at_least.stderr


def test_min_count_not_met_is_exit_4_and_runs_nothing(locks: Path) -> None:
    done = run(["--snapshot", "dgx-h100", "--min-count", "7", "--max-count", "8", "--", *SHOW], locks)
    assert done.returncode == 4 and done.stdout == ""
    assert done.stderr.startswith("gpulaunch: error: need 7 GPUs, but only 6 of 8 are eligible (GPU 0: busy by alice")
    # Inside a job of 3 GPUs: its 3, up to 4.
    nested = run(["--snapshot", "dgx-h100", "-q", "--gpus", "2,3,4", "--", "python3", "-m", "gpu_launch",
                  "--snapshot", "dgx-h100", "--max-count", "4", "--", *SHOW], locks)
    assert nested.stdout == "3 2,3,4\n", nested.stderr


@pytest.mark.parametrize(("args", "says"), [
    (["--min-count", "3", "--max-count", "2"], "--min-count 3 is more than --max-count 2"),
    (["--auto", "2", "--max-count", "4"], "--auto and --max-count cannot be used together"),
    (["--gpus", "0", "--min-count", "1"], "--gpus and --min-count cannot be used together"),
    (["--max-count", "2", "--mig"], "--mig chooses one MIG device"),
    (["--min-count", "0"], "--min-count: 0 GPUs makes no sense"),
    (["--min-total-memory", "50%"], "a percentage makes no sense here"),
    (["--account-as-free=-x"], "--account-as-free: '-x' is not a user name"),
])
def test_bad_combinations_are_one_line_exit_2(args: list[str], says: str, locks: Path) -> None:
    done = run(["--snapshot", "dgx-h100", *args, "--", "true"], locks)
    assert done.returncode == 2 and says in done.stderr and done.stderr.count("\n") == 1, done.stderr


def test_env_and_each_take_the_elastic_count(tmp_path: Path, locks: Path) -> None:
    done = run(["--snapshot", "dgx-h100", "env", "--max-count", "3", "--json"], locks)
    assert done.returncode == 0 and json.loads(done.stdout)["env"]["GPULAUNCH_GPUS"] == "4,6,7", done.stderr
    jobs = tmp_path / "jobs.txt"
    jobs.write_text("""python3 -c 'import os, sys; print(sys.argv[1], os.environ["GPULAUNCH_GPUS"])' {n}\n""")
    logs = tmp_path / "logs"
    sweep = run(["--snapshot", "dgx-h100", "each", str(jobs), "--max-count", "2", "--min-total-memory", "70GiB",
                 "--log-dir", str(logs), "-q"], locks)
    assert sweep.returncode == 0, sweep.stderr
    assert [p.read_text() for p in logs.glob("job-*.log")] == ["2 2,3\n"]
    both = run(["--snapshot", "dgx-h100", "each", str(jobs), "--max-count", "2", "--gpus-per-job", "2"], locks)
    assert both.returncode == 2 and "cannot be used together" in both.stderr
    slurm = run(["--snapshot", "dgx-h100", "each", str(jobs), "--slurm", "--min-count", "2"], locks)
    assert slurm.returncode == 2 and "--min-count does not apply to `each --slurm`" in slurm.stderr


# -- --min-total-memory --------------------------------------------------------------------------

def test_min_total_memory_takes_the_80_gb_cards_of_a_mixed_box(locks: Path) -> None:
    plain = run(["--snapshot", "mixed-a100", "--auto", "2", "--", *SHOW], locks)
    assert plain.stdout == "2 2,3\n", plain.stderr  # the idle 40 GB pair wins on availability
    big = run(["--snapshot", "mixed-a100", "--auto", "2", "--min-total-memory", "80GB", "--", *SHOW], locks)
    assert big.returncode == 0 and big.stdout == "2 0,1\n", big.stderr
    assert "warning: GPU 1 is partly used by carol" in big.stderr
    three = run(["--snapshot", "mixed-a100", "--auto", "3", "--min-total-memory", "80GB", "--", *SHOW], locks)
    assert three.returncode == 4 and three.stdout == ""
    assert "GPUs 2,3: 40.0 GiB total < 74.5 GiB asked by --min-total-memory" in three.stderr
    assert "no wait can help" in three.stderr  # a card does not grow
    # --gpus on a small card: checked but obeyed, as --min-free is.
    named = run(["--snapshot", "mixed-a100", "--gpus", "3", "--min-total-memory", "80GB", "--", *SHOW], locks)
    assert named.returncode == 0 and "warning: GPU 3: 40.0 GiB total < 74.5 GiB" in named.stderr
    waits = run(["--snapshot", "mixed-a100", "--gpus", "3", "--min-total-memory", "80GB", "--wait", "1", "--",
                 *SHOW], locks)
    assert waits.returncode == 4 and "waiting cannot help: GPU 3 will never have more memory" in waits.stderr


# -- --account-as-free ---------------------------------------------------------------------------

def _mine(tmp_path: Path) -> Path:
    """dgx-h100 with GPUs 0 and 1's processes this user's (a notebook kernel holding 64.7 GiB at 97-98 %)."""
    doc = json.loads(snapshot.dump(snapshot.resolve("dgx-h100")))
    for gpu in doc["gpus"][:2]:
        for proc in gpu["processes"]:
            proc["user"] = current_user()
    return write_snapshot(tmp_path / "mine.json", doc)


def test_account_as_free_counts_my_own_processes_as_gone(tmp_path: Path, locks: Path) -> None:
    mine = str(_mine(tmp_path))
    before = run(["--snapshot", mine, "--auto", "8", "--", *SHOW], locks)
    assert before.returncode == 4  # my own kernels make GPUs 0 and 1 busy
    done = run(["--snapshot", mine, "--auto", "8", "--account-as-free", "--", *SHOW], locks)
    assert done.returncode == 0 and done.stdout == "8 0,1,2,3,4,5,6,7\n", done.stderr
    warned = [line for line in done.stderr.splitlines() if "warning" in line]
    assert warned == ["gpulaunch: warning: GPU 5 is partly used by bob (3% utilisation, 65.1 GiB free)"]  # not mine
    # A memory bar: 70 GiB free only once my 64.7 GiB count as free.
    need = run(["--snapshot", mine, "--auto", "1", "--min-free", "70GiB", "--exclude", "2-7", "--account-as-free",
                "--", *SHOW], locks)
    assert need.returncode == 0 and need.stdout == "1 0\n", need.stderr
    # The mapping shows what is really free there.
    assert "14.4 GiB free" in need.stderr
    # --account-as-free is only read as USER when the next word names a user: here `python3` runs.
    assert run(["--snapshot", mine, "--account-as-free", *SHOW[:1], "-c", "print('ran')"], locks).stdout == "ran\n"


def test_account_as_free_never_frees_more_than_the_gpu_has_less_what_the_driver_keeps(tmp_path: Path,
                                                                                      locks: Path) -> None:
    # NVML may list a process with more memory than is used (its context, counted twice): what it frees is
    # capped at the GPU's total less what the driver reserves, never above it (issue 28: the cap mutated
    # to total + reserved let a GPU seem to have 1 GiB more than it can ever give).
    doc = json.loads(snapshot.dump(snapshot.resolve("dgx-h100")))
    gpu = doc["gpus"][0]
    gpu.update(memory_reserved_mib=1024, memory_free_mib=20000)
    gpu["processes"][0].update(user=current_user(), used_memory_mib=80000)
    mine = str(write_snapshot(tmp_path / "mine.json", doc))
    most = gpu["memory_total_mib"] - 1024  # 80535 MiB

    def need(mib: int) -> int:
        return run(["--snapshot", mine, "--auto", "1", "--exclude", "1-7", "--min-free", f"{mib}MiB",
                    "--account-as-free", "-q", "--", "true"], locks).returncode

    assert (need(most), need(most + 1)) == (0, 4)


def test_account_as_free_for_named_users(locks: Path) -> None:
    done = run(["--snapshot", "dgx-h100", "--max-count", "8", "--account-as-free=alice,bob", "-q", "--", *SHOW],
               locks)
    assert done.returncode == 0 and done.stdout == "8 0,1,2,3,4,5,6,7\n", done.stderr
    # alice still computes there: -q does not hide it.
    assert "warning: GPU 0 is busy by alice" in done.stderr
    api = run(["--snapshot", "dgx-h100", "env", "--min-count", "7", "--account-as-free=alice", "--json"], locks)
    assert json.loads(api.stdout)["env"]["GPULAUNCH_GPUS"] == "0,1,2,3,4,5,6,7", api.stderr


def test_python_api_takes_them_too(tmp_path: Path, locks: Path) -> None:
    import gpu_launch
    from gpu_launch.errors import NotEnoughGpus, UsageError

    common = {"snapshot": "dgx-h100", "lock_dir": str(locks), "quiet": True}
    assert [d.index for d in gpu_launch.select(max_count=4, **common)] == [2, 3, 4, 6]  # type: ignore[arg-type]
    assert [d.index for d in gpu_launch.select(min_count=2, max_count=3, **common)] == [4, 6, 7]  # type: ignore[arg-type]
    assert len(gpu_launch.select(max_count=8, account_as_free=["alice", "bob"], **common)) == 8  # type: ignore[arg-type]
    mine = str(_mine(tmp_path))
    assert len(gpu_launch.select(8, account_as_free=True, snapshot=mine, lock_dir=str(locks), quiet=True)) == 8
    with gpu_launch.reserve(2, min_total_memory="80GB", snapshot="mixed-a100", lock_dir=str(locks), quiet=True) as r:
        assert r.env["GPULAUNCH_GPUS"] == "0,1"
    with pytest.raises(NotEnoughGpus):
        gpu_launch.select(min_count=7, **common)  # type: ignore[arg-type]
    with pytest.raises(UsageError) as exc:
        gpu_launch.select(2, max_count=3, **common)  # type: ignore[arg-type]
    assert exc.value.message == "n and max_count cannot be used together"
    with pytest.raises(UsageError):
        gpu_launch.select(account_as_free=3, **common)  # type: ignore[arg-type]


def test_config_and_env_defaults_for_the_constraints(tmp_path: Path, locks: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text('min-total-memory = "80GB"\n')
    done = run(["--snapshot", "mixed-a100", "--auto", "2", "--", *SHOW], env=env(locks, GPULAUNCH_CONFIG=str(config)))
    assert done.stdout == "2 0,1\n", done.stderr
    count = tmp_path / "count.toml"
    count.write_text("max-count = 2\n")
    refused = run(["--snapshot", "mixed-a100", "--", *SHOW], env=env(locks, GPULAUNCH_CONFIG=str(count)))
    assert refused.returncode == 7 and "'max-count' cannot have a default" in refused.stderr  # this launch's own


# -- other tools' option names (issue 36 item 4) ----------------------------------------------------------

@pytest.mark.parametrize("args, says", [
    # Was "did you mean --min-total-memory" (another thing), "--min-count", "--wide", "--json", and "--processes"
    # (the opposite of what gpustat's --no-processes asks).
    (["--min-free-memory", "20GiB", "--", "true"], "nvisel's --min-free-memory is --min-free SIZE here"),
    (["--min-free-memory=20GiB", "--", "true"], "nvisel's --min-free-memory is --min-free SIZE here"),
    (["--count", "2", "--", "true"], "nvisel's --count is --auto N here"),
    (["ls", "--id", "0"], "gpustat's --id is `gpulaunch ls --gpus SPEC` here"),
    (["ls", "--only", "0"], "nvitop's --only is `gpulaunch ls --gpus SPEC` here"),
    (["ls", "--no-processes"], "gpustat's --no-processes is plain `gpulaunch ls` here"),
    (["--max-load", "0.5", "--", "true"], "GPUtil's --max-load is --max-util PERCENT here: a percent"),
    (["-G", "2", "--", "true"], "task-spooler's -G is --auto N here"),
])
def test_other_tools_option_names_get_gpulaunchs_name_as_the_hint(args: list[str], says: str, locks: Path) -> None:
    result = run(["--snapshot", "dgx-h100", *args], locks)
    assert result.returncode == 2 and result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpulaunch: error: unknown option "), result.stderr
    assert says in lines[0] and "did you mean" not in lines[0], lines[0]


def test_a_typo_still_gets_the_spelling_hint() -> None:
    from gpu_launch.errors import UsageError
    from gpu_launch.options.args import parse

    with pytest.raises(UsageError) as caught:
        parse(["--min-fre", "20GiB", "--", "true"])
    assert caught.value.hint == "did you mean --min-free?"


def test_every_peer_option_is_unknown_here_and_shown_in_the_docs_table() -> None:
    """A peer's spelling that gpulaunch also had would never reach the table; each row is on the docs page."""
    from gpu_launch.options.args import _BY_NAME
    from gpu_launch.options.peers import PEERS

    page = (Path(__file__).resolve().parent.parent / "docs" / "choosing-gpus.md").read_text()
    rows = {tuple(c.strip() for c in line.strip("|").split("|")[:3]) for line in page.splitlines()
            if line.startswith("| ")}
    for peer in PEERS:
        assert peer.spelling not in _BY_NAME, peer
        ours = peer.ours if "`" in peer.ours else f"`{peer.ours}`" if peer.ours.startswith("-") else peer.ours
        assert (peer.tool, f"`{peer.spelling}`", ours) in rows, peer


def test_account_as_free_keeps_the_memory_others_use_on_a_shared_gpu(tmp_path: Path, locks: Path) -> None:
    # GPU 2 shared: my 10,000 MiB and bob's 50,000 MiB at 10 % utilisation. Counting mine as free leaves bob's
    # 61 % of the memory used: still busy, never taken (seed 39: a used memory dropped to "unknown" made it
    # only partly used, and bob's GPU was handed out).
    doc = json.loads(snapshot.dump(snapshot.resolve("dgx-h100")))
    gpu = doc["gpus"][2]
    gpu.update(utilization_gpu=10, memory_used_mib=60000, memory_free_mib=gpu["memory_total_mib"] - 60000)
    gpu["processes"] = [dict(doc["gpus"][5]["processes"][0], pid=4242, user=current_user(), used_memory_mib=10000),
                        dict(doc["gpus"][5]["processes"][0], pid=4343, user="bob", used_memory_mib=50000)]
    shared = str(write_snapshot(tmp_path / "shared.json", doc))
    done = run(["--snapshot", shared, "--auto", "1", "--exclude", "0,1,3-7", "--account-as-free", "--", *SHOW], locks)
    assert done.returncode == 4 and done.stdout == "", done.stderr
    assert "GPU 2: busy by bob" in done.stderr
    # Alone on it, my 10,000 MiB free it: idle, taken.
    gpu["processes"] = gpu["processes"][:1]
    gpu.update(memory_used_mib=10000, memory_free_mib=gpu["memory_total_mib"] - 10000)
    alone = str(write_snapshot(tmp_path / "alone.json", doc))
    took = run(["--snapshot", alone, "--auto", "1", "--exclude", "0,1,3-7", "--account-as-free", "--", *SHOW], locks)
    assert took.returncode == 0 and took.stdout == "1 2\n", took.stderr
