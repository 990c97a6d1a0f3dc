"""The key-blob layouts of the gpu kernels, read from their one definition, ``src/key_layout.h``.

A key blob is one ``uint64`` array holding every constant of a kind of key, field after field in the
order of its table there (the C++ side expands the same tables into the kernels' parsers and the
host harness's checks).  This module reads the tables (:data:`LAYOUTS`), builds blobs from named
values (:func:`assemble`, used by ``keys.py``) and walks blobs back into fields (:func:`walk`,
used for the operand sizes the CUDA runtime checks).  The file is parsed once, strictly: a line in
a table that is not one ``KIND(name[, count])`` entry is an error, not something skipped.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from ...core.limbs import to_limbs

HEADER = os.path.join(os.path.dirname(__file__), "src", "key_layout.h")

#: blob kinds as the kernels number them (kernel_backend.KIND_*) -> table names
KINDS = {0: "MOD_CTX", 1: "PUB_KEY", 2: "PRIV_KEY", 3: "OWNER_KEY"}

#: a count is bounded like the C++ walk bounds it (kernels.cuh MAX_BLOB_LIMBS)
MAX_COUNT = 128

_TABLE = re.compile(r"^#define UNIFL_LAYOUT_(\w+)\(CTX, WORD, VALUE, LIMBS\)\s*\\$")
_ENTRY = re.compile(r"^\s+(CTX|WORD|VALUE|LIMBS)\((\w+)(?:,\s*([^)]*))?\)\s*(\\?)$")
_COUNT = re.compile(r"^(?:(\w+)\s*\*\s*)?(\w+)(\.L)?$")


class LayoutError(ValueError):
    """``src/key_layout.h`` does not parse, or a blob or its values do not fit their table."""


@dataclass(frozen=True)
class Count:
    """A LIMBS field's length: ``factor`` (a WORD, or None) times ``base`` (a WORD, or a CTX's
    ``L`` when ``of_ctx``)."""

    factor: str | None
    base: str
    of_ctx: bool

    def value(self, words: Mapping[str, int], ctx_limbs: Mapping[str, int]) -> int:
        base = ctx_limbs[self.base] if self.of_ctx else words[self.base]
        return base * (words[self.factor] if self.factor else 1)


@dataclass(frozen=True)
class Field:
    """One field of a table: ``kind`` CTX, WORD, VALUE or LIMBS; ``count`` for LIMBS."""

    kind: str
    name: str
    count: Count | None = None


def parse_header(text: str) -> dict[str, tuple[Field, ...]]:
    """The tables of ``key_layout.h``: {table name: its fields in order}.  Every count must name
    fields of the right kind defined before it; LayoutError otherwise."""
    tables: dict[str, tuple[Field, ...]] = {}
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        m = _TABLE.match(lines[i])
        i += 1
        if not m:
            continue
        name, more = m.group(1), True
        fields: list[Field] = []
        while more:
            if i >= len(lines):
                raise LayoutError(f"key_layout.h: table {name} is not closed")
            e = _ENTRY.match(lines[i])
            if not e:
                raise LayoutError(f"key_layout.h: table {name}: not a field entry: {lines[i]!r}")
            kind, fname, count_text, more = e.group(1), e.group(2), e.group(3), bool(e.group(4))
            i += 1
            count = None
            if kind == "LIMBS":
                count = _parse_count(name, fname, count_text or "", fields)
            elif count_text is not None:
                raise LayoutError(f"key_layout.h: {name}.{fname}: {kind} takes no count")
            if any(f.name == fname for f in fields):
                raise LayoutError(f"key_layout.h: {name}.{fname} is defined twice")
            fields.append(Field(kind, fname, count))
        if name in tables:
            raise LayoutError(f"key_layout.h: table {name} is defined twice")
        tables[name] = tuple(fields)
    missing = set(KINDS.values()) - set(tables)
    if missing:
        raise LayoutError(f"key_layout.h: no table for {', '.join(sorted(missing))}")
    return tables


def _parse_count(table: str, field: str, text: str, before: list[Field]) -> Count:
    m = _COUNT.match(text.strip())
    if not m:
        raise LayoutError(f"key_layout.h: {table}.{field}: count {text!r} is not W, c.L or W * c.L")
    factor, base, of_ctx = m.group(1), m.group(2), bool(m.group(3))
    kinds = {f.name: f.kind for f in before}
    if kinds.get(base) != ("CTX" if of_ctx else "WORD") or (factor and kinds.get(factor) != "WORD"):
        raise LayoutError(f"key_layout.h: {table}.{field}: count {text!r} must name a WORD (and a "
                          "CTX for .L) defined before it")
    return Count(factor, base, of_ctx)


@functools.cache
def layouts() -> dict[str, tuple[Field, ...]]:
    """The tables of the packaged ``src/key_layout.h`` (read once)."""
    with open(HEADER, encoding="utf-8") as fh:
        return parse_header(fh.read())


BlobValue = int | np.ndarray


def assemble(table: str, values: Mapping[str, BlobValue]) -> np.ndarray:
    """A blob of ``table`` from its fields' values: a CTX field takes a modulus-context blob (itself
    assembled from MOD_CTX), WORD and VALUE fields an int, a LIMBS field an int (written in the
    number of words its count gives) or a uint64 array of exactly that many words.  A missing,
    extra or misfit value raises LayoutError naming the field."""
    fields = layouts()[table]
    extra = set(values) - {f.name for f in fields}
    if extra:
        raise LayoutError(f"{table}: no field {', '.join(sorted(extra))}")
    words: dict[str, int] = {}
    ctx_limbs: dict[str, int] = {}
    parts: list[np.ndarray] = []
    for f in fields:
        if f.name not in values:
            raise LayoutError(f"{table}: no value for {f.name}")
        v = values[f.name]
        if f.kind == "CTX":
            sub = np.asarray(v, dtype=np.uint64)
            ctx_limbs[f.name] = walk("MOD_CTX", sub).words["L"]
            parts.append(sub)
        elif f.kind in ("WORD", "VALUE"):
            if not isinstance(v, (int, np.integer)) or not 0 <= int(v) < 1 << 64:
                raise LayoutError(f"{table}.{f.name}: a {f.kind} is one uint64 word, got {v!r}")
            if f.kind == "WORD" and not 1 <= int(v) <= MAX_COUNT:
                raise LayoutError(f"{table}.{f.name}: a count in [1, {MAX_COUNT}], got {int(v)}")
            words[f.name] = int(v)
            parts.append(np.array([int(v)], dtype=np.uint64))
        else:
            assert f.count is not None
            n = f.count.value(words, ctx_limbs)
            if isinstance(v, (int, np.integer)):
                if not 0 <= int(v) < 1 << (64 * n):
                    raise LayoutError(f"{table}.{f.name}: {int(v).bit_length()} bits do not fit "
                                      f"{n} words")
                arr = to_limbs([int(v)], n)[0]
            else:
                arr = np.asarray(v, dtype=np.uint64).reshape(-1)
                if arr.size != n:
                    raise LayoutError(f"{table}.{f.name}: {n} words by the table, got {arr.size}")
            parts.append(arr)
    return np.ascontiguousarray(np.concatenate(parts), dtype=np.uint64)


@dataclass
class Walk:
    """A blob read along its table: ``fields`` (name, offset, words) in order -- a context's own
    fields as ``ctx.field`` --, ``words`` the WORD and VALUE fields (a context's as ``ctx.L``...),
    ``ctx_limbs`` each CTX field's limb count."""

    fields: list[tuple[str, int, int]]
    words: dict[str, int]
    ctx_limbs: dict[str, int]


def walk(table: str, blob: np.ndarray) -> Walk:
    """The fields of ``blob`` along ``table`` (the blob must end where the table does); LayoutError
    on a truncated blob, a count outside [1, 128] or trailing words."""
    blob = np.asarray(blob, dtype=np.uint64).reshape(-1)
    out = Walk([], {}, {})
    end = _walk(table, blob, "", 0, out)
    if end != blob.size:
        raise LayoutError(f"{table}: {blob.size - end} trailing words")
    return out


def _walk(table: str, blob: np.ndarray, prefix: str, pos: int, out: Walk) -> int:
    """Walks one table from ``pos`` into ``out``; returns where it ends."""
    own: dict[str, int] = {}
    own_ctx: dict[str, int] = {}
    for f in layouts()[table]:
        name = prefix + f.name
        if f.kind == "CTX":
            pos = _walk("MOD_CTX", blob, name + ".", pos, out)
            own_ctx[f.name] = out.ctx_limbs[name] = out.words[name + ".L"]
        elif f.kind in ("WORD", "VALUE"):
            if pos >= blob.size:
                raise LayoutError(f"{table}: blob truncated before {name}")
            v = int(blob[pos])
            if f.kind == "WORD" and not 1 <= v <= MAX_COUNT:
                raise LayoutError(f"{table}: {name} = {v} outside [1, {MAX_COUNT}]")
            own[f.name] = out.words[name] = v
            out.fields.append((name, pos, 1))
            pos += 1
        else:
            assert f.count is not None
            n = f.count.value(own, own_ctx)
            if pos + n > blob.size:
                raise LayoutError(f"{table}: blob truncated in {name}")
            out.fields.append((name, pos, n))
            pos += n
    return pos
