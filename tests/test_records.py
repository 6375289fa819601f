"""gpu_launch.base.records behaves as dataclasses does for what the package declares with it."""

from __future__ import annotations

import dataclasses
import pickle

import pytest

from gpu_launch.base import records


def _pair(module):  # the same declarations, made by the real dataclasses and by records
    @module.dataclass(frozen=True)
    class Point:
        x: int
        y: int = 0
        tags: tuple[str, ...] = ()
        extra: dict = module.field(default_factory=dict)
        note: str = module.field(default="", compare=False, repr=False)

        def norm(self) -> int:
            return abs(self.x) + abs(self.y)

    return Point


REAL, OURS = _pair(dataclasses), _pair(records)


@pytest.mark.parametrize("args, kwargs", [((1,), {}), ((1, 2), {}), ((), {"x": 3, "tags": ("a",)}),
                                          ((1,), {"note": "n", "extra": {"k": 1}})])
def test_construction_repr_equality_and_hash_match_dataclasses(args, kwargs) -> None:
    real, ours = REAL(*args, **kwargs), OURS(*args, **kwargs)
    assert repr(ours) == repr(real)
    assert [getattr(ours, f.name) for f in dataclasses.fields(real)] == [getattr(real, f.name)
                                                                          for f in dataclasses.fields(real)]
    assert ours == OURS(*args, **kwargs) and ours.norm() == real.norm()
    assert ours != OURS(99) and ours != real  # another class never compares equal
    with pytest.raises(TypeError):
        hash(ours)  # a dict field makes it unhashable, as it does a dataclass


def test_frozen_records_hash_by_the_fields_they_compare() -> None:
    @records.dataclass(frozen=True)
    class Tag:
        name: str
        note: str = records.field(default="", compare=False)

    assert Tag("a", note="x") == Tag("a") and len({Tag("a", note="x"), Tag("a"), Tag("b")}) == 2


def test_frozen_refuses_assignment_and_deletion() -> None:
    p = OURS(1)
    with pytest.raises(AttributeError):
        p.x = 2  # type: ignore[misc]
    with pytest.raises(AttributeError):
        del p.x
    assert p.x == 1


def test_default_factory_gives_each_instance_its_own_value() -> None:
    a, b = OURS(1), OURS(1)
    assert a.extra == {} and a.extra is not b.extra


@pytest.mark.parametrize("call", [lambda: OURS(), lambda: OURS(1, 2, (), {}, "", 6), lambda: OURS(1, x=1),
                                  lambda: OURS(1, z=1)])
def test_wrong_arguments_are_type_errors_as_with_dataclasses(call) -> None:
    with pytest.raises(TypeError):
        call()


def test_replace_copies_with_changes() -> None:
    p = OURS(1, 2, note="kept")
    q = records.replace(p, y=5)
    assert (q.x, q.y, q.note) == (1, 5, "kept") and p.y == 2
    with pytest.raises(TypeError):
        records.replace(p, z=1)
    with pytest.raises(TypeError):
        records.replace(object())


def test_mutable_records_are_assignable_and_unhashable() -> None:
    @records.dataclass
    class Counter:
        n: int = 0

    c = Counter()
    c.n += 1
    assert c == Counter(1)
    with pytest.raises(TypeError):
        hash(c)


def test_a_subclass_adds_its_fields_after_its_bases() -> None:
    @records.dataclass(frozen=True)
    class Base:
        a: int

    @records.dataclass(frozen=True)
    class Child(Base):
        b: int = 2

    assert Child(1) == Child(a=1, b=2) and repr(Child(1)).endswith("Child(a=1, b=2)")


def test_declaration_mistakes_fail_as_with_dataclasses() -> None:
    with pytest.raises(ValueError):
        @records.dataclass
        class Shared:
            items: list = []  # noqa: RUF012

    with pytest.raises(TypeError):
        @records.dataclass
        class Order:
            a: int = 0
            b: int


def test_records_pickle_round_trip() -> None:
    from gpu_launch.hardware import snapshot

    machine = snapshot.resolve("dgx-h100")
    assert pickle.loads(pickle.dumps(machine)) == machine


def test_the_real_dataclasses_functions_work_on_records() -> None:
    # Users of gpu_launch.machine() (and tests) may hand the model to dataclasses.
    from gpu_launch.hardware import snapshot

    gpu = snapshot.resolve("dgx-h100").gpus[0]
    assert dataclasses.is_dataclass(gpu)
    assert [f.name for f in dataclasses.fields(gpu)][:3] == ["index", "uuid", "name"]
    assert dataclasses.replace(gpu, index=9).index == 9 and dataclasses.replace(gpu, index=9).uuid == gpu.uuid
    assert dataclasses.asdict(gpu)["uuid"] == gpu.uuid
    p = OURS(1, extra={"k": 1})
    assert dataclasses.replace(p, y=3) == OURS(1, 3, extra={"k": 1})
    assert dataclasses.asdict(p) == dataclasses.asdict(REAL(1, extra={"k": 1}))
