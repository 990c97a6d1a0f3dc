"""Backend options models: one typed definition of every option a backend takes, its default and its
checks, shared by the backend's constructor and the party YAML.

A backend declares its options as a frozen dataclass deriving from :class:`BackendOptions`, one field
per option made with :func:`option`::

    @dataclass(frozen=True)
    class QatOptions(BackendOptions):
        max_in_flight: int = option(96, "outstanding requests per instance", ge=1)
        cpu_share: float = option(0.0, "fraction of the ModExps run on the CPU", ge=0.0, lt=1.0)

and sets ``options_model = QatOptions`` on its Backend class.  ``Backend.__init__(**options)`` and the
party schema (``unifl.configs``) both go through :meth:`BackendOptions.parse`, so a default or a
bound exists once, and an unknown option or a wrong value is a :class:`BackendOptionsError` (a
``ConfigError``) naming the backend, the option and the offending value wherever it came from.

The model is plain Python (no pydantic): backends import and construct in environments that pin
another pydantic major version (FATE's), and the YAML schema converts these problems into its own
field errors.

Values are checked strictly against the annotation, without coercion: YAML already gives ints,
floats, booleans and strings their own types, so a string where an integer belongs is a mistake to
report, not to convert.  The one widening is an integer for a ``float`` option.  Supported
annotations: ``bool``, ``int``, ``float``, ``str``, ``None``, ``Literal[...]`` and unions of these
(``Optional[int]``, ``Literal["all"] | int``).  Bounds (``ge``/``gt``/``le``/``lt``) apply to the
numeric values of an option and leave its other values (``None``, ``"all"``) alone.
"""

from __future__ import annotations

import dataclasses
import math
import reprlib
import types
import typing
from typing import Any, ClassVar, Iterable, Literal, Mapping, Sequence, TypeVar, Union

from .errors import ConfigError

__all__ = ["BackendOptions", "BackendOptionsError", "OptionProblem", "option"]

OptionsT = TypeVar("OptionsT", bound="BackendOptions")

_BOUNDS = {"ge": (">=", lambda v, b: v >= b), "gt": (">", lambda v, b: v > b),
           "le": ("<=", lambda v, b: v <= b), "lt": ("<", lambda v, b: v < b)}
#: the offending value in a message, shortened (a pasted blob must not flood the log)
_SHORT = reprlib.Repr()
_SHORT.maxstring = _SHORT.maxother = 80


def option(default: Any, doc: str, *, ge: float | None = None, gt: float | None = None,
           le: float | None = None, lt: float | None = None) -> Any:
    """A field of an options model: its default, one line saying what it does (and what ``None``
    means when it is allowed), and optional numeric bounds."""
    if not doc:
        raise TypeError("every backend option needs a doc line")
    bounds = {k: v for k, v in (("ge", ge), ("gt", gt), ("le", le), ("lt", lt)) if v is not None}
    return dataclasses.field(default=default, metadata={"doc": doc, "bounds": bounds})


@dataclasses.dataclass(frozen=True)
class OptionProblem:
    """One thing wrong with one option: its name, what is wrong, the value given, and whether the
    name itself is the problem (no such option)."""

    option: str
    message: str
    value: Any = None
    unknown: bool = False

    def __str__(self) -> str:
        return f"option {self.option!r}: {self.message} (got {_SHORT.repr(self.value)})"


class BackendOptionsError(ConfigError):
    """Options of a backend that its model refuses; ``problems`` lists each option at fault."""

    def __init__(self, owner: str, problems: Sequence[OptionProblem]) -> None:
        self.owner = owner
        self.problems = tuple(problems)
        super().__init__("; ".join(f"{owner}: {p}" for p in self.problems))


def _describe(tp: Any) -> str:
    """What an annotation accepts, in words for an error message."""
    origin = typing.get_origin(tp)
    if origin is Literal:
        return " or ".join(repr(a) for a in typing.get_args(tp))
    if origin is Union or origin is types.UnionType:
        return " or ".join(_describe(a) for a in typing.get_args(tp))
    return {bool: "true or false", int: "an integer", float: "a number", str: "a string",
            type(None): "null"}.get(tp, repr(tp))


_NO = object()   # "does not conform" (None is a legitimate converted value)


def _conform(tp: Any, value: Any) -> Any:
    """``value`` as the annotation ``tp`` takes it (an int widened for ``float``), else ``_NO``.
    Raises TypeError for an annotation the model does not support (a mistake in the model)."""
    origin = typing.get_origin(tp)
    if origin is Literal:
        # type as well as equality: True == 1, but a flag is not the integer 1
        ok = any(type(value) is type(a) and value == a for a in typing.get_args(tp))
        return value if ok else _NO
    if origin is Union or origin is types.UnionType:
        for arm in typing.get_args(tp):
            got = _conform(arm, value)
            if got is not _NO:
                return got
        return _NO
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
        except OverflowError:          # an int beyond the float range
            return _NO
        return f if math.isfinite(f) else _NO   # NaN would pass every bound check unnoticed
    if tp is str:
        return value if isinstance(value, str) else _NO
    raise TypeError(f"options models support bool, int, float, str, None, Literal and unions of "
                    f"them; got the annotation {tp!r}")


@dataclasses.dataclass(frozen=True)
class BackendOptions:
    """Base of a backend's options model (and, with no fields, the model of a backend that takes no
    options).  Construction checks every field; :meth:`parse` also refuses unknown names."""

    #: annotations resolved once per model class
    _hints: ClassVar[dict[type, dict[str, Any]]] = {}

    def __post_init__(self) -> None:
        problems = list(self._field_problems())
        if not problems:
            problems = list(self.check())
        if problems:
            raise BackendOptionsError(type(self).__name__, problems)

    # ---- the model's own rules ---------------------------------------------------------------
    def check(self) -> Iterable[OptionProblem]:
        """Rules between options (the fields are already well typed and in bounds); a model
        overrides this to yield an :class:`OptionProblem` per violation."""
        return ()

    # ---- parsing ----------------------------------------------------------------------------
    @classmethod
    def names(cls) -> tuple[str, ...]:
        """The options of this model, in declaration order."""
        return tuple(f.name for f in dataclasses.fields(cls))

    @classmethod
    def parse(cls: type[OptionsT], values: Mapping[str, Any], *, backend: str) -> OptionsT:
        """The model from a mapping of option values (a YAML section, constructor keywords).
        Raises :class:`BackendOptionsError` naming ``backend`` and every option at fault: unknown
        names (with the options it does take), wrong types, values out of bounds."""
        owner = f"backend {backend!r}"
        if not isinstance(values, Mapping):
            raise BackendOptionsError(owner, [OptionProblem(
                "(all)", "expected a mapping of option names to values", values)])
        known = set(cls.names())
        takes = f"{owner} takes: {', '.join(cls.names())}" if known else f"{owner} takes none"
        problems = [OptionProblem(str(k), f"unknown option ({takes})", v, unknown=True)
                    for k, v in values.items() if k not in known]
        try:
            inst = cls(**{k: v for k, v in values.items() if k in known})
        except BackendOptionsError as exc:
            problems.extend(exc.problems)
        if problems:
            raise BackendOptionsError(owner, problems)
        return inst

    def to_dict(self) -> dict[str, Any]:
        """Every option with its value (defaults included)."""
        return {name: getattr(self, name) for name in self.names()}

    @classmethod
    def docs(cls) -> list[tuple[str, str, Any, str]]:
        """(name, accepted values, default, doc line) per option, for help texts and docs."""
        hints = cls._resolved_hints()
        return [(f.name, _describe(hints[f.name]), f.default, f.metadata.get("doc", ""))
                for f in dataclasses.fields(cls)]

    # ---- internals --------------------------------------------------------------------------
    @classmethod
    def _resolved_hints(cls) -> dict[str, Any]:
        hints = BackendOptions._hints.get(cls)
        if hints is None:
            hints = typing.get_type_hints(cls)
            BackendOptions._hints[cls] = hints
        return hints

    def _field_problems(self) -> Iterable[OptionProblem]:
        hints = self._resolved_hints()
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            got = _conform(hints[f.name], value)
            if got is _NO:
                yield OptionProblem(f.name, f"must be {_describe(hints[f.name])}", value)
                continue
            if got is not value:
                object.__setattr__(self, f.name, got)     # frozen: the widened value
            if isinstance(got, (int, float)) and not isinstance(got, bool):
                for kind, bound in f.metadata.get("bounds", {}).items():
                    sign, holds = _BOUNDS[kind]
                    if not holds(got, bound):
                        yield OptionProblem(f.name, f"must be {sign} {bound}", value)
                        break
