"""Mutation testing of the package, room by room (issues 28, 37), with Cosmic Ray.

``pip install -e '.[test,mutation]'`` once, then::

    python benchmarks/mutation.py                         # every package named in PACKAGES (hours on 2 cores)
    python benchmarks/mutation.py reservations/acquire.py choose  # some modules or packages (under gpu_launch/)
    python benchmarks/mutation.py --sample 0.3 reservations # a seeded 30 % of each module's mutants
    python benchmarks/mutation.py reservations:0.1 fit:0.02 # a sample for each
    python benchmarks/mutation.py --report                # the table and the survivors of the last run

Not part of the default test run: it runs the tests once per mutant. How it works:

* The tree (``git ls-files``: the code, the tests, the docs they check) is copied to a scratch
  directory, one copy per ``--jobs``; Cosmic Ray rewrites a module there in place, runs the module's
  tests, and puts it back. The tests run ``python -m gpu_launch`` in subprocesses with
  ``PYTHONPATH`` set to their own tree's root, and this script puts the copy first on ``PYTHONPATH``
  for everything, so every child of a test runs the mutant too. No ``.pyc`` is written
  (Cosmic Ray sets ``PYTHONDONTWRITEBYTECODE``) and the copy has none, so a mutant is never shadowed
  by a stale cache.
* Each module gets the tests that exercise it (``TESTS`` below: the fast direct tests first, then
  the command-line ones), run with ``pytest -x`` so a mutant that fails one stops there.
* The operators are the plausible slips, not every operator for every other: ``+``/``-``,
  ``*``/``/``/``//``, the boundary of each comparison (``<``/``<=``, ``>``/``>=``), ``==``/``!=``,
  ``is``/``is not``, ``and``/``or``, ``True``/``False``, a ``not`` added or dropped, a number off by
  one, ``break``/``continue``, a loop that never runs, an exception type changed (``KEEP_OPERATORS``).
  Mutants inside annotations are dropped (``from __future__ import annotations``: never evaluated).
* Survivors that change no behaviour are listed, with the reason, in
  ``benchmarks/mutation_survivors.md`` (module, the line's text before and after, so that line
  numbers may drift); the report counts them as equivalent, apart from the killed.

The kill rate is ``killed / (killed + survived)``, with and without the listed equivalents; a mutant
whose tests time out counts as killed (Cosmic Ray's own rule: the mutant hung or looped).
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from mutation_report import report, rerun_survivors  # beside this file (python benchmarks/mutation.py)
from mutation_tests import MODULE_TESTS, TESTS  # beside it too: each package's and module's tests

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("reservations", "placing", "sweeps", "choose", "fit", "modelfile", "cluster", "jobs", "run", "commands",
            "views", "in_process", "hardware", "options", "base")
DEFAULT_WORKDIR = Path(tempfile.gettempdir()) / "gpulaunch-mutation"

#: Cosmic Ray operators kept (regular expressions, matched from the start of the name).
KEEP_OPERATORS = (
    r"core/ReplaceBinaryOperator_(Add_Sub|Sub_Add|Mul_Div|Div_Mul|Div_FloorDiv|FloorDiv_Div|FloorDiv_Mul|Mod_FloorDiv"
    r"|Pow_Mul|LShift_RShift|RShift_LShift|BitOr_BitAnd|BitAnd_BitOr|BitXor_BitOr)$",
    r"core/ReplaceComparisonOperator_(Lt_LtE|LtE_Lt|Gt_GtE|GtE_Gt|Eq_NotEq|NotEq_Eq|Is_IsNot|IsNot_Is)$",
    r"core/ReplaceUnaryOperator_(Delete_Not|USub_UAdd)$",
    r"core/(AddNot|NumberReplacer|ReplaceAndWithOr|ReplaceOrWithAnd|ReplaceTrueWithFalse|ReplaceFalseWithTrue"
    r"|ReplaceBreakWithContinue|ReplaceContinueWithBreak|ZeroIterationForLoop|ExceptionReplacer)$",
)

#: ``--quick``: only a module's own tests (MODULE_TESTS), else its package's first QUICK_FILES; a
#: survivor of a quick run is then run against the whole selection (``--rerun-survivors``) or the suite
QUICK_FILES = 2
QUICK = False


def module_tests(module: str) -> list[str]:
    """The test files for ``module`` (``reservations/acquire.py``), its own first, without repeats."""
    package = module.split("/")[0]
    if QUICK:
        chosen = MODULE_TESTS.get(module) or TESTS[package][:QUICK_FILES]
        return [t for t in dict.fromkeys(chosen) if (ROOT / t).exists()][:QUICK_FILES]
    chosen = MODULE_TESTS.get(module, []) + TESTS[package]
    return [t for t in dict.fromkeys(chosen) if (ROOT / t).exists()]  # a room's edge file may not exist yet


def modules_for(targets: list[str]) -> list[str]:
    """Module paths under gpu_launch/ for packages (``fit``) and modules (``fit/kv.py``) named
    (a ``:FRACTION`` after a target is its sample, :func:`samples`)."""
    found: list[str] = []
    for target in targets or list(PACKAGES):
        target = target.split(":")[0]
        path = ROOT / "gpu_launch" / target
        if path.is_dir():
            found += sorted(str(p.relative_to(ROOT / "gpu_launch")) for p in path.rglob("*.py"))
        elif path.is_file() and target.split("/")[0] in PACKAGES:
            found.append(target)
        else:
            raise SystemExit(f"mutation.py: {target!r} is not a module or package under gpu_launch/{set(PACKAGES)}")
    return [m for m in dict.fromkeys(found) if (ROOT / "gpu_launch" / m).read_text().strip()]


def samples(targets: list[str], default: float | None) -> dict[str, float | None]:
    """Each module's sample: ``reservations:0.05`` samples 5 % of each reservations/ module, ``reservations/acquire.py:1`` all;
    None where none was asked for (a new session runs every mutant, an earlier one keeps its sample)."""
    chosen: dict[str, float | None] = {}
    named: set[str] = set()  # modules named themselves: their own fraction beats their package's
    for target in targets or list(PACKAGES):
        name, _, fraction = target.partition(":")
        for module in modules_for([name]):
            if module == name or module not in named:
                chosen[module] = float(fraction) if fraction else default
            if module == name:
                named.add(module)
    return chosen


# --- one module ------------------------------------------------------------------------------------------------------

def _annotation_lines(source: str) -> set[tuple[int, int]]:
    """(line, column) spans covered by annotations; a mutant that starts in one is never evaluated."""
    spans: set[tuple[int, int]] = set()

    def add(node: ast.AST | None) -> None:
        if node is None:
            return
        for sub in ast.walk(node):
            if hasattr(sub, "lineno"):
                for line in range(sub.lineno, sub.end_lineno + 1):  # type: ignore[attr-defined]
                    start = sub.col_offset if line == sub.lineno else 0
                    end = sub.end_col_offset if line == sub.end_lineno else 10**6  # type: ignore[attr-defined]
                    spans.update((line, c) for c in range(start, min(end, start + 400)))
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            add(node.returns)
            for arg in node.args.args + node.args.kwonlyargs + node.args.posonlyargs:
                add(arg.annotation)
            add(node.args.vararg and node.args.vararg.annotation)
            add(node.args.kwarg and node.args.kwarg.annotation)
        elif isinstance(node, ast.AnnAssign):
            add(node.annotation)
    return spans


def _place(item) -> tuple:
    """Where a mutant is, to order the mutants before the seeded shuffle. Not the job id: Cosmic Ray's init
    draws it with ``uuid.uuid4()`` (cosmic_ray/commands/init.py, ``_all_work_items``), so an order by job id
    drew a different sample at each init of the same seed (the seed-39 sample could not be drawn again)."""
    m = item.mutations[0]
    return (tuple(m.start_pos), tuple(m.end_pos), m.operator_name, m.occurrence,
            json.dumps(m.operator_args, sort_keys=True, default=str))


def _filter(db_path: Path, tree: Path, module: str, sample: float, seed: int) -> dict[str, int]:
    """Skip operators not kept, mutants in annotations, and (with ``sample`` < 1) the unsampled."""
    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import WorkResult, WorkerOutcome

    keep = re.compile("|".join(f"(?:{k})" for k in KEEP_OPERATORS))
    spans = _annotation_lines((tree / "gpu_launch" / module).read_text())
    counts = {"operator": 0, "annotation": 0, "unsampled": 0, "pending": 0}
    with use_db(str(db_path), WorkDB.Mode.open) as db:
        pending = []
        for item in list(db.pending_work_items):
            mutation = item.mutations[0]
            why = ("operator" if not keep.match(mutation.operator_name)
                   else "annotation" if tuple(mutation.start_pos) in spans else None)
            if why:
                counts[why] += 1
                db.set_result(item.job_id, WorkResult(output=f"filtered: {why}", worker_outcome=WorkerOutcome.SKIPPED))
            else:
                pending.append(item)
        if sample < 1:
            # a fixed shuffle, then its first share: a larger --sample runs the same mutants and more
            order = sorted(pending, key=_place)
            random.Random(f"{seed}:{module}").shuffle(order)
            chosen = set(i.job_id for i in order[:round(len(order) * sample)])
            for item in pending:
                if item.job_id not in chosen:
                    counts["unsampled"] += 1
                    db.set_result(item.job_id, WorkResult(output="filtered: unsampled",
                                                          worker_outcome=WorkerOutcome.SKIPPED))
            pending = [i for i in pending if i.job_id in chosen]
        counts["pending"] = len(pending)
    return counts


def _extend_sample(db_path: Path, module: str, sample: float, seed: int) -> int:
    """Grow an earlier session's sample to ``sample``: the next mutants of the same shuffled order
    (as :func:`_filter` drew it), so the mutants already run stay part of it."""
    from cosmic_ray.work_db import WorkDB, WorkResultStorage, use_db

    with use_db(str(db_path), WorkDB.Mode.open) as db:
        results = dict(db.results)
        items = [i for i in db.work_items
                 if i.job_id not in results or results[i.job_id].output != "filtered: operator"
                 and results[i.job_id].output != "filtered: annotation"]
        order = sorted(items, key=_place)
        random.Random(f"{seed}:{module}").shuffle(order)
        wanted = {i.job_id for i in order[:round(len(order) * sample)]}
        again = [j for j in wanted if j in results and results[j].output == "filtered: unsampled"]
        with db._session_maker.begin() as session:
            for row in session.query(WorkResultStorage).where(WorkResultStorage.job_id.in_(again)):
                session.delete(row)
    return len(again)


def _env(tree: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(tree) + os.pathsep + str(tree / "tests") + (os.pathsep + env["PYTHONPATH"]
                                                                       if env.get("PYTHONPATH") else "")
    return env


def _config(module: str, timeout: float) -> str:
    return ("[cosmic-ray]\n"
            f"module-path = {json.dumps('gpu_launch/' + module)}\n"
            f"timeout = {timeout:.0f}\n"
            "excluded-modules = []\n"
            f"test-command = {json.dumps(_test_command(module))}\n"
            "[cosmic-ray.distributor]\nname = \"local\"\n")


def _test_command(module: str) -> str:
    return " ".join([sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *module_tests(module)])


def run_module(module: str, tree: Path, sessions: Path, sample: float | None, seed: int, log) -> None:
    """Init (unless a session exists: then resume), filter, baseline, exec one module's session."""
    name = module.replace("/", ".").removesuffix(".py")
    db = sessions / f"{name}.sqlite"
    config = sessions / f"{name}.toml"
    env = _env(tree)
    started = time.monotonic()
    if not db.exists():
        config.write_text(_config(module, 120.0))
        subprocess.run([_tool("cosmic-ray"), "init", str(config), str(db)], cwd=tree, env=env, check=True,
                       stdout=subprocess.DEVNULL)
        counts = _filter(db, tree, module, 1.0 if sample is None else sample, seed)
        dropped = (f"(dropped: {counts['operator']} by operator, {counts['annotation']} in annotations, "
                   f"{counts['unsampled']} unsampled)")
        if not counts["pending"]:  # nothing sampled: no baseline is run for it (a larger sample resumes)
            log(f"{module}: no mutant to run {dropped}")
            return
        # the baseline only once something is to run: a small sample of a package spares most modules' runs
        seconds = _baseline(module, tree, sessions, env, log)
        if seconds is None:
            db.unlink()
            return
        config.write_text(_config(module, max(120.0, 4 * seconds)))
        log(f"{module}: baseline {seconds:.0f} s, {counts['pending']} mutants to run {dropped}")
    else:  # resumed (or survivors run again): with the tests chosen now, and a larger sample if asked
        added = _extend_sample(db, module, sample, seed) if sample is not None else 0
        if added:
            log(f"{module}: {added} more mutants sampled")
        text = re.sub(r"(?m)^test-command = .*$", lambda _m: f"test-command = {json.dumps(_test_command(module))}",
                      config.read_text())
        config.write_text(text)
    subprocess.run([_tool("cosmic-ray"), "exec", str(config), str(db)], cwd=tree, env=env, check=True)
    log(f"{module}: done in {time.monotonic() - started:.0f} s")


_BASELINES = threading.Lock()


def _baseline(module: str, tree: Path, sessions: Path, env: dict[str, str], log) -> float | None:
    """Seconds the module's tests take unmutated (None: they fail, so no mutant can be judged); one
    run per test selection, kept in ``baselines.json``, since modules of a package share one."""
    import hashlib

    command = _test_command(module)
    tests = hashlib.sha1(b"".join((tree / t).read_bytes() for t in module_tests(module)))
    key = f"{command} {tests.hexdigest()}"  # the tests as they are now: an edited test is run again
    store = sessions / "baselines.json"
    with _BASELINES:
        known = json.loads(store.read_text()) if store.exists() else {}
    if key in known:
        return known[key]
    started = time.monotonic()
    base = subprocess.run(command.split(), cwd=tree, env=env, capture_output=True, text=True)
    if base.returncode != 0:  # once more: a test of real processes may miss a deadline on a loaded machine
        log(f"{module}: its tests failed unmutated, once more:\n{base.stdout[-600:]}")
        started = time.monotonic()
        base = subprocess.run(command.split(), cwd=tree, env=env, capture_output=True, text=True)
    if base.returncode != 0:
        log(f"{module}: its tests fail unmutated, skipped:\n{base.stdout[-2000:]}")
        return None
    seconds = time.monotonic() - started
    with _BASELINES:
        known = json.loads(store.read_text()) if store.exists() else {}
        known[key] = seconds
        store.write_text(json.dumps(known, indent=1))
    return seconds


def _tool(name: str) -> str:
    return str(Path(sys.executable).parent / name)


def make_tree(dest: Path) -> Path:
    """A copy of the tracked and untracked-but-not-ignored files, no caches."""
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, capture_output=True,
                           check=True).stdout.decode().split("\0")
    for rel in filter(None, files):
        src = ROOT / rel
        if "__pycache__" in rel or not src.is_file():
            continue
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dest / rel)
    return dest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("targets", nargs="*", help="packages or modules under gpu_launch/ (default: every "
                                                   "package in PACKAGES), each with :FRACTION for its own --sample")
    parser.add_argument("--sample", type=float, default=None,
                        help="fraction of each module's mutants to run (default: all, or an earlier session's)")
    parser.add_argument("--seed", type=int, default=28)
    parser.add_argument("--jobs", type=int, default=1, help="modules run at once, each in its own copy")
    parser.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR, help=f"default {DEFAULT_WORKDIR}")
    parser.add_argument("--fresh", action="store_true", help="forget earlier sessions of these modules")
    parser.add_argument("--quick", action="store_true",
                        help=f"each module against its first {QUICK_FILES} test files only (a sample on a shared "
                             "machine); rerun the survivors without it")
    parser.add_argument("--report", action="store_true", help="only print the table of the sessions so far")
    parser.add_argument("--rerun-survivors", action="store_true",
                        help="run the earlier sessions' survivors again (after new tests), nothing else")
    args = parser.parse_args(argv)
    global QUICK
    QUICK = args.quick
    modules = modules_for(args.targets)
    fractions = samples(args.targets, args.sample)
    if args.rerun_survivors:
        fractions = dict.fromkeys(fractions)  # the survivors only: no sample grows
    sessions = args.workdir / "sessions"
    sessions.mkdir(parents=True, exist_ok=True)
    if args.report:
        print(report(sessions, modules))
        return 0
    try:
        import cosmic_ray  # noqa: F401
    except ImportError:
        print("mutation.py: Cosmic Ray is not installed (hint: pip install -e '.[mutation]')", file=sys.stderr)
        return 2
    if args.fresh:
        for m in modules:
            (sessions / (m.replace("/", ".").removesuffix(".py") + ".sqlite")).unlink(missing_ok=True)
    if args.rerun_survivors:
        for m in modules:
            db = sessions / (m.replace("/", ".").removesuffix(".py") + ".sqlite")
            if db.exists():
                print(f"{m}: {rerun_survivors(db, m)} survivors to run again")
    lock = threading.Lock()

    def log(text: str) -> None:
        with lock:
            print(time.strftime("%H:%M:%S"), text, flush=True)

    queue = list(modules)

    def worker(n: int) -> None:
        tree = args.workdir / f"tree{n}"
        shutil.rmtree(tree, ignore_errors=True)
        make_tree(tree)
        while True:
            with lock:
                if not queue:
                    return
                module = queue.pop(0)
            try:
                run_module(module, tree, sessions, fractions[module], args.seed, log)
            except subprocess.CalledProcessError as exc:
                log(f"{module}: cosmic-ray failed ({exc})")

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(max(1, args.jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(report(sessions, modules))
    return 0


if __name__ == "__main__":
    sys.exit(main())
