"""Load and validate the YAML files of a run; every error names the file, the field and what is
allowed (:class:`unifl.core.errors.ConfigError`).

Nothing here imports pydantic: the party schema (:mod:`unifl.configs.schema`) is plain Python, so a
FATE worker (pydantic 1) loads a party's YAML through the same path as ``unifl run``; the job schema
(``unifl.app.params``, pydantic 2) comes through :func:`validate` as well, whose errors are read
the same way (``errors()``)."""

from __future__ import annotations

import os
import reprlib
from pathlib import Path
from typing import Any, Protocol, TypeVar

import yaml

from ..core.errors import ConfigError
from .schema import PartyConfig

EXAMPLES_DIR = Path(__file__).resolve().parent
#: most nodes a YAML file may expand to once aliases are followed: a "billion laughs" file of a few
#: lines would otherwise build a structure too large to validate, print or dump
MAX_NODES = 100_000
MAX_DEPTH = 64
#: the offending value in an error message, shortened (bounded work however large it is)
_SHORT = reprlib.Repr()
_SHORT.maxstring = _SHORT.maxother = 120
M = TypeVar("M", bound="Validated")


class Validated(Protocol):
    """A schema class: a config section (:mod:`unifl.configs.model`) or a pydantic model."""

    @classmethod
    def model_validate(cls: type[M], obj: Any) -> M: ...


def example_path(name: str) -> Path:
    """The shipped example config ``name`` (with or without ``.yaml``)."""
    path = EXAMPLES_DIR / (name if name.endswith(".yaml") else f"{name}.yaml")
    if not path.is_file():
        shipped = sorted(p.name for p in EXAMPLES_DIR.glob("*.yaml"))
        raise ConfigError(f"no shipped config {name!r}; shipped: {', '.join(shipped)}")
    return path


def resolve(path: str | os.PathLike) -> Path:
    """A config path as given, else the shipped example of that name (``guest_fpga.yaml``)."""
    p = Path(path)
    if p.is_file():
        return p
    if p.parent == Path(".") or str(p.parent) == "":
        return example_path(p.name)
    raise ConfigError(f"{p}: no such config file")


def _format(where: str, errors: list[dict[str, Any]]) -> str:
    lines = []
    for err in errors:
        loc = [str(x) for x in err["loc"] if x != "[key]"]     # a bad mapping key: name the key
        field = ".".join(loc) or "(top level)"
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = "unknown field"
        given = (f" (got {_SHORT.repr(err['input'])})"
                 if err["type"] not in ("missing", "model_type", "rule") else "")
        lines.append(f"{where}: field '{field}': {msg}{given}")
    return "\n".join(lines)


def validate(model: type[M], data: Any, where: str = "<config>") -> M:
    """``model`` from a parsed mapping; ConfigError naming ``where`` and the field on failure."""
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a mapping of fields, got {type(data).__name__}")
    try:
        return model.model_validate(data)
    except ValueError as exc:       # a SchemaError, or pydantic's ValidationError: errors() both
        errors = getattr(exc, "errors", None)
        if not callable(errors):
            raise
        raise ConfigError(_format(where, list(errors()))) from None


class _Loader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses nesting deeper than ``MAX_DEPTH`` while composing (Python's
    recursion limit would otherwise end a deep file slowly, with a RecursionError)."""

    _depth = 0

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise yaml.YAMLError(f"nested deeper than {MAX_DEPTH} levels")
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def _expanded_size(node: yaml.Node, memo: dict[int, int | None], where: Path) -> int:
    """Nodes ``node`` stands for once aliases are followed (memoised: linear in the file)."""
    key = id(node)
    if key in memo:
        known = memo[key]
        if known is None:
            raise ConfigError(f"{where}: a YAML alias refers to itself (recursive structure)")
        return known
    memo[key] = None
    size = 1
    if isinstance(node.value, list):          # sequence: nodes; mapping: (key, value) pairs
        for item in node.value:
            for child in (item if isinstance(item, tuple) else (item,)):
                size += _expanded_size(child, memo, where)
                if size > MAX_NODES:
                    raise ConfigError(f"{where}: expands to more than {MAX_NODES} YAML nodes "
                                      "(aliases repeated into a huge structure?)")
    memo[key] = size
    return size


def _read(path: str | os.PathLike) -> tuple[Path, Any]:
    p = resolve(path)
    try:
        loader = _Loader(p.read_text(encoding="utf-8"))
        try:
            # compose, bound the size aliases expand to, then construct (what safe_load does)
            node = loader.get_single_node()
            if node is None:
                return p, None
            _expanded_size(node, {}, p)
            try:
                return p, loader.construct_document(node)
            except (ValueError, TypeError, IndexError, KeyError, OverflowError) as exc:
                # PyYAML's constructors fail untyped on some explicitly tagged scalars
                # (`!!int` with an empty value: IndexError; a >4300-digit int, a bad date: ValueError)
                raise ConfigError(f"{p}: not valid YAML: a value cannot be converted "
                                  f"({type(exc).__name__}: {str(exc)[:200]})") from None
        finally:
            loader.dispose()
    except ConfigError:
        raise
    except yaml.YAMLError as exc:
        raise ConfigError(f"{p}: not valid YAML: {exc}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{p}: not UTF-8 text: {exc}") from None
    except RecursionError:
        raise ConfigError(f"{p}: not valid YAML: nested too deeply") from None
    except ValueError as exc:     # a scalar YAML cannot convert: a >4300-digit int, a bad date
        raise ConfigError(f"{p}: not valid YAML: {exc}") from None
    except OSError as exc:
        raise ConfigError(f"{p}: cannot read: {exc}") from None


def read_yaml(path: str | os.PathLike) -> tuple[Path, Any]:
    """The file ``path`` resolves to (:func:`resolve`) and its parsed YAML (None when empty),
    within the size and depth bounds above; ConfigError naming the file otherwise.  The job
    loader of :mod:`unifl.app.params` reads job files through it."""
    return _read(path)


def load_party(path: str | os.PathLike, **overrides: Any) -> PartyConfig:
    """A party's YAML, validated; ``overrides`` replace top-level fields before validation."""
    p, data = _read(path)
    if isinstance(data, dict):
        data.update(overrides)
    return validate(PartyConfig, data, str(p))
