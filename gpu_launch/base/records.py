"""Records for the launch path: the part of :mod:`dataclasses` gpulaunch uses, without its start-up cost.

``from gpu_launch.base.records import dataclass, field, replace`` declares a class exactly as
:mod:`dataclasses` does, and type checkers are shown the real :mod:`dataclasses` (below). What runs
is this module, because a launch cannot afford the real one: importing it pulls in ``inspect``
(and with it ``ast``, ``dis``, ``tokenize``), ``re`` and ``copy``, and it compiles an ``__init__``,
``__repr__``, ``__eq__`` and ``__hash__`` with ``exec`` for every class, ~0.4 ms each; together
more than a third of a quiet launch's own time (docs/performance.md).

What it does, as :mod:`dataclasses` does it: fields are the class's annotations, in order, with
their defaults (a plain value, ``field(default=...)`` or ``field(default_factory=...)``); the
instance is built from positional or keyword arguments; ``frozen=True`` refuses assignment
(:class:`FrozenInstanceError`, an AttributeError) and makes the instance hashable; equality and
hashing use the fields with ``compare=True`` and only between instances of the same class; the
repr shows the fields with ``repr=True``; :func:`replace` copies with changes. A record class may
subclass another (its fields come first). Not supported, because nothing here needs it: ``order``,
``slots``, ``kw_only``, ``InitVar``/``ClassVar``, ``__post_init__``. A program that imports
:mod:`dataclasses` itself can still hand a record to ``dataclasses.replace``, ``fields``,
``asdict`` and ``is_dataclass`` (a user of ``gpu_launch.machine()``, a test): the first time it
asks, the class builds the ``__dataclass_fields__`` those functions read.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:  # type checkers know the real thing, which these behave as
    from dataclasses import FrozenInstanceError, dataclass, field, replace
else:
    __all__ = ["FrozenInstanceError", "dataclass", "field", "replace"]

    class FrozenInstanceError(AttributeError):
        """Assignment to a field of a frozen record."""

    _MISSING = object()

    class _Field:
        """What ``field()`` says of one field; the class attribute is replaced by its default."""

        __slots__ = ("default", "default_factory", "compare", "repr")

        def __init__(self, default, default_factory, compare, repr):
            self.default, self.default_factory, self.compare, self.repr = default, default_factory, compare, repr

    def field(*, default=_MISSING, default_factory=_MISSING, compare=True, repr=True):
        """A field's default (a value or a factory called per instance), and whether it is compared
        (equality, hash) and shown (repr)."""
        if default is not _MISSING and default_factory is not _MISSING:
            raise ValueError("cannot specify both default and default_factory")
        return _Field(default, default_factory, compare, repr)

    def dataclass(cls=None, /, *, frozen=False):
        """``@dataclass`` or ``@dataclass(frozen=True)`` on a class with annotated fields."""
        def wrap(klass):
            return _make(klass, frozen)
        return wrap if cls is None else wrap(cls)

    def replace(obj, /, **changes):
        """A copy of the record ``obj`` with ``changes`` (field name -> new value)."""
        names = getattr(type(obj), "__record_fields__", None)
        if names is None:
            raise TypeError("replace() should be called on record instances")
        values = {name: getattr(obj, name) for name in names}
        for name in changes:
            if name not in values:
                raise TypeError(f"{type(obj).__name__}.__init__() got an unexpected keyword argument {name!r}")
        values.update(changes)
        return type(obj)(*values.values())  # every field, in order: __init__'s quick way

    class _DataclassFields:
        """``cls.__dataclass_fields__``, built on first use from the record's fields, so that the real
        :mod:`dataclasses` functions work on records. Only a program that imported dataclasses asks."""

        def __get__(self, obj, cls):
            import dataclasses

            fields = {}
            for name, spec in cls.__record_specs__.items():
                real = dataclasses.field(default=spec.default if spec.default is not _MISSING else dataclasses.MISSING,
                                         default_factory=spec.default_factory
                                         if spec.default_factory is not _MISSING else dataclasses.MISSING,
                                         compare=spec.compare, repr=spec.repr)
                real.name = name
                real.type = cls.__annotations__.get(name) if name in cls.__dict__.get("__annotations__", {}) else None
                real._field_type = dataclasses._FIELD  # what dataclasses.fields() keeps
                fields[name] = real
            return fields

    def _values(obj, names):
        return tuple(getattr(obj, name) for name in names)

    def _make(cls, frozen):
        inherited = {}
        for base in reversed(cls.__mro__[1:]):
            inherited.update(base.__dict__.get("__record_specs__", {}))
        specs = dict(inherited)  # name -> _Field, in declaration order
        for name in cls.__dict__.get("__annotations__", {}):
            value = cls.__dict__.get(name, _MISSING)
            spec = value if isinstance(value, _Field) else _Field(value, _MISSING, True, True)
            if isinstance(spec.default, (list, dict, set)):
                raise ValueError(f"mutable default {type(spec.default)} for field {name} is not allowed: "
                                 "use default_factory")
            specs[name] = spec
            if spec.default is _MISSING:
                if name in cls.__dict__:
                    delattr(cls, name)
            else:
                setattr(cls, name, spec.default)
        names = tuple(specs)
        required = False
        for name, spec in specs.items():
            has_default = spec.default is not _MISSING or spec.default_factory is not _MISSING
            if required and not has_default:
                raise TypeError(f"non-default argument {name!r} follows default argument")
            required = required or has_default
        compared = tuple(name for name, spec in specs.items() if spec.compare)
        shown = tuple(name for name, spec in specs.items() if spec.repr)
        cls.__record_specs__ = specs
        cls.__record_fields__ = names
        cls.__dataclass_fields__ = _DataclassFields()
        cls.__match_args__ = names

        count = len(names)
        defaults = tuple((name, spec.default, spec.default_factory) for name, spec in specs.items())

        def __init__(self, *args, **kwargs):
            # The fields go straight into the instance's __dict__ (what object.__setattr__ would do,
            # one call instead of one a field): a model's header makes hundreds of records.
            if len(args) == count and not kwargs:  # every field, in order: the common case
                self.__dict__.update(zip(names, args))
                return
            if len(args) > count:
                raise TypeError(f"{cls.__name__}.__init__() takes {count + 1} positional arguments "
                                f"but {len(args) + 1} were given")
            values = dict(zip(names, args))
            for name in kwargs:
                if name not in specs:
                    raise TypeError(f"{cls.__name__}.__init__() got an unexpected keyword argument {name!r}")
                if name in values:
                    raise TypeError(f"{cls.__name__}.__init__() got multiple values for argument {name!r}")
            values.update(kwargs)
            ordered = {}
            for name, default, factory in defaults:
                if name in values:
                    ordered[name] = values[name]
                elif default is not _MISSING:
                    ordered[name] = default
                elif factory is not _MISSING:
                    ordered[name] = factory()
                else:
                    raise TypeError(f"{cls.__name__}.__init__() missing 1 required argument: {name!r}")
            self.__dict__.update(ordered)

        def __repr__(self):
            inner = ", ".join(f"{name}={getattr(self, name)!r}" for name in shown)
            return f"{cls.__qualname__}({inner})"

        def __eq__(self, other):
            if other.__class__ is not self.__class__:
                return NotImplemented
            return _values(self, compared) == _values(other, compared)

        def __hash__(self):
            return hash(_values(self, compared))

        cls.__init__ = __init__
        if "__repr__" not in cls.__dict__:
            cls.__repr__ = __repr__
        if "__eq__" not in cls.__dict__:
            cls.__eq__ = __eq__
        if cls.__dict__.get("__hash__") is None:  # none of the class's own (defining __eq__ sets None)
            # Frozen: hashable by the compared fields; mutable: unhashable, as dataclasses makes them.
            cls.__hash__ = __hash__ if frozen else None
        if frozen:
            def __setattr__(self, name, value):
                raise FrozenInstanceError(f"cannot assign to field {name!r}")

            def __delattr__(self, name):
                raise FrozenInstanceError(f"cannot delete field {name!r}")

            cls.__setattr__ = __setattr__
            cls.__delattr__ = __delattr__
        for function in (__init__, __repr__, __eq__, __hash__):
            function.__qualname__ = f"{cls.__qualname__}.{function.__name__}"
        return cls
