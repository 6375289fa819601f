"""The report of benchmarks/mutation.py: kill rates per module and package, the survivors, and the
equivalent mutants listed in benchmarks/mutation_survivors.md (which the rates count apart).

Run through ``python benchmarks/mutation.py --report``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

SURVIVORS_FILE = Path(__file__).resolve().parent / "mutation_survivors.md"


# --- equivalent survivors --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Equivalent:
    module: str
    line: str
    mutant: str
    reason: str


def _cell(text: str) -> str:
    return text.strip().strip("`").replace("\\|", "|")


def load_equivalents() -> list[Equivalent]:
    """The table rows of mutation_survivors.md: | module | `line` | `mutated line` | reason | (but those of its
    "Not equivalent, and left alive" section; a later session's section after it counts again)."""
    rows = []
    if not SURVIVORS_FILE.exists():
        return rows
    alive = False
    for text in SURVIVORS_FILE.read_text().splitlines():
        if text.startswith("## "):  # "Not equivalent, and left alive" up to the next heading: counted as survivors
            alive = text.startswith("## Not equivalent")
        if alive:
            continue
        cells = re.split(r"(?<!\\)\|", text.strip())[1:-1] if text.startswith("|") else []
        if len(cells) == 4 and cells[0].strip().endswith(".py") and cells[1].strip().startswith("`"):
            rows.append(Equivalent(cells[0].strip(), _cell(cells[1]), _cell(cells[2]), cells[3].strip()))
    return rows


def _diff_lines(diff: str) -> tuple[str, str]:
    """The first line the mutant changed, before and after (stripped), from Cosmic Ray's diff."""
    def first(sign: str) -> str:
        lines = [d[1:] for d in diff.splitlines() if d.startswith(sign) and not d.startswith(sign * 3)]
        return lines[0].strip() if lines else ""
    return first("-"), first("+")


def rerun_survivors(db_path: Path, module: str) -> int:
    """Forget the survivors' results, so that the next exec runs them again (after new tests); those
    listed as equivalent keep theirs (no test can kill them)."""
    from cosmic_ray.work_db import WorkDB, WorkResultStorage, use_db
    from cosmic_ray.work_item import TestOutcome

    equivalents = load_equivalents()
    with use_db(str(db_path), WorkDB.Mode.open) as db:
        with db._session_maker.begin() as session:  # no public call to forget one result
            rows = session.query(WorkResultStorage).where(WorkResultStorage.test_outcome == TestOutcome.SURVIVED).all()
            again = [r for r in rows if not any(e.module == module and (e.line, e.mutant) == _diff_lines(r.diff or "")
                                                for e in equivalents)]
            for row in again:
                session.delete(row)
    return len(again)


# --- report ----------------------------------------------------------------------------------------------------------

@dataclass
class Tally:
    killed: int = 0
    survived: int = 0
    equivalent: int = 0
    skipped: int = 0
    pending: int = 0
    survivors: list[str] = field(default_factory=list)

    def add(self, other: Tally) -> None:
        self.killed += other.killed
        self.survived += other.survived
        self.equivalent += other.equivalent
        self.skipped += other.skipped
        self.pending += other.pending

    def rate(self, with_equivalent: bool) -> str:
        done = self.killed + self.survived + self.equivalent
        if not done:
            return "-"
        killed = self.killed + (self.equivalent if with_equivalent else 0)
        return f"{100 * killed / done:.1f} %"


def tally_module(db_path: Path, module: str, equivalents: list[Equivalent]) -> Tally:
    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import TestOutcome, WorkerOutcome

    tally = Tally()
    with use_db(str(db_path), WorkDB.Mode.open) as db:
        tally.pending = sum(1 for _ in db.pending_work_items)
        for item, result in db.completed_work_items:
            if result.worker_outcome == WorkerOutcome.SKIPPED:
                tally.skipped += 1
                continue
            if result.test_outcome != TestOutcome.SURVIVED:
                tally.killed += 1
                continue
            mutation = item.mutations[0]
            line_no = mutation.start_pos[0]
            line, mutant = _diff_lines(result.diff or "")
            if any(e.module == module and e.line == line and e.mutant == mutant for e in equivalents):
                tally.equivalent += 1
                continue
            tally.survived += 1
            esc = lambda t: t.strip().replace("|", "\\|")  # noqa: E731
            tally.survivors.append(f"{module}:{line_no} {mutation.operator_name.removeprefix('core/')}\n"
                                   f"| {module} | `{esc(line)}` | `{esc(mutant)}` | ? |")
    return tally


def report(sessions: Path, modules: list[str]) -> str:
    equivalents = load_equivalents()
    lines = [f"{'module':34} {'killed':>7} {'surv.':>6} {'equiv.':>6} {'left':>5}  {'kill rate':>9}  {'+equiv.':>8}"]
    totals: dict[str, Tally] = {}
    survivors: list[str] = []
    for module in modules:
        db = sessions / (module.replace("/", ".").removesuffix(".py") + ".sqlite")
        if not db.exists():
            continue
        t = tally_module(db, module, equivalents)
        totals.setdefault(module.split("/")[0], Tally()).add(t)
        survivors += t.survivors
        lines.append(f"{module:34} {t.killed:7} {t.survived:6} {t.equivalent:6} {t.pending:5}  "
                     f"{t.rate(False):>9}  {t.rate(True):>8}")
    lines.append("")
    everything = Tally()
    for package, t in totals.items():
        everything.add(t)
        lines.append(f"{package + '/':34} {t.killed:7} {t.survived:6} {t.equivalent:6} {t.pending:5}  "
                     f"{t.rate(False):>9}  {t.rate(True):>8}")
    lines.append(f"{'all':34} {everything.killed:7} {everything.survived:6} {everything.equivalent:6} "
                 f"{everything.pending:5}  {everything.rate(False):>9}  {everything.rate(True):>8}")
    (sessions / "survivors.txt").write_text("\n".join(survivors) + "\n")
    lines.append(f"\n{len(survivors)} survivors not listed as equivalent: {sessions / 'survivors.txt'}")
    return "\n".join(lines)
