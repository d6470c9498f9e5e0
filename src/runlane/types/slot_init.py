"""A cheaper ``__init__`` for the frozen, slotted dataclasses on the hot paths.

A frozen dataclass's generated ``__init__`` stores every field through
``object.__setattr__(self, name, value)``: a generic attribute lookup per field,
since the class's own ``__setattr__`` refuses. Records such as :class:`~runlane.types.runs.Run`
(29 fields) are built once or more per run claimed, settled or created, and those
stores were the largest single cost of building them.

:func:`slot_init` replaces that ``__init__`` with one of the same signature that
stores the fields without that lookup. Everything else the dataclass generated
(frozenness, equality, hashing, ``repr``, ``replace``, pickling) is untouched.

The stores go one of two ways. For a class of its own (no base but ``object``), the
new instance is given, while its fields are stored, a *shadow* class: the same slots,
not frozen, so each field is a plain attribute store (which the interpreter
specialises to a direct slot write); then its class is set back. Building a ``Run``
so costs about a quarter of the instructions of storing each field through its
slot's descriptor (``__set__``), which is what an instance of a subclass, or of a class
whose layout the shadow does not match, still gets (itself about 40% fewer
instructions than the dataclass's stores).
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any, TypeVar

T = TypeVar("T")

#: Stands for "not given" where a field's default comes from a factory.
_NOT_GIVEN: Any = object()


def slot_init(cls: type[T]) -> type[T]:
    """Give the frozen, slotted dataclass ``cls`` an ``__init__`` that stores fields
    through their slot descriptors; apply it above ``@dataclass``.

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
    shadow = _shadow_of(cls)
    namespace: dict[str, Any] = {
        "_NOT_GIVEN": _NOT_GIVEN,
        "_slot_init_cls": cls,
        "_slot_init_shadow": shadow,
        "_slot_init_set_class": object.__setattr__,
        # Under a name no field can shadow (NewEvent has a field called type).
        "_slot_init_type": type,
    }
    signature: list[str] = []
    defaults: list[str] = []
    slow: list[str] = []
    fast: list[str] = []
    for index, f in enumerate(fields):
        setter = f"_set_{index}"
        namespace[setter] = cls.__dict__[f.name].__set__
        if f.default is not dataclasses.MISSING:
            namespace[f"_default_{index}"] = f.default
            signature.append(f"{f.name}=_default_{index}")
        elif f.default_factory is not dataclasses.MISSING:
            namespace[f"_factory_{index}"] = f.default_factory
            signature.append(f"{f.name}=_NOT_GIVEN")
            defaults.append(f"if {f.name} is _NOT_GIVEN: {f.name} = _factory_{index}()")
        else:
            signature.append(f.name)
        slow.append(f"{setter}(self, {f.name})")
        fast.append(f"self.{f.name} = {f.name}")
    body = list(defaults)
    if shadow is None:
        body += slow or ["pass"]
    else:
        body.append("if _slot_init_type(self) is _slot_init_cls:")
        body.append("    _slot_init_set_class(self, '__class__', _slot_init_shadow)")
        body += [f"    {line}" for line in fast]
        body.append("    self.__class__ = _slot_init_cls")
        body.append("else:")
        body += [f"    {line}" for line in slow or ["pass"]]
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


def _shadow_of(cls: type) -> type | None:
    """A class with ``cls``'s slots that an instance of ``cls`` may take on while its
    fields are stored (and give back); ``None`` when ``cls`` has a base of its own or
    Python refuses the swap (another layout)."""
    if cls.__bases__ != (object,):
        return None
    shadow = type(f"_{cls.__name__}Fields", (), {"__slots__": cls.__dict__["__slots__"]})
    probe: Any = object.__new__(cls)
    try:
        object.__setattr__(probe, "__class__", shadow)
        probe.__class__ = cls
    except TypeError:
        return None
    return shadow
