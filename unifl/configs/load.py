"""Load and validate the YAML files of a run; every error names the file, the field and what is
allowed (:class:`unifl.errors.ConfigError`)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from ..errors import ConfigError
from .schema import JobConfig, PartyConfig

EXAMPLES_DIR = Path(__file__).resolve().parent
M = TypeVar("M", bound=BaseModel)


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


def _format(where: str, exc: ValidationError) -> str:
    lines = []
    for err in exc.errors():
        loc = [str(x) for x in err["loc"] if x != "[key]"]     # a bad mapping key: name the key
        field = ".".join(loc) or "(top level)"
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = "unknown field"
        given = f" (got {err['input']!r})" if err["type"] not in ("missing", "model_type") else ""
        lines.append(f"{where}: field '{field}': {msg}{given}")
    return "\n".join(lines)


def validate(model: type[M], data: Any, where: str = "<config>") -> M:
    """``model`` from a parsed mapping; ConfigError naming ``where`` and the field on failure."""
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a mapping of fields, got {type(data).__name__}")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_format(where, exc)) from None


def _read(path: str | os.PathLike) -> tuple[Path, Any]:
    p = resolve(path)
    try:
        return p, yaml.safe_load(p.read_text())
    except yaml.YAMLError as exc:
        raise ConfigError(f"{p}: not valid YAML: {exc}") from None
    except OSError as exc:
        raise ConfigError(f"{p}: cannot read: {exc}") from None


def load_party(path: str | os.PathLike, **overrides: Any) -> PartyConfig:
    """A party's YAML, validated; ``overrides`` replace top-level fields before validation."""
    p, data = _read(path)
    if isinstance(data, dict):
        data.update(overrides)
    return validate(PartyConfig, data, str(p))


def load_job(path: str | os.PathLike, **overrides: Any) -> JobConfig:
    """A job YAML, validated."""
    p, data = _read(path)
    if isinstance(data, dict):
        data.update(overrides)
    return validate(JobConfig, data, str(p))
