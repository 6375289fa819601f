"""Placeholders in the command: ``{n}``, ``{gpus}`` and the plan's become what was chosen.

``gpulaunch --fit 60GiB -- vllm serve M --tensor-parallel-size {n}`` runs vLLM with the number of
GPUs ``--fit`` chose. The rules (docs/choosing-gpus.md, "Placeholders"), word by word: a launch's
arguments and a ``--no-shell`` job line's are its words; an ``each`` job line is shell text, whose
words are as ``/bin/sh`` splits it (:mod:`gpu_launch.run.shellwords`: quotes removed, operators such
as ``>``, ``|``, ``&&`` between words), and a replaced word is written back quoted for the shell.

* A word that is exactly ``{name}`` is replaced, ``name`` from :data:`PLACEHOLDERS`.
* So is the value of a word ``KEY={name}``: an option's (``--tp={n}``, ``-n={n}``), a variable's
  (``NPROC={n}``) or a dotted key's (Hydra's ``trainer.devices={n}``, ``+x.y={n}``); MLC-LLM's
  ``--overrides "k={tp};k2={ctx}"`` is read as such words, one per ``;``.
* ``{{name}}`` is the escape for the literal ``{name}``, wherever it is (one level of braces off:
  ``{{{n}}}`` gives ``{{n}}``).
* Any other ``{name}`` inside a word (``out-{n}.txt``, ``python -c 'print({n})'``) is refused before
  anything is chosen, reserved or waited for (:func:`check`, exit 2): it would reach the command as
  the literal ``{n}``.
* Not placeholders, so never touched: ``${name}`` (the shell's own), braces around anything not in
  the table (``{a,b}``, ``awk '{print $1}'``, ``{}``), unbalanced braces (``{{n}``), a launch's
  program name (``argv[0]``), and a shell line's ``#`` comment.

``{n}`` is the number of devices chosen, ``{gpus}`` the logical list the command sees, ``0,1,…,n-1``
(CUDA numbers them from 0 inside CUDA_VISIBLE_DEVICES; the physical numbers are in GPULAUNCH_GPUS).
With ``--fit MODEL`` the plan fills ``{tp}``, ``{pp}``, ``{gpu_layers}``, ``{tensor_split}``,
``{ctx}``, ``{gpu_mem_util}`` and ``{max_memory}``; with ``--nodes`` each node fills ``{nnodes}``,
``{node_rank}``, ``{head_addr}``, ``{head_port}`` and ``{pp}``; an ``each`` job fills ``{index}`` (its place
among the commands, from 0: Slurm's array task id less one under ``--slurm``) and ``{index1}`` (from 1, the N
of its job-N.log). Where nothing fills one, a command
that uses it is refused (:class:`Unfilled`, saying what would). A new placeholder is one more row of
:data:`PLACEHOLDERS`, saying what fills it.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping, Sequence

from gpu_launch.errors import UsageError
from gpu_launch.base.records import dataclass

__all__ = ["Placeholder", "PLACEHOLDERS", "NAMES", "MODEL_NAMES", "NODE_NAMES", "EACH_NAMES", "job_values", "Unfilled", "substitute", "fill_only",
           "substitute_shell", "check", "check_shell", "protect", "names_used", "model_names_used", "node_names_used"]


@dataclass(frozen=True)
class Placeholder:
    name: str
    means: str
    #: what fills it, for the refusal of a command that uses it where nothing does ("" : every launch)
    filled_when: str = ""


_MODEL = "--fit names a model"
_NODES = "--nodes is given"
_EACH = "`each` runs a job line"
PLACEHOLDERS: tuple[Placeholder, ...] = (
    Placeholder("n", "the number of GPUs chosen"),
    Placeholder("gpus", "the logical list the command sees, 0,1,…,n-1"),
    Placeholder("tp", "tensor-parallel size (with --nodes and no model: the GPUs a node)", f"{_MODEL} or {_NODES}"),
    Placeholder("pp", "pipeline stages (the plan's; with --nodes, one a node)", f"{_MODEL} or {_NODES}"),
    Placeholder("gpu_layers", "llama.cpp -ngl: layers on the GPUs, the output layer counting as one", _MODEL),
    Placeholder("tensor_split", "layers per GPU (llama.cpp -ts)", _MODEL),
    Placeholder("n_cpu_moe", "llama.cpp --n-cpu-moe: the fewest first layers whose MoE experts stay on the CPU",
                _MODEL),
    Placeholder("ctx", "the context sized for", _MODEL),
    Placeholder("gpu_mem_util", "vLLM's --gpu-memory-utilization", _MODEL),
    Placeholder("max_memory", "Accelerate's max_memory map as JSON, by the child's device numbers", _MODEL),
    Placeholder("nproc", "a training launch's processes a node (one a GPU)", _MODEL),
    Placeholder("micro_batch", "a training launch's largest per-device batch that fits the chosen GPUs", _MODEL),
    Placeholder("nnodes", "the nodes of a --nodes run", _NODES),
    Placeholder("node_rank", "this node's rank, from 0", _NODES),
    Placeholder("head_addr", "the head node's address", _NODES),
    Placeholder("head_port", "the head node's port", _NODES),
    Placeholder("index", "an each job's place among the commands, from 0 (Slurm's array task id, less one)", _EACH),
    Placeholder("index1", "an each job's number, from 1 (its job-N.log)", _EACH),
)
_BY_NAME = {p.name: p for p in PLACEHOLDERS}
NAMES = tuple(p.name for p in PLACEHOLDERS if not p.filled_when)  # every launch and job fills these
MODEL_NAMES = tuple(p.name for p in PLACEHOLDERS if _MODEL in p.filled_when)  # the plan's (--fit MODEL)
NODE_NAMES = tuple(p.name for p in PLACEHOLDERS if p.filled_when == _NODES)  # a node's own (--nodes); {pp} too
EACH_NAMES = tuple(p.name for p in PLACEHOLDERS if p.filled_when == _EACH)  # an each job's own


def job_values(number: int) -> dict[str, str]:
    """``{index}`` and ``{index1}`` of the ``number``-th (1-based) job of an ``each``."""
    return {"index": str(number - 1), "index1": str(number)}

# Compiled on first use (re caches them), i.e. only for a word with a brace in it.
#: ``{name}`` with any number of braces; a ``$`` before it makes it the shell's ``${name}``
_GROUP = r"(\$?)(\{+)([A-Za-z_][A-Za-z0-9_]*)(\}+)"
_WHOLE = r"(\{+)([A-Za-z_][A-Za-z0-9_]*)(\}+)"
#: ``KEY=`` of an option (``--tp=``), a variable (``NPROC=``) or a dotted key (``trainer.devices=``, ``+x.y=``)
_KEY = r"(?:--?|\+\+?)?[A-Za-z_][A-Za-z0-9_.-]*="
_SHELL_SAFE = r"(?a:[\w@%+=:,./-]+|\{+[A-Za-z_][A-Za-z0-9_]*\}+)"
_SHOWN = 40  # characters of a refused word shown in the error line


class Unfilled(UsageError):
    """A placeholder that nothing fills here (``{tp}`` without ``--fit MODEL``); ``name`` says which."""

    def __init__(self, message: str, hint: str | None = None, name: str = "") -> None:
        super().__init__(message, hint=hint)
        self.name = name


def _values(count: int, *more: Mapping[str, str] | None) -> dict[str, str]:
    values = {"n": str(count), "gpus": ",".join(str(i) for i in range(count))}
    for given in more:
        values.update((k, v) for k, v in (given or {}).items() if k in _BY_NAME and k not in NAMES)
    return values


class _Filler:
    """Fills one word at a time with ``values``; a placeholder in the table without a value, or one
    inside a word, raises (UsageError: exit 2)."""

    def __init__(self, values: Mapping[str, str], what: str = "argument") -> None:
        self.values = values
        self.what = what  # "argument" or "word", for the error line
        self.used: list[str] = []  # the names filled, in order

    def group(self, opening: str, name: str, closing: str, whole: str) -> str | None:
        """A whole ``{…name…}`` filled; None when it is no placeholder (unknown name, unbalanced)."""
        if name not in _BY_NAME or len(opening) != len(closing):
            return None
        if len(opening) > 1:
            return opening[1:] + name + closing[1:]  # {{n}} -> {n}: one level of escape off
        if name not in self.values:
            raise _unfilled(name, whole)
        self.used.append(name)
        return self.values[name]

    def word(self, word: str, previous: str | None = None) -> str:
        if "{" not in word:
            return word
        if previous == "--overrides" or word.startswith("--overrides="):  # MLC-LLM: "k={tp};k2={ctx}"
            head, eq, rest = word.partition("=") if previous != "--overrides" else ("", "", word)
            return head + eq + ";".join(self.word(part) for part in rest.split(";"))
        whole = re.fullmatch(_WHOLE, word)
        filled = self.group(whole.group(1), whole.group(2), whole.group(3), word) if whole else None
        if filled is not None:
            return filled
        key = re.match(_KEY, word)
        value = re.compile(_WHOLE).fullmatch(word, key.end()) if key else None
        if key and value:
            filled = self.group(value.group(1), value.group(2), value.group(3), word)
            if filled is not None:
                return key.group() + filled
        return self.inside(word)

    def inside(self, text: str) -> str:
        """``{{name}}`` inside a longer word unescaped; a single ``{name}`` there refused."""
        def one(m: re.Match[str]) -> str:
            dollar, opening, name, closing = m.groups()
            if dollar or name not in _BY_NAME or len(opening) != len(closing):
                return m.group()
            if len(opening) == 1:
                shown = text if len(text) <= _SHOWN else text[:_SHOWN - 1] + "…"
                from gpu_launch.base.text import printable

                raise UsageError(f"{{{name}}} inside the {self.what} {printable(repr(shown))} would be passed on "
                                 f"as it is: only a whole {self.what} or a whole value after = (--tp={{{name}}}) "
                                 "is replaced",
                                 hint=f"write it as its own {self.what} (--tp {{{name}}}) or as KEY={{{name}}}; "
                                      f"{{{{{name}}}}} is a literal {{{name}}}")
            return opening[1:] + name + closing[1:]

        return re.sub(_GROUP, one, text) if "{" in text else text


class _Some(_Filler):
    """Fills only its own names; every other placeholder and every ``{{escape}}`` stays as written."""

    def group(self, opening: str, name: str, closing: str, whole: str) -> str | None:
        if len(opening) != 1 or len(closing) != 1 or name not in self.values:
            return opening + name + closing
        self.used.append(name)
        return self.values[name]

    def inside(self, text: str) -> str:
        return text


def fill_only(argv: Sequence[str], values: Mapping[str, str]) -> tuple[str, ...]:
    """``argv`` with ``values``' placeholders filled where a launch fills them (whole, ``KEY={name}``,
    MLC-LLM's overrides) and nothing else touched: the other placeholders and every ``{{escape}}`` are left
    for the launch that runs it to fill and unescape once (``--fit MODEL --slurm`` writes the plan's values
    into the script; each node's launch fills its own and unescapes)."""
    return _fill_words(argv, _Some(values)) if argv else tuple(argv)


def _unfilled(name: str, word: str) -> Unfilled:
    when = _BY_NAME[name].filled_when
    return Unfilled(f"{{{name}}} is filled in only when {when}" if when else f"{{{name}}} has no value here",
                    hint=f"write {{{{{name}}}}} for a literal {{{name}}}", name=name)


def substitute(argv: Sequence[str], count: int, model: Mapping[str, str] | None = None,
               nodes: Mapping[str, str] | None = None, job: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """``argv`` with its placeholders filled for ``count`` chosen devices, the plan's values (``model``:
    ``{"tp": "4", ...}``) when a model sized the choice, and a node's place in a ``--nodes`` run
    (``nodes``: ``{"node_rank": "1", ...}``). The program name is kept."""
    if not argv:
        return tuple(argv)
    return _fill_words(argv, _Filler(_values(count, model, nodes, job)))


def _fill_words(argv: Sequence[str], filler: _Filler) -> tuple[str, ...]:
    return (argv[0], *(filler.word(arg, argv[i - 1] if i > 1 else None) for i, arg in enumerate(argv[1:], start=1)))


def check(argv: Sequence[str], filled: Collection[str] = NAMES) -> None:
    """Refuse (UsageError, exit 2) a command whose placeholders would not all be filled: one inside
    an argument, or one in the table that nothing in ``filled`` fills (:class:`Unfilled`)."""
    if argv:
        _fill_words(argv, _Filler({name: "0" for name in filled}))


def names_used(argv: Sequence[str]) -> tuple[str, ...]:
    """The placeholders ``argv`` uses where they are filled (whole, ``KEY={name}``, MLC's overrides), in order."""
    filler = _Filler({p.name: "0" for p in PLACEHOLDERS})
    if argv:
        _fill_words(argv, filler)
    return tuple(filler.used)


def model_names_used(argv: Sequence[str]) -> tuple[str, ...]:
    """The plan's placeholders (``{tp}``...) ``argv`` uses: they need ``--fit MODEL``."""
    return tuple(name for name in names_used(argv) if name in MODEL_NAMES)


def node_names_used(argv: Sequence[str]) -> tuple[str, ...]:
    """A node's placeholders (``{node_rank}``...) ``argv`` uses: they need ``--nodes``."""
    return tuple(name for name in names_used(argv) if name in NODE_NAMES)


def substitute_shell(text: str, count: int, model: Mapping[str, str] | None = None,
                     job: Mapping[str, str] | None = None) -> str:
    """Shell text with its placeholders filled, each replaced word quoted for the shell (``{gpus}`` is
    ``0,1``; a JSON value is single-quoted); everything else, spaces and quotes, kept as written. ``job``:
    an each job's own (:func:`job_values`)."""
    return _fill_shell(text, _Filler(_values(count, model, job), "word"))


def check_shell(text: str, filled: Collection[str] = NAMES) -> None:
    """:func:`check` for shell text."""
    _fill_shell(text, _Filler({name: "0" for name in filled}, "word"))


def _fill_shell(text: str, filler: _Filler) -> str:
    from gpu_launch.run.shellwords import words

    out: list[str] = []
    last = 0
    previous: str | None = None
    for w in words(text):
        raw = text[w.start:w.end]
        if w.value is None:  # an expansion in it: only what is inside the word can be a placeholder
            new = filler.inside(raw)
        else:
            filled = filler.word(w.value, previous)
            new = raw if filled == w.value else _shell_word(filled, w.value)
        out += [text[last:w.start], new]
        last, previous = w.end, w.value
    out.append(text[last:])
    return "".join(out)


def _shell_word(word: str, was: str) -> str:
    """``word`` quoted for the shell; a ``KEY=`` kept outside the quotes (``NPROC={n}`` stays an assignment)."""
    import shlex

    key = re.match(_KEY, was)
    head = key.group() if key and word.startswith(key.group()) else ""
    value = word[len(head):]
    return head + (value if re.fullmatch(_SHELL_SAFE, value) else shlex.quote(value))


def protect(text: str) -> str:
    """``text`` with one more level of braces on each placeholder, so that a launch's own filling gives
    ``text`` back: how ``each --slurm`` hands a filled shell line to ``gpulaunch --auto N -- sh -c``."""
    def one(m: re.Match[str]) -> str:
        dollar, opening, name, closing = m.groups()
        if dollar or name not in _BY_NAME or len(opening) != len(closing):
            return m.group()
        return "{" + opening + name + closing + "}"

    return re.sub(_GROUP, one, text)
