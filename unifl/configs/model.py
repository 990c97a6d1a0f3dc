"""Typed sections of a party's YAML, checked without pydantic.

The party schema (:mod:`unifl.configs.schema`) is read in UniFL's own processes and in FATE's
workers, whose venv pins pydantic 1 (UniFL's job schema uses pydantic 2); so it is declared here,
on plain Python, like the backends' options models (:mod:`unifl.core.options`).

A section is a class deriving from :class:`Section`; each annotated attribute is a field, its
value the default (or :func:`setting`: a default or factory, numeric bounds, a check).  Parsing
(``Section(**fields)``, :meth:`Section.model_validate`):

* an unknown key is refused (``unknown field``), a missing one without default is
  ``Field required``;
* values are checked strictly against the annotation: ``bool``, ``int``, ``float`` (an int is
  widened), ``str``, ``None``, ``Literal[...]``, unions, ``list[T]``, ``dict[K, V]``, nested
  sections and ``Any``; nothing is coerced ("4" is not an integer, 1 is not ``true``);
* then the bounds and the field's check; then the section's own rules (:meth:`Section._rules`).

Every problem is collected with its location (``network.peers.host``) and reported together as a
:class:`SchemaError`, a ``ValueError`` whose ``errors()`` lists them as the config loader prints
them.  A parsed section is immutable; ``model_dump()`` gives the plain data back, which parses to
an equal section.
"""

from __future__ import annotations

import dataclasses
import math
import reprlib
import types
import typing
from typing import Any, Callable, ClassVar, Iterable, Literal, TypeVar, Union

__all__ = ["Section", "SchemaError", "FieldError", "setting"]

S = TypeVar("S", bound="Section")
_MISSING: Any = object()
_NO: Any = object()           # "did not conform" (None is a legitimate value)
_SHORT = reprlib.Repr()
_SHORT.maxstring = _SHORT.maxother = 80


@dataclasses.dataclass(frozen=True)
class Setting:
    """How one field is read: its default (or a factory), numeric bounds, a check of the typed
    value (returns it, or raises ValueError with the message), a check of the raw value before
    typing (for a clearer message than the annotation's)."""

    default: Any = _MISSING
    factory: Callable[[], Any] | None = None
    bounds: tuple[tuple[str, float], ...] = ()
    check: Callable[[Any], Any] | None = None
    before: Callable[[Any], Any] | None = None


def setting(default: Any = _MISSING, *, factory: Callable[[], Any] | None = None,
            ge: float | None = None, gt: float | None = None, le: float | None = None,
            lt: float | None = None, check: Callable[[Any], Any] | None = None,
            before: Callable[[Any], Any] | None = None) -> Any:
    """A field's default (or ``factory``), bounds and checks (see :class:`Setting`)."""
    bounds = tuple((k, float(v)) for k, v in (("ge", ge), ("gt", gt), ("le", le), ("lt", lt))
                   if v is not None)
    return Setting(default, factory, bounds, check, before)


_BOUND_WORDS = {"ge": ("greater than or equal to", lambda v, b: v >= b),
                "gt": ("greater than", lambda v, b: v > b),
                "le": ("less than or equal to", lambda v, b: v <= b),
                "lt": ("less than", lambda v, b: v < b)}


@dataclasses.dataclass(frozen=True)
class FieldError:
    """One problem: where (keys and list positions from the top), what, the value given."""

    loc: tuple[str | int, ...]
    msg: str
    input: Any = None
    type: str = "value_error"

    def as_dict(self) -> dict[str, Any]:
        return {"loc": self.loc, "msg": self.msg, "input": self.input, "type": self.type}


class SchemaError(ValueError):
    """Everything wrong with a section's data, each problem at its field (``errors()``)."""

    def __init__(self, title: str, problems: Iterable[FieldError]) -> None:
        self.title = title
        self.problems = tuple(problems)
        lines = [f"{'.'.join(map(str, p.loc)) or '(top level)'}: {p.msg}" for p in self.problems]
        super().__init__(f"{len(lines)} problem(s) in {title}: " + "; ".join(lines))

    def errors(self) -> list[dict[str, Any]]:
        return [p.as_dict() for p in self.problems]


def describe(tp: Any) -> str:
    """What an annotation accepts, in words."""
    origin = typing.get_origin(tp)
    if origin is Literal:
        args = [repr(a) for a in typing.get_args(tp)]
        return args[0] if len(args) == 1 else ", ".join(args[:-1]) + " or " + args[-1]
    if origin is Union or origin is types.UnionType:
        return " or ".join(describe(a) for a in typing.get_args(tp))
    if origin is list:
        return "a list"
    if origin is dict:
        return "a mapping"
    if isinstance(tp, type) and issubclass(tp, Section):
        return "a mapping of fields"
    return {bool: "true or false", int: "an integer", float: "a number", str: "a string",
            type(None): "null"}.get(tp, "anything" if tp is Any else repr(tp))


def _scalar(tp: Any, value: Any) -> Any:
    if tp is type(None):
        return value if value is None else _NO
    if tp is bool:
        return value if isinstance(value, bool) else _NO
    if tp is int:
        return value if isinstance(value, int) and not isinstance(value, bool) else _NO
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return _NO
        try:
            f = float(value)
        except OverflowError:
            return _NO
        return f if math.isfinite(f) else _NO
    if tp is str:
        return value if isinstance(value, str) else _NO
    raise TypeError(f"sections support bool, int, float, str, None, Literal, unions, list, dict, "
                    f"Any and sections; got the annotation {tp!r}")


_TYPE_WORDS = {bool: "a valid boolean", int: "a valid integer", float: "a valid number",
               str: "a valid string", type(None): "null"}


def conform(tp: Any, value: Any, loc: tuple[str | int, ...], errors: list[FieldError]) -> Any:
    """``value`` read as annotation ``tp``; on failure, its problems are appended to ``errors``
    and the result is a sentinel that callers compare with :data:`_NO`."""
    if tp is Any:
        return value
    origin = typing.get_origin(tp)
    if isinstance(tp, type) and issubclass(tp, Section):
        if isinstance(value, tp):
            return value
        if not isinstance(value, dict):
            errors.append(FieldError(loc, "Input should be a mapping of fields", value,
                                     "model_type"))
            return _NO
        return tp._parse(value, loc, errors)
    if origin is Literal:
        # type as well as equality: True == 1, but a flag is not the integer 1
        if any(type(value) is type(a) and value == a for a in typing.get_args(tp)):
            return value
        errors.append(FieldError(loc, f"Input should be {describe(tp)}", value, "literal_error"))
        return _NO
    if origin is Union or origin is types.UnionType:
        arms = typing.get_args(tp)
        if value is None and type(None) in arms:
            return None
        rest = [a for a in arms if a is not type(None)]
        if len(rest) == 1:              # Optional[X]: X's own message
            return conform(rest[0], value, loc, errors)
        for arm in rest:
            scratch: list[FieldError] = []
            got = conform(arm, value, loc, scratch)
            if got is not _NO and not scratch:
                return got
        errors.append(FieldError(loc, f"Input should be {describe(tp)}", value))
        return _NO
    if origin is list:
        if not isinstance(value, list):
            errors.append(FieldError(loc, "Input should be a valid list", value, "list_type"))
            return _NO
        (item,) = typing.get_args(tp)
        before = len(errors)
        out = [conform(item, v, loc + (i,), errors) for i, v in enumerate(value)]
        return out if len(errors) == before else _NO
    if origin is dict:
        if not isinstance(value, dict):
            errors.append(FieldError(loc, "Input should be a valid dictionary", value,
                                     "dict_type"))
            return _NO
        ktp, vtp = typing.get_args(tp)
        before = len(errors)
        out_d = {}
        for k, v in value.items():
            key = conform(ktp, k, loc + (str(k),), errors)
            out_d[key] = conform(vtp, v, loc + (str(k),), errors)
        return out_d if len(errors) == before else _NO
    got = _scalar(tp, value)
    if got is _NO:
        errors.append(FieldError(loc, f"Input should be {_TYPE_WORDS[tp]}", value,
                                 f"{tp.__name__}_type"))
    return got


def _dump(value: Any) -> Any:
    if isinstance(value, Section):
        return value.model_dump()
    if isinstance(value, list):
        return [_dump(v) for v in value]
    if isinstance(value, dict):
        return {k: _dump(v) for k, v in value.items()}
    return value


class Section:
    """Base of a config section (see the module docstring)."""

    #: resolved (annotation, Setting) per field, per class, in declaration order
    _schema: ClassVar[dict[type, dict[str, tuple[Any, Setting]]]] = {}

    def __init__(self, **data: Any) -> None:
        object.__setattr__(self, "__dict__", type(self).model_validate(data).__dict__)

    # ---- the declared fields
    @classmethod
    def fields(cls) -> dict[str, tuple[Any, Setting]]:
        known = Section._schema.get(cls)
        if known is None:
            hints = typing.get_type_hints(cls)
            known = {}
            for klass in reversed(cls.__mro__):
                for name in getattr(klass, "__annotations__", {}):
                    if name.startswith("_") or typing.get_origin(hints.get(name)) is ClassVar:
                        continue
                    raw = getattr(cls, name, _MISSING)
                    known[name] = (hints[name], raw if isinstance(raw, Setting) else
                                   Setting(default=raw))
            Section._schema[cls] = known
        return known

    # ---- parsing
    @classmethod
    def model_validate(cls: type[S], data: Any) -> S:
        """The section from a parsed mapping; :class:`SchemaError` on any problem."""
        if isinstance(data, cls):
            return data
        if not isinstance(data, dict):
            raise SchemaError(cls.__name__, [FieldError((), "Input should be a mapping of "
                                                        "fields", data, "model_type")])
        errors: list[FieldError] = []
        parsed = cls._parse(data, (), errors)
        if errors or parsed is _NO:
            raise SchemaError(cls.__name__, errors)
        return parsed

    @classmethod
    def _split_extra(cls, data: dict[str, Any], loc: tuple[str | int, ...],
                     errors: list[FieldError]) -> dict[str, Any]:
        """Keys that are no field of the section: refused here; a section that takes more
        (PartyConfig's backend sections) overrides this and returns what it keeps."""
        for key, value in data.items():
            if key not in cls.fields():
                errors.append(FieldError(loc + (str(key),), "unknown field", value,
                                         "extra_forbidden"))
        return {}

    @classmethod
    def _parse(cls: type[S], data: dict[str, Any], loc: tuple[str | int, ...],
               errors: list[FieldError]) -> S:
        before = len(errors)
        extra = cls._split_extra(data, loc, errors)
        values: dict[str, Any] = {}
        for name, (tp, st) in cls.fields().items():
            where = loc + (name,)
            if name not in data:
                if st.factory is not None:
                    values[name] = st.factory()
                elif st.default is _MISSING:
                    errors.append(FieldError(where, "Field required", None, "missing"))
                else:
                    values[name] = st.default
                continue
            raw = data[name]
            if st.before is not None:
                try:
                    raw = st.before(raw)
                except ValueError as exc:
                    errors.append(FieldError(where, str(exc), raw))
                    continue
            got = conform(tp, raw, where, errors)
            if got is _NO:
                continue
            if isinstance(got, (int, float)) and not isinstance(got, bool):
                for kind, bound in st.bounds:
                    words, holds = _BOUND_WORDS[kind]
                    if not holds(got, bound):
                        shown = int(bound) if float(bound).is_integer() else bound
                        errors.append(FieldError(where, f"Input should be {words} {shown}", raw,
                                                 f"{kind}_bound"))
                        got = _NO
                        break
            if got is not _NO and st.check is not None:
                try:
                    got = st.check(got)
                except ValueError as exc:
                    errors.append(FieldError(where, str(exc), raw))
                    got = _NO
            if got is not _NO:
                values[name] = got
        if len(errors) > before:
            return _NO
        inst = cls.__new__(cls)
        object.__setattr__(inst, "__dict__", {**values, "_extra": extra})
        for sub, msg in inst._rules():
            errors.append(FieldError(loc + sub, msg, None, "rule"))
        return inst if len(errors) == before else _NO

    def _rules(self) -> Iterable[tuple[tuple[str | int, ...], str]]:
        """Rules between fields (all well typed already): (location in the section, message)
        per violation."""
        return ()

    # ---- the parsed section
    def model_dump(self) -> dict[str, Any]:
        """The section as plain data (parses back to an equal section)."""
        out = {name: _dump(getattr(self, name)) for name in self.fields()}
        out.update(_dump(self.__dict__.get("_extra") or {}))
        return out

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__} is read-only: validate a new one "
                             "(model_dump, change, model_validate)")

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other.model_dump() == self.model_dump()

    def __hash__(self) -> int:
        return hash((type(self).__name__, repr(self.model_dump())))

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={_SHORT.repr(getattr(self, k))}" for k in self.fields())
        return f"{type(self).__name__}({inner})"
