"""The gpu key blobs have one layout definition (src/key_layout.h): the C++ side expands its tables
into the kernels' parsers and the host harness's walk, keys.py/layout.py read the same file.  These
tests fail when the two readings drift apart (an entry the Python reader parses differently, a
table the C++ side expands differently) or when a blob does not match its table."""

from __future__ import annotations

import numpy as np
import pytest

from unifl.backends.gpu import keys, layout
from unifl.backends.gpu.host import _gpu_host
from unifl.base_op import mont_context
from unifl.phe_sdk import paillier

needs_harness = pytest.mark.skipif(_gpu_host is None, reason="gpu host harness not built")


@pytest.fixture(scope="module", params=[1024, 1030, 2048])
def key(request: pytest.FixtureRequest) -> tuple[object, object]:
    return paillier.keygen(request.param)


def _blobs(key: tuple[object, object]) -> list[tuple[int, np.ndarray]]:
    pk, sk = key
    return [(0, keys.ctx_blob(mont_context(pk.n))), (0, keys.ctx_blob(pk.material.nsquare_ctx)),
            (1, keys.pub_blob(pk.material)), (2, keys.priv_blob(sk.material)),
            (3, keys.owner_blob(sk.material))]


@needs_harness
def test_cpp_and_python_walk_every_blob_alike(key: tuple[object, object]) -> None:
    for kind, blob in _blobs(key):
        cpp = [(name, off, n) for name, off, n in _gpu_host.blob_fields(blob, kind)]
        py = layout.walk(layout.KINDS[kind], blob).fields
        assert cpp == py, layout.KINDS[kind]
        assert py[-1][1] + py[-1][2] == blob.size


def test_blobs_hold_the_constants_where_the_table_says(key: tuple[object, object]) -> None:
    pk, sk = key
    sm = sk.material
    w = layout.walk("PRIV_KEY", keys.priv_blob(sm))
    blob = keys.priv_blob(sm)
    at = {name: (off, n) for name, off, n in w.fields}

    def value(name: str) -> int:
        off, n = at[name]
        return sum(int(blob[off + j]) << (64 * j) for j in range(n))
    assert value("qv") == sm.q and value("pm1") == sm.p - 1 and value("qinv_p") == sm.q_inverse
    assert value("p.m") == sm.p and value("q2.m") == sm.q * sm.q
    assert w.words["Ln"] == pk.material.n_ctx.num_limbs
    assert w.ctx_limbs["p2"] == sm.psquare_ctx.num_limbs


@needs_harness
@pytest.mark.parametrize("cut", [1, 5])
def test_truncated_or_padded_blobs_are_refused_by_both(key: tuple[object, object], cut: int) -> None:
    for kind, blob in _blobs(key):
        for bad in (blob[:-cut], np.concatenate([blob, np.zeros(cut, np.uint64)])):
            with pytest.raises(layout.LayoutError):
                layout.walk(layout.KINDS[kind], bad)
            with pytest.raises(ValueError, match="key"):
                _gpu_host.blob_fields(np.ascontiguousarray(bad), kind)


def test_assemble_checks_every_field() -> None:
    ctx = keys.ctx_blob(mont_context((1 << 127) - 1))
    with pytest.raises(layout.LayoutError, match="no value for n"):
        layout.assemble("PUB_KEY", {"n2": ctx, "Ln": 1})
    with pytest.raises(layout.LayoutError, match="no field nn"):
        layout.assemble("PUB_KEY", {"n2": ctx, "Ln": 1, "n": 3, "nn": 1})
    with pytest.raises(layout.LayoutError, match="2 words by the table, got 1"):
        layout.assemble("PUB_KEY", {"n2": ctx, "Ln": 2, "n": np.zeros(1, np.uint64)})
    with pytest.raises(layout.LayoutError, match="do not fit 1 words"):
        layout.assemble("PUB_KEY", {"n2": ctx, "Ln": 1, "n": 1 << 64})
    with pytest.raises(layout.LayoutError, match="count in"):
        layout.assemble("PUB_KEY", {"n2": ctx, "Ln": 0, "n": 0})


@pytest.mark.parametrize("text, match", [
    ("#define UNIFL_LAYOUT_X(CTX, WORD, VALUE, LIMBS) \\\n    WORD(a)   \\\n    junk\n", "not a field"),
    ("#define UNIFL_LAYOUT_X(CTX, WORD, VALUE, LIMBS) \\\n    LIMBS(a, b)\n", "defined before"),
    ("#define UNIFL_LAYOUT_X(CTX, WORD, VALUE, LIMBS) \\\n    WORD(a) \\\n    LIMBS(b, a.L)\n",
     "defined before"),
    ("#define UNIFL_LAYOUT_X(CTX, WORD, VALUE, LIMBS) \\\n    WORD(a, 3)\n", "takes no count"),
    ("#define UNIFL_LAYOUT_X(CTX, WORD, VALUE, LIMBS) \\\n    WORD(a) \\\n", "not closed"),
    ("#define UNIFL_LAYOUT_X(CTX, WORD, VALUE, LIMBS) \\\n    WORD(a) \\\n    WORD(a)\n", "twice"),
    ("", "no table for"),
])
def test_the_header_reader_is_strict(text: str, match: str) -> None:
    with pytest.raises(layout.LayoutError, match=match):
        layout.parse_header(text)


def test_the_packaged_header_has_every_kind() -> None:
    tables = layout.layouts()
    assert set(layout.KINDS.values()) <= set(tables)
    assert [f.name for f in tables["MOD_CTX"]] == ["n0inv", "L", "m", "r1", "r2"]


def test_the_cuda_runtime_reads_operand_sizes_from_the_layout(key: tuple[object, object]) -> None:
    from unifl.backends.gpu.runtime import _blob_sizes
    pk, sk = key
    pm, sm = pk.material, sk.material
    Ln, L2 = pm.n_ctx.num_limbs, pm.nsquare_ctx.num_limbs
    assert _blob_sizes(keys.ctx_blob(pm.n_ctx), 0) == {"L": Ln}
    assert _blob_sizes(keys.pub_blob(pm), 1) == {"L2": L2, "Ln": Ln}
    assert _blob_sizes(keys.priv_blob(sm), 2) == {"L2": L2, "Ln": Ln}
    assert _blob_sizes(keys.owner_blob(sm), 3) == {
        "L2": L2, "Ln": Ln, "Lp2": sm.psquare_ctx.num_limbs, "Lq2": sm.qsquare_ctx.num_limbs,
        "Lp": sm.p_limbs, "Lq": sm.q_limbs}
