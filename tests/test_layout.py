"""The package's layers import one way only: cli → commands (and the Python API, api, with its machinery
in_process) → reservations, placing, sweeps, cluster, jobs (detached jobs), options (and fit's plan
conductor) → views, run, choose, fit → hardware, modelfile → base, errors (docs/design.md). Every import counts, also those inside functions
(they are the lazy imports that keep start-up fast, but they are dependencies all the same)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "gpu_launch"

#: lower number = higher layer; a module may import its own layer's package or any lower layer
LAYERS = {
    "cli": 0, "__main__": 0,
    "commands": 1, "api": 1, "in_process": 1,
    "reservations": 2, "placing": 2, "sweeps": 2, "options": 2, "cluster": 2, "jobs": 2,
    "views": 3, "run": 3, "choose": 3, "fit": 3,
    "hardware": 4, "modelfile": 4,
    # A room may hold its stage's conductor a layer up: fit/model_plan conducts a plan as placing/pick
    # conducts a launch (it asks pick which GPUs --fit would get), so it sits on pick's layer, and no
    # other module of fit/ may import it.
    "fit.model_plan": 2,
    "base": 5, "errors": 5, "__init__": 5,
}


#: The public façade: ``gpu_launch.use()`` & co. are re-exported by the package (lazily, on first
#: access). It is the only import allowed to point up; nothing below uses it, so it makes no cycle.
FACADE = {("gpu_launch", "gpu_launch.api")}


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, root: Path) -> set[str]:
    """Every gpu_launch module that ``path`` imports (``from gpu_launch.x import y`` counts x.y when
    x.y is a module, else x)."""
    found: set[str] = set()
    top = root.name
    for node in ast.walk(ast.parse(path.read_text("utf-8"))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == top)
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == top:
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                rel = Path(*sub.split(".")[1:])
                is_module = (root / rel).with_suffix(".py").exists() or (root / rel / "__init__.py").exists()
                found.add(sub if is_module else node.module)
    return found


def unit(module: str) -> str:
    """The key of LAYERS that ``module`` belongs to: its room, or the module itself where LAYERS names it."""
    parts = module.split(".")
    if len(parts) < 2:
        return "__init__"
    return ".".join(parts[1:3]) if ".".join(parts[1:3]) in LAYERS else parts[1]


def layer(module: str) -> int | None:
    return LAYERS.get(unit(module))


def violations(root: Path) -> list[str]:
    """``importer -> imported`` for each import that goes up (or into a package with no layer)."""
    bad = []
    for path in sorted(root.rglob("*.py")):
        me = module_name(path, root)
        mine = layer(me)
        if mine is None:
            bad.append(f"{me}: in no layer (add its package to LAYERS)")
            continue
        for target in sorted(imports_of(path, root)):
            theirs = layer(target)
            same_package = unit(target) == unit(me)
            if (me, target) in FACADE:
                continue
            if theirs is None or (theirs < mine and not same_package):
                bad.append(f"{me} -> {target}")
    return bad


def cycles(root: Path) -> list[list[str]]:
    """Import cycles between modules (lazy imports included)."""
    graph = {name: {t for t in imports_of(p, root) if (name, t) not in FACADE}
             for p in root.rglob("*.py") for name in [module_name(p, root)]}
    seen: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str, stack: list[str]) -> None:
        if node in stack:
            found.append(stack[stack.index(node):] + [node])
            return
        if node in seen:
            return
        seen.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt != node:
                visit(nxt, [*stack, node])

    for start in sorted(graph):
        visit(start, [])
    return found


def test_no_layer_imports_a_higher_one() -> None:
    edges = sum(len(imports_of(p, PACKAGE)) for p in PACKAGE.rglob("*.py"))
    assert edges > 100  # the walk did see the package's imports
    assert violations(PACKAGE) == []


def test_no_import_cycles() -> None:
    assert cycles(PACKAGE) == []


def test_every_package_is_in_a_layer() -> None:
    packages = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert packages <= LAYERS.keys()


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "gpu_launch"
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_the_check_catches_an_upward_import_even_inside_a_function(tmp_path: Path) -> None:
    root = _tree(tmp_path, {
        "__init__.py": "", "hardware/__init__.py": "", "commands/__init__.py": "",
        "commands/ls.py": "from gpu_launch.hardware import model\n",
        "hardware/model.py": "def f():\n    from gpu_launch.commands import ls\n",
    })
    assert violations(root) == ["gpu_launch.hardware.model -> gpu_launch.commands.ls"]


def test_a_conductor_named_a_layer_up_may_not_be_imported_by_its_own_room(tmp_path: Path) -> None:
    root = _tree(tmp_path, {
        "__init__.py": "", "fit/__init__.py": "", "placing/__init__.py": "",
        "fit/model_plan.py": "from gpu_launch.placing import pick\nfrom gpu_launch.fit import plan\n",
        "placing/pick.py": "from gpu_launch.fit import plan\n",
        "fit/plan.py": "def f():\n    from gpu_launch.fit import model_plan\n",
    })
    assert violations(root) == ["gpu_launch.fit.plan -> gpu_launch.fit.model_plan"]


def test_the_check_catches_a_cycle(tmp_path: Path) -> None:
    root = _tree(tmp_path, {
        "__init__.py": "", "choose/__init__.py": "",
        "choose/select.py": "from gpu_launch.choose import ranking\n",
        "choose/ranking.py": "from gpu_launch.choose.select import availability\n",
    })
    assert cycles(root)


#: A module holds one idea; past this many lines it holds several (docs/design.md). Tests, fakes and
#: generated files are not modules of the package and may be longer.
MAX_MODULE_LINES = 450


def test_no_module_of_the_package_or_its_benchmarks_is_over_450_lines() -> None:
    roots = (PACKAGE, PACKAGE.parent / "benchmarks")
    long = {str(p.relative_to(PACKAGE.parent)): n for root in roots for p in root.rglob("*.py")
            if (n := len(p.read_text("utf-8").splitlines())) > MAX_MODULE_LINES}
    assert long == {}, "split these along their seams (one idea a module)"
