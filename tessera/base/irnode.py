"""`@ir_node`: a frozen dataclass without code compiled per class, for the compiler's IR classes.

`@dataclass(frozen=True)` compiles six methods per class with `exec` (`__init__`, `__repr__`,
`__eq__`, `__hash__`, `__setattr__`, `__delattr__`): about 0.45 ms a class on Python 3.11, and a
compile imports over a hundred such classes, about 50 ms of a cold first `tessera.load`. `ir_node`
gives a class the same behaviour for what the code base uses while compiling nothing: it calls
`dataclasses.dataclass(init=False, repr=False, eq=False)` (which generates no code), so that
`dataclasses.fields`, `replace`, `asdict`, `is_dataclass` and `__match_args__` work as before, and
adds `__init__`, `__eq__`, `__hash__` and `__repr__` as closures over the class's fields, and a
`__setattr__` and `__delattr__` shared by every such class that raise `FrozenInstanceError`.

Supported: fields with a default or a `default_factory`, `field(compare=, hash=, repr=)`, and a
`__repr__` the class defines itself (kept, as a dataclass keeps it). Refused with a `TypeError`
when the class is created: decorator options (`order=`, `slots=`, ...), `__slots__`, a dataclass
base, `__post_init__`, an `__init__`, `__eq__`, `__hash__`, `__setattr__` or `__delattr__` of the
class's own, `ClassVar` and `InitVar` annotations, keyword-only fields and `field(init=False)`.
Where it differs from a dataclass: `__dataclass_params__` reads init, repr, eq and frozen False
(`is_ir_node` tells an `ir_node` class); `inspect.signature(cls)` is `(*args, **kwargs)`; a class
without a docstring gets `Name(a, b=1)`, without annotations; `__repr__` has no guard against an
instance that contains itself; an instance of a plain subclass cannot take attributes beyond the
fields either; and `__init__` binds its arguments in Python, 0.2-0.4 us a call slower than the
generated one (about 1.5 us with keyword arguments): some 0.4 ms of a compile that makes a thousand
nodes that way (`nodes.replace` copies the others without `__init__`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from operator import attrgetter
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from typing_extensions import dataclass_transform
else:
    def dataclass_transform(**_: object) -> Callable[[Any], Any]:
        """typing_extensions' decorator for type checkers, a no-op at run time."""
        return lambda f: f

_C = TypeVar("_C", bound=type)
_set = object.__setattr__
_OWN_METHODS = ("__init__", "__eq__", "__hash__", "__setattr__", "__delattr__")


def _frozen_setattr(self: object, name: str, value: object) -> None:
    raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")


def _frozen_delattr(self: object, name: str) -> None:
    raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")


def is_ir_node(cls: type) -> bool:
    """Whether `cls` is an `ir_node` class (or derives from one)."""
    return getattr(cls, "__setattr__", None) is _frozen_setattr


def _tuple_getter(names: Sequence[str]) -> Callable[[Any], tuple]:
    """A function of an instance giving the tuple of these attributes (attrgetter gives a bare
    value for one name)."""
    if len(names) > 1:
        return attrgetter(*names)
    if names:
        get = attrgetter(names[0])
        return lambda obj: (get(obj),)
    return lambda obj: ()


def _quoted(names: Sequence[str]) -> str:
    """'a', 'a' and 'b', 'a', 'b', and 'c': as Python lists missing arguments."""
    q = [repr(n) for n in names]
    return q[0] if len(q) == 1 else f"{q[0]} and {q[1]}" if len(q) == 2 else ", ".join(q[:-1]) + ", and " + q[-1]


def _init(qualname: str, fields: tuple[dataclasses.Field, ...]) -> Callable[..., None]:
    """An `__init__` taking the fields in order, positionally or by name (the defaults last)."""
    names = tuple(f.name for f in fields)
    count = len(names)
    factories = {f.name: f.default_factory for f in fields if f.default_factory is not dataclasses.MISSING}
    required = sum(f.default is dataclasses.MISSING and f.name not in factories for f in fields)
    defaults = tuple(f.default for f in fields[required:])  # MISSING where a factory makes the value
    shortest = count if factories else required  # the fewest positional values completed from `defaults`
    where = f"{qualname}.__init__()"
    takes = (f"{count + 1} positional argument{'s' if count else ''}" if required == count
             else f"from {required + 1} to {count + 1} positional arguments")

    def bind(args: tuple, kwargs: dict[str, Any]) -> tuple:
        """The values of every field, in order, for a call with names, too few or too many values."""
        n = len(args)
        for key in kwargs:
            if key not in names:
                raise TypeError(f"{where} got an unexpected keyword argument {key!r}")
            if key in names[:n]:
                raise TypeError(f"{where} got multiple values for argument {key!r}")
        if n > count:
            raise TypeError(f"{where} takes {takes} but {n + 1} were given")
        missing = [name for name in names[n:required] if name not in kwargs]
        if missing:
            s = "s" if len(missing) > 1 else ""
            raise TypeError(f"{where} missing {len(missing)} required positional argument{s}: {_quoted(missing)}")
        values = list(args)
        for i in range(n, count):
            name = names[i]
            values.append(kwargs[name] if name in kwargs else factories[name]() if name in factories
                          else defaults[i - required])
        return tuple(values)

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        n = len(args)
        if kwargs or not shortest <= n <= count:
            args = bind(args, kwargs)
        elif n < count:
            args += defaults[n - required:]
        # object.__setattr__, not self.__dict__: on Python 3.11 touching __dict__ makes it a real
        # dict, and reading the instance's attributes then takes about three times as long.
        for name, value in zip(names, args):
            _set(self, name, value)

    return __init__


def _check_class(cls: type) -> None:
    if "__slots__" in cls.__dict__:
        raise TypeError(f"ir_node {cls.__qualname__}: __slots__ is not supported")
    if hasattr(cls, "__post_init__"):
        raise TypeError(f"ir_node {cls.__qualname__}: __post_init__ is not supported")
    for name in _OWN_METHODS:
        if name in cls.__dict__:
            raise TypeError(f"ir_node {cls.__qualname__}: a {name} of its own is not supported")
    base = next((b for b in cls.__mro__[1:] if dataclasses.is_dataclass(b)), None)
    if base is not None:
        raise TypeError(f"ir_node {cls.__qualname__}: deriving from the dataclass {base.__qualname__} "
                        "is not supported")


def _check_fields(cls: type, fields: tuple[dataclasses.Field, ...]) -> None:
    if len(fields) != len(cls.__dict__["__dataclass_fields__"]):
        raise TypeError(f"ir_node {cls.__qualname__}: ClassVar and InitVar annotations are not supported")
    defaulted = False
    for f in fields:
        if f.kw_only or not f.init:
            raise TypeError(f"ir_node {cls.__qualname__}: field {f.name!r} is keyword-only or not in "
                            "__init__, which is not supported")
        has_default = f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
        if defaulted and not has_default:
            raise TypeError(f"non-default argument {f.name!r} follows default argument")
        defaulted = has_default


def _parameter(f: dataclasses.Field) -> str:
    """A field as the docstring shows it: `name`, `name=default` or `name=<factory>`."""
    if f.default is not dataclasses.MISSING:
        return f"{f.name}={f.default!r}"
    return f"{f.name}=<factory>" if f.default_factory is not dataclasses.MISSING else f.name


@dataclass_transform(frozen_default=True)
def ir_node(cls: _C) -> _C:
    """Make `cls` a frozen dataclass (see the module docstring for what is supported)."""
    _check_class(cls)
    documented = bool(cls.__doc__)
    if not documented:
        cls.__doc__ = cls.__name__  # for now: dataclass() would make one with inspect.signature
    setattr(cls, "__setattr__", _frozen_setattr)  # noqa: B010 (mypy: "cannot assign to a method")
    setattr(cls, "__delattr__", _frozen_delattr)  # noqa: B010
    dataclasses.dataclass(init=False, repr=False, eq=False)(cls)
    fields = dataclasses.fields(cls)
    _check_fields(cls, fields)
    if not documented:
        cls.__doc__ = f"{cls.__name__}({', '.join(_parameter(f) for f in fields)})"

    compared = _tuple_getter([f.name for f in fields if f.compare])
    hashed = _tuple_getter([f.name for f in fields if (f.compare if f.hash is None else f.hash)])
    shown = tuple(f.name for f in fields if f.repr)
    shown_values = _tuple_getter(shown)

    def __eq__(self: Any, other: object) -> Any:
        if other is self:  # what comparing the tuples would find (tuples compare items by identity first)
            return True
        if other.__class__ is self.__class__:
            return compared(self) == compared(other)
        return NotImplemented

    def __hash__(self: Any) -> int:
        return hash(hashed(self))

    def __repr__(self: Any) -> str:
        inner = ", ".join(f"{n}={v!r}" for n, v in zip(shown, shown_values(self)))
        return f"{self.__class__.__qualname__}({inner})"

    methods: dict[str, Callable[..., Any]] = {
        "__init__": _init(cls.__qualname__, fields), "__eq__": __eq__, "__hash__": __hash__, "__repr__": __repr__}
    for name, method in methods.items():
        if name not in cls.__dict__:  # a __repr__ of the class's own stays
            method.__qualname__ = f"{cls.__qualname__}.{name}"
            setattr(cls, name, method)
    return cls
