"""A cheaper ``__init__`` for the frozen, slotted dataclasses on the hot paths.

A frozen dataclass's generated ``__init__`` stores every field through
``object.__setattr__(self, name, value)``: a generic attribute lookup per field,
since the class's own ``__setattr__`` refuses. Records such as :class:`~runlane.types.runs.Run`
(30 fields) are built once or more per run claimed, settled or created, and those
stores were the largest single cost of building them.

:func:`slot_init` replaces that ``__init__`` with one of the same signature that
fills the instance as a mutable *layout twin*: a class with the very same slots and
no ``__setattr__`` of its own. The new object is switched to the twin, its fields
are set with ordinary attribute stores (which the interpreter turns into direct slot
writes), and it is switched back. Python allows ``__class__`` assignment between
classes of identical layout; the object is not yet visible to anyone else while it
is the twin. That is about 2.5 times cheaper than one store through each slot's
descriptor, and about 4 times cheaper than the dataclass's own ``__init__``. An
instance of a subclass (another layout, maybe) is filled through the descriptors.
Everything else the dataclass generated (frozenness, equality, hashing, ``repr``,
``replace``, pickling) is untouched. :func:`many_builder` fills many instances the
same way in one call, without a call per instance.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Sequence
from typing import Any, TypeVar, cast

T = TypeVar("T")

#: Stands for "not given" where a field's default comes from a factory.
_NOT_GIVEN: Any = object()
#: The layout twin of each class :func:`slot_init` gave its ``__init__``.
_TWINS: dict[type, type] = {}
#: The builders :func:`many_builder` made, by class and varying fields.
_BUILDERS: dict[tuple[type, tuple[str, ...]], Callable[..., list[Any]]] = {}


def slot_init(cls: type[T]) -> type[T]:
    """Give the frozen, slotted dataclass ``cls`` an ``__init__`` that fills its slots
    through a layout twin (see the module docstring); apply it above ``@dataclass``.

    Only plain fields are mirrored: a class with ``__post_init__``, ``InitVar``,
    ``init=False`` or keyword-only fields is refused, so the new ``__init__`` cannot
    quietly differ from the one it replaces.
    """
    params = getattr(cls, "__dataclass_params__", None)
    if params is None or not params.frozen or "__slots__" not in cls.__dict__:
        raise TypeError(f"{cls.__name__} is not a frozen, slotted dataclass")
    if hasattr(cls, "__post_init__"):
        raise TypeError(f"{cls.__name__} has __post_init__, which slot_init does not call")
    original = cls.__init__
    fields = dataclasses.fields(cls)  # type: ignore[arg-type]
    expected = [(f.name, inspect.Parameter.POSITIONAL_OR_KEYWORD) for f in fields]
    parameters = list(inspect.signature(original).parameters.values())[1:]
    if [(p.name, p.kind) for p in parameters] != expected:
        # InitVar, init=False or keyword-only fields: the stores would not mirror them.
        raise TypeError(f"{cls.__name__}.__init__ does not take exactly its fields")
    # The twin: same base, same slots, so ``__class__`` may move between the two.
    twin = type(f"_{cls.__name__}Fields", cls.__bases__, {"__slots__": cls.__dict__["__slots__"]})
    _TWINS[cls] = twin
    namespace: dict[str, Any] = {
        "_NOT_GIVEN": _NOT_GIVEN,
        "_cls": cls,
        "_twin": twin,
        "_set_class": object.__setattr__,
    }
    signature: list[str] = []
    prologue: list[str] = []
    fast: list[str] = []
    slow: list[str] = []
    for index, f in enumerate(fields):
        setter = f"_set_{index}"
        namespace[setter] = cls.__dict__[f.name].__set__
        if f.default is not dataclasses.MISSING:
            namespace[f"_default_{index}"] = f.default
            signature.append(f"{f.name}=_default_{index}")
        elif f.default_factory is not dataclasses.MISSING:
            namespace[f"_factory_{index}"] = f.default_factory
            signature.append(f"{f.name}=_NOT_GIVEN")
            prologue.append(f"if {f.name} is _NOT_GIVEN: {f.name} = _factory_{index}()")
        else:
            signature.append(f.name)
        fast.append(f"    self.{f.name} = {f.name}")
        slow.append(f"    {setter}(self, {f.name})")
    body = [
        *prologue,
        "if self.__class__ is _cls:",
        "    _set_class(self, '__class__', _twin)",
        *fast,
        "    self.__class__ = _cls",
        "else:",
        *(slow or ["    pass"]),
    ]
    lines = "".join(f"    {line}\n" for line in body)
    source = f"def __init__(self, {', '.join(signature)}):\n{lines}"
    # Built from field names only, as dataclasses builds the __init__ it replaces.
    exec(source, namespace)
    init = namespace["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__module__ = cls.__module__
    init.__doc__ = original.__doc__
    init.__annotations__ = dict(original.__annotations__)
    cls.__init__ = init  # type: ignore[method-assign]
    return cls


def many_builder(cls: type[T], varying: Sequence[str]) -> Callable[..., list[T]]:
    """A function that builds many instances of ``cls`` (a class :func:`slot_init`
    applies to) in one call: ``build(*columns, **shared)`` makes one instance per row
    of the parallel sequences ``columns`` (the fields ``varying``, in that order), with
    every other field from ``shared`` (each one given by name, once for all).

    The same instances ``cls(...)`` makes, several times cheaper each: no call and
    frame per instance, and each one is filled as the layout twin and switched to
    ``cls`` once (see the module docstring). For the records a bulk call returns.
    """
    key = (cls, tuple(varying))
    built = _BUILDERS.get(key)
    if built is not None:
        return built
    twin = _TWINS.get(cls)
    if twin is None:
        raise TypeError(f"{cls.__name__} has no slot_init __init__")
    names = [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]
    if len(set(varying)) != len(varying) or not set(varying) <= set(names):
        raise TypeError(f"varying must name distinct fields of {cls.__name__}: {varying!r}")
    columns = [f"_column_{index}" for index in range(len(varying))]
    column_of = dict(zip(varying, columns, strict=True))
    shared = [name for name in names if name not in column_of]
    body = [
        "built = []",
        "append = built.append",
        f"for {', '.join(columns)}{',' if len(columns) == 1 else ''} in "
        f"zip({', '.join(f'{column}s' for column in columns)}, strict=True):",
        "    self = _new(_twin)",
        *(f"    self.{name} = {column_of.get(name, name)}" for name in names),
        "    self.__class__ = _cls",
        "    append(self)",
        "return built",
    ]
    lines = "".join(f"    {line}\n" for line in body)
    signature = ", ".join(f"{column}s" for column in columns)
    if shared:
        signature += ", *, " + ", ".join(shared)
    namespace: dict[str, Any] = {"_new": object.__new__, "_twin": twin, "_cls": cls}
    # Built from field names only, as slot_init builds its __init__.
    exec(f"def build({signature}):\n{lines}", namespace)
    built = namespace["build"]
    built.__qualname__ = f"{cls.__qualname__}.<many_builder>"
    _BUILDERS[key] = built
    return cast(Callable[..., list[T]], built)
