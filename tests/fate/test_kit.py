"""The ``unifl`` FATE kit against FATE's own paillier kit on the same inputs (FATE venv only:
``make test-fate``)."""

import pickle

import numpy as np
import pytest

fate = pytest.importorskip("fate", reason="pyfate 2.2 is not installed here (run `make test-fate`)")
torch = pytest.importorskip("torch")

from fate.arch.protocol.phe import paillier as ref  # noqa: E402

from unifl.base_op import from_limbs, to_mont  # noqa: E402
from unifl.core.errors import InvalidCiphertextError  # noqa: E402
from unifl.phe_sdk.array import EncryptedArray  # noqa: E402
from unifl.fate import kit, party, register  # noqa: E402
from tests.helpers.paths import ROOT as REPO_ROOT  # noqa: E402

pytestmark = pytest.mark.fate

BACKENDS = ["cpu", "native"]


@pytest.fixture(scope="module")
def keys():
    return kit.keygen(1024), ref.keygen(1024)


@pytest.fixture(params=BACKENDS)
def backend(request):
    party.set_backend(request.param)
    yield request.param
    party.set_backend(None)


def enc(kitkeys, x, obfuscate=True):
    sk, pk, coder = kitkeys
    return pk.encrypt_encoded(coder.encode_tensor(x), obfuscate=obfuscate)


def dec(kitkeys, ev, dtype=torch.float64):
    sk, pk, coder = kitkeys
    return coder.decode_tensor(sk.decrypt_to_encoded(ev), dtype)


RNG = np.random.default_rng(3)
X = torch.tensor(RNG.normal(size=12))
Y = torch.tensor(RNG.normal(size=12))
INTS = torch.tensor(RNG.integers(-50, 50, 12))


def both(keys, fn_name, *args, from_ref=None):
    """Run evaluator.fn_name on our kit and on FATE's with the same plaintexts, decrypt both."""
    out = []
    for kk, mod in ((keys[0], kit), (keys[1], ref)):
        sk, pk, coder = kk
        a = enc(kk, args[0])
        res = getattr(mod.evaluator, fn_name)(a, *args[1:], pk, coder, torch.float64) \
            if fn_name.endswith(("_plain", "_scalar")) else None
        out.append(dec(kk, res))
    return out


@pytest.mark.parametrize("op", ["add_plain", "sub_plain", "rsub_plain", "mul_plain"])
def test_plain_ops_match_fate(keys, backend, op):
    ours, theirs = both(keys, op, X, Y)
    np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("op", ["add_plain_scalar", "sub_plain_scalar", "rsub_plain_scalar",
                                "mul_plain_scalar"])
def test_scalar_ops_match_fate(keys, backend, op):
    ours, theirs = both(keys, op, X, 0.25)
    np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("op", ["add", "sub", "rsub"])
def test_cipher_ops_match_fate(keys, backend, op):
    res = []
    for kk, mod in ((keys[0], kit), (keys[1], ref)):
        res.append(dec(kk, getattr(mod.evaluator, op)(enc(kk, X), enc(kk, Y), kk[1])))
    np.testing.assert_allclose(res[0].numpy(), res[1].numpy(), atol=1e-9)


def test_matmul_rmatmul_match_fate(keys, backend):
    a = torch.tensor(RNG.normal(size=(3, 4)))
    b = torch.tensor(RNG.integers(-1000, 1000, (4, 2)))
    bt = torch.tensor(RNG.normal(size=(2, 3)))
    for fn, plain, a_shape, b_shape in (("matmul", b, (3, 4), (4, 2)),
                                        ("rmatmul", bt, (3, 4), (2, 3))):
        res = []
        for kk, mod in ((keys[0], kit), (keys[1], ref)):
            ev = getattr(mod.evaluator, fn)(enc(kk, a.flatten()), plain, a_shape, b_shape, kk[1],
                                            kk[2], plain.dtype)
            res.append(dec(kk, ev))
        want = (a.numpy() @ b.numpy().astype(float)) if fn == "matmul" else bt.numpy() @ a.numpy()
        np.testing.assert_allclose(res[0].numpy(), want.ravel(), rtol=1e-9)
        np.testing.assert_allclose(res[0].numpy(), res[1].numpy(), rtol=1e-9)


def test_histogram_ops_match_fate(keys, backend):
    """zeros, i_update(_with_masks), i_add/i_sub, chunking_cumsum, intervals_sum, shuffle, slice,
    intervals_slice, cat -- the SecureBoost histogram path -- give FATE's results."""
    g = torch.tensor(RNG.normal(size=8))
    pos = [[int(v) for v in RNG.integers(0, 6, 2)] for _ in range(4)]   # 4 rows, stride 2
    perm = [int(v) for v in RNG.permutation(12)]
    res = []
    for kk, mod in ((keys[0], kit), (keys[1], ref)):
        sk, pk, coder = kk
        ev = mod.evaluator
        h = ev.zeros(12, torch.float64)
        ev.i_update(pk, h, enc(kk, g), pos, 2)
        h2 = ev.zeros(12, torch.float64)
        ev.i_update_with_masks(pk, h2, enc(kk, g), [[1, 3], [0, 5], [2, 2]], [True, True, False, True], 2)
        ev.i_add(pk, h, h2, 2, 0, 6)
        ev.i_sub(pk, h, enc(kk, X), 0, 3, 4)
        ev.chunking_cumsum_with_step(pk, h, [4, 8], 2)
        if mod is kit:
            s = ev.intervals_sum_with_step(pk, h, [(0, 4), (6, 12)], 2)
        else:  # FATE's Python evaluator lacks it; its Rust vector has it
            s = h.intervals_sum_with_step(pk.pk, [(0, 4), (6, 12)], 2)
        sh = ev.shuffle(pk, h, perm)
        ev.i_shuffle(pk, h2, perm)
        cat = ev.cat([ev.slice(sh, 1, 3), ev.intervals_slice(h2, [(0, 2), (5, 9)])])
        res.append([dec(kk, v).numpy() for v in (h, h2, s, sh, cat)])
    for ours, theirs in zip(*res):
        np.testing.assert_allclose(ours, theirs, atol=1e-9)


def test_pack_floats_and_squeeze_match_fate(keys, backend):
    gh = torch.tensor(np.abs(RNG.normal(size=7)))
    res = []
    for kk, mod in ((keys[0], kit), (keys[1], ref)):
        sk, pk, coder = kk
        packed = pk.encrypt_encoded(coder.pack_floats(gh, 60, 2, 52), obfuscate=True)
        assert len(packed) == 4
        summed = mod.evaluator.add(packed, packed, pk)
        out = coder.unpack_floats(sk.decrypt_to_encoded(summed), 60, 2, 52, 7)
        sq = mod.evaluator.pack_squeeze(summed, 3, 120, pk)
        assert len(sq) == 2
        d = sk.decrypt_to_encoded(sq)
        res.append((out.numpy(), coder.unpack_floats(d, 60, 6, 52, 7).numpy()))
    np.testing.assert_allclose(res[0][0], 2 * gh.numpy(), rtol=1e-6)
    for ours, theirs in zip(res[0], res[1]):
        assert ours.dtype == theirs.dtype
        np.testing.assert_array_equal(ours, theirs)


def test_encode_decode_dtypes(keys):
    sk, pk, coder = keys[0]
    i = coder.decode_tensor(sk.decrypt_to_encoded(enc(keys[0], INTS)), torch.int64)
    assert i.tolist() == INTS.tolist()
    f = coder.decode_i64_vec(coder.encode_f64_vec(torch.tensor([1.5, -2.7])))
    assert f.tolist() == [1, -3]   # floor, as FATE's coder
    assert coder.decode_f64(coder.encode_f64(0.1)) == 0.1
    assert coder.decode_i64(coder.encode(torch.tensor(7))) == 7


def test_pickles_reduce_to_plain_data(keys):
    """Every kit object pickles to our classes plus ints/bytes only: FATE's federation unpickler
    accepts them once the six names are allowed, and rejects anything else."""
    sk, pk, coder = keys[0]
    ev = enc(keys[0], X)
    lazy = kit.evaluator.zeros(3)
    for obj in (pk, coder, kit.evaluator, ev, lazy, coder.encode_tensor(X)):
        globals_used = set()

        class Spy(pickle.Unpickler):
            def find_class(self, module, name):
                globals_used.add((module, name))
                return super().find_class(module, name)
        import io
        back = Spy(io.BytesIO(pickle.dumps(obj))).load()
        assert {(m, n) for m, n in globals_used} <= {("unifl.fate.kit", n)
                                                     for n in register.ALLOWED["unifl.fate.kit"]}
    back = pickle.loads(pickle.dumps(ev))
    np.testing.assert_allclose(dec(keys[0], back).numpy(), X.numpy(), atol=1e-12)
    assert pickle.loads(pickle.dumps(pk)) == pk


def test_keys_of_received_moduli_are_held_in_a_bounded_cache(keys):
    """A peer that sends PKs of ever new moduli (each unpickled, as FATE's federation does) must
    not grow this process without bound: at most MAX_KEYS are kept, least recently used first
    out, and a key in use stays the one object for its modulus."""
    import secrets
    _sk, pk, _coder = keys[0]
    mine = pickle.loads(pickle.dumps(pk))
    for _ in range(kit.MAX_KEYS + 40):
        n = (secrets.randbits(512) | 3 << 510 | 1) * (secrets.randbits(512) | 3 << 510 | 1)
        assert pickle.loads(pickle.dumps(kit.PK(n))).n == n
        pickle.loads(pickle.dumps(pk))                      # this party's own key stays in use
    assert len(kit._keys) <= kit.MAX_KEYS
    assert kit._public_key(pk.n) is mine.key


def test_allow_list_is_exact_and_restriction_stays_on():
    from fate.arch.config import cfg
    from fate.arch.federation.api import _serdes
    allow = _serdes.TableRemotePersistentUnpickler._TableRemotePersistentUnpickler__ALLOW_CLASSES
    assert allow["unifl.fate.kit"] == register.ALLOWED["unifl.fate.kit"]
    assert not any(k.startswith("unifl") and k != "unifl.fate.kit" for k in allow)
    assert cfg.safety.serdes.federation.restricted_type == "restricted"


def test_dispatch_builds_unifl_cipher_and_keeps_paillier():
    from fate.arch.context import _cipher
    b = _cipher.PHECipherBuilder(None, "unifl", 1024, backend="cpu")
    c = b.setup()
    assert c.kind == "unifl" and isinstance(c.pk, kit.PK)
    assert party.current_backend().name == "cpu"
    enc_ = c.get_tensor_encryptor()
    t = torch.tensor([[1.0, -2.0], [0.5, 3.0]])
    et = enc_.encrypt_tensor(t)
    out = c.get_tensor_decryptor().decrypt_tensor(et * 2.0 + t)
    np.testing.assert_allclose(out.numpy(), (t * 3).numpy())
    p = _cipher.PHECipherBuilder(None, "paillier", 1024).setup()
    assert p.kind == "paillier"
    party.set_backend(None)
    with pytest.raises(ValueError):
        _cipher.PHECipherBuilder(None, "unifl", 512).setup()


def test_he_param_accepts_unifl():
    from fate.components.core.params import he_param
    assert he_param()(kind="unifl", key_length=1024).kind == "unifl"
    assert he_param()(kind="paillier", key_length=1024).kind == "paillier"


def test_components_are_fate_builtins_under_unifl_names():
    """The entry-point components (pyproject.toml's fate.ext.component_desc group) are FATE's
    built-ins renamed, same stages."""
    import tomllib

    from fate.components.components import coordinated_lr, hetero_secureboost

    from unifl.fate import components
    with open(str(REPO_ROOT / "pyproject.toml"), "rb") as f:
        group = tomllib.load(f)["project"]["entry-points"]["fate.ext.component_desc"]
    assert all(target == f"unifl.fate.components:{name}" for name, target in group.items())
    names = list(group)
    assert set(names) == {"unifl_coordinated_lr", "unifl_coordinated_linr",
                          "unifl_hetero_secureboost"}
    for name in names:
        assert getattr(components, name).name == name
    assert components.unifl_coordinated_lr.callback is coordinated_lr.coordinated_lr.callback
    assert [s.name for s in components.unifl_hetero_secureboost.stage_components] == \
        [s.name for s in hetero_secureboost.hetero_secureboost.stage_components]
    assert coordinated_lr.coordinated_lr.name == "coordinated_lr"   # the built-in is untouched


# ----------------------------------------------------------------------- one Paillier path
def wire_ints(ev):
    """The plain ciphertext ints an EV pickles to (what another party receives)."""
    _, args = ev.__reduce__()
    return from_limbs(np.frombuffer(args[0], dtype="<u8").reshape(-1, args[3]))


def test_kit_and_encrypted_array_compute_the_same_ciphertexts(keys, backend):
    """The kit's evaluator and EncryptedArray are one path: on the same ciphertexts they give the
    same ciphertexts, bit for bit (negative multipliers included)."""
    sk, pk, coder = keys[0]
    be = party.current_backend()
    x, y = (torch.tensor(RNG.integers(-1000, 1000, 6)) for _ in range(2))
    k = torch.tensor(RNG.integers(-50, 50, 6))
    mat = torch.tensor(RNG.integers(-9, 9, (3, 2)))
    ex, ey = enc(keys[0], x), enc(keys[0], y)

    def arr(ev):
        plain = pk.ctx.to_limbs(wire_ints(ev))
        return EncryptedArray(pk.key, to_mont(be, pk.ctx, plain), (len(ev),), 0, 1000, be)

    ax, ay = arr(ex), arr(ey)
    E = kit.evaluator
    pairs = [(E.add(ex, ey, pk), ax + ay), (E.sub(ex, ey, pk), ax - ay),
             (E.rsub(ex, ey, pk), ay - ax),
             (E.mul_plain(ex, k, pk, coder), ax * k.numpy()),
             (E.mul_plain_scalar(ex, -3, pk, coder), ax * -3),
             (E.matmul(ex, mat, (2, 3), (3, 2), pk, coder), ax.reshape(2, 3) @ mat.numpy()),
             (E.rmatmul(ex, mat.T.contiguous(), (3, 2), (2, 3), pk, coder),
              mat.T.numpy() @ ax.reshape(3, 2))]
    for ours, theirs in pairs:
        assert wire_ints(ours) == theirs.ciphertexts()


def test_vectors_stay_in_the_montgomery_domain(keys, backend, monkeypatch):
    """A chain of evaluator calls never leaves the Montgomery domain (only pickling does), and a
    negation is one batched inverse of the backend, not one per element."""
    from unifl import base_op, mod_op
    sk, pk, coder = keys[0]
    calls = {"from_mont": 0, "mont_inverse": []}
    real_from, real_inv = base_op.from_mont, mod_op.mont_inverse

    def spy_from(*a, **kw):
        calls["from_mont"] += 1
        return real_from(*a, **kw)

    def spy_inv(be, ctx, limbs):
        calls["mont_inverse"].append(len(limbs))
        return real_inv(be, ctx, limbs)

    ex, ey = enc(keys[0], X), enc(keys[0], Y)
    monkeypatch.setattr(base_op, "from_mont", spy_from)
    monkeypatch.setattr(mod_op, "mont_inverse", spy_inv)
    E = kit.evaluator
    z = E.sub(E.add(ex, ey, pk), E.mul_plain_scalar(ey, 0.5, pk, coder), pk)
    z = E.add_plain(E.mul_plain(z, Y, pk, coder), X, pk, coder)
    m = torch.tensor(RNG.integers(-5, 5, (4, 2)))
    z = E.matmul(z, m, (3, 4), (4, 2), pk, coder)
    assert calls["from_mont"] == 0
    # one batched inverse per negation: sub; the negative multipliers of mul_plain; the bases of
    # each of the three rows of the matmul (its plaintext matrix has negative entries)
    assert calls["mont_inverse"] == [len(Y), int((Y < 0).sum()), 4, 4, 4]
    monkeypatch.undo()
    want = (((X + Y - 0.5 * Y) * Y + X).reshape(3, 4).numpy() @ m.numpy()).reshape(-1)
    np.testing.assert_allclose(dec(keys[0], z).numpy(), want, rtol=1e-9)
    np.testing.assert_allclose(dec(keys[0], pickle.loads(pickle.dumps(z))).numpy(), want,
                               rtol=1e-9)


# ----------------------------------------------------------------------- FATE kit objects
def test_fate_kit_refuses_nonunit_ciphertexts():
    """A peer's pickled EV (FATE ships ciphertexts pickled) holding k·p, given to the key owner's
    decryptor and to the evaluator."""
    party.set_backend("cpu")
    try:
        sk, pk, coder = kit.keygen(1024)
        honest = pk.encrypt_encoded(coder.encode_i64_vec(np.array([1, 2])), obfuscate=True)
        bad = sk.key.p * 7  # shares p with n: decrypting it on the CRT path would factor n
        # what arrives: the EV's own reduce (plain limb bytes), as FATE's pickling rebuilds it,
        # with the second ciphertext replaced
        fn, args = honest.__reduce__()
        width = pk.ctx.num_limbs * 8
        wire = args[0][:width] + pk.ctx.to_limbs([bad]).astype("<u8").tobytes()
        args = (wire,) + args[1:]
        received = fn(*args)
        with pytest.raises(InvalidCiphertextError, match="#1"):
            sk.decrypt_to_encoded(received)
        with pytest.raises(InvalidCiphertextError, match="#1"):
            kit.evaluator.add(fn(*args), honest, pk)
        sliced = fn(*args).slice(1, 1)
        with pytest.raises(InvalidCiphertextError, match="#0"):
            kit.evaluator.mul_plain_scalar(sliced, 3, pk, coder)
        # honest pickled ciphertexts still decrypt
        fn, args = honest.__reduce__()
        assert sk.decrypt_to_encoded(fn(*args)).signed() == [1, 2]
    finally:
        party.set_backend(None)


# ----------------------------------------------------------------------- FATE kit: peer scales
@pytest.mark.parametrize("scale", [1 << 40, -(1 << 40), -(1 << 63)])
def test_fate_kit_refuses_received_scales_that_would_exhaust_memory(scale):
    """A kit vector arrives pickled from another party with its per-element scales; a scale
    becomes a shift (E(v)^(2^d) to lift it, v << -e to decode), so 2^40 would allocate 128 GiB
    in the receiving party.  Refused when unpickled, before any use."""
    from unifl.core.errors import SerializationError
    sk, pk, coder = kit.keygen(1024)
    ev = pk.encrypt_encoded(coder.encode_i64_vec(np.array([1, 2])), obfuscate=True)
    fv = coder.encode_i64_vec(np.array([1, 2]))
    for honest in (ev, fv):
        bad = pickle.loads(pickle.dumps(honest))
        bad.exps[1] = scale
        wire = pickle.dumps(bad)
        with pytest.raises(SerializationError, match="scale"):
            pickle.loads(wire)
    # honest vectors still travel
    back = pickle.loads(pickle.dumps(ev))
    assert coder.decode_i64_vec(sk.decrypt_to_encoded(back)).tolist() == [1, 2]


def test_the_key_owner_encrypts_with_the_crt_and_never_ships_its_primes(keys, monkeypatch):
    """The PK from keygen encrypts as the key owner (one fused CRT op per batch, y^p or the
    owner's generators); the same PK
    pickled for a peer is n alone: its bytes hold neither prime, and the peer's copy encrypts
    with the public path."""
    from unifl.core import registry
    sk, pk, coder = keys[0]
    party.set_backend("native")
    try:
        be = registry.backend("native")
        calls: list[str] = []
        real_owner, real_public = be.op_paillier_encrypt_owner, be.op_paillier_encrypt
        real_generator = be.op_paillier_encrypt_owner_generator
        monkeypatch.setattr(be, "op_paillier_encrypt_owner",
                            lambda *a: calls.append("owner") or real_owner(*a))
        # keys from keygen obfuscate from the owner's generators: the same CRT, a cheaper factor
        monkeypatch.setattr(be, "op_paillier_encrypt_owner_generator",
                            lambda *a: calls.append("owner") or real_generator(*a))
        monkeypatch.setattr(be, "op_paillier_encrypt",
                            lambda *a: calls.append("public") or real_public(*a))
        np.testing.assert_allclose(dec(keys[0], enc(keys[0], X)).numpy(), X.numpy(), atol=1e-12)
        assert calls == ["owner"]
        wire = pickle.dumps(pk)
        for prime in (sk.key.p, sk.key.q):
            width = (prime.bit_length() + 7) // 8
            assert prime.to_bytes(width, "little") not in wire
            assert prime.to_bytes(width, "big") not in wire
            assert str(prime).encode() not in wire
        peer_pk = pickle.loads(wire)
        assert peer_pk._owner is None
        calls.clear()
        ev = peer_pk.encrypt_encoded(coder.encode_tensor(X), obfuscate=True)
        assert calls == ["public"]
        np.testing.assert_allclose(dec(keys[0], ev).numpy(), X.numpy(), atol=1e-12)
    finally:
        party.set_backend(None)


def test_pack_squeeze_ciphertexts_are_the_group_products(keys, backend):
    """pack_squeeze folds each group in Horner's order; the ciphertexts must be exactly
    prod_i c_i^(2^(shift·(g-1-i))) mod n^2, the product the per-element lifting gave -- the same
    group elements, not only the same plaintexts (a short last group included)."""
    sk, pk, coder = keys[0]
    vals = torch.tensor(np.abs(RNG.normal(size=11)))
    packed = pk.encrypt_encoded(coder.pack_floats(vals, 60, 1, 52), obfuscate=True)
    shift, pack_num = 61, 4
    sq = kit.evaluator.pack_squeeze(packed, pack_num, shift, pk)
    from unifl.core.limbs import from_limbs
    cs = from_limbs(packed._materialize(pk.key).ciphertexts())
    got = from_limbs(sq._materialize(pk.key).ciphertexts())
    n2 = pk.key.nsquare
    want = []
    for s in range(0, len(cs), pack_num):
        grp = cs[s:s + pack_num]
        acc = 1
        for i, c in enumerate(grp):
            acc = acc * pow(c, 1 << (shift * (len(grp) - 1 - i)), n2) % n2
        want.append(acc)
    assert len(got) == 3 and got == want


# ----------------------------------------------------------------------- FATE kit: every field
class Forged:
    """A pickle a hostile party builds by hand: ``fn(*args)`` on unpickling (REDUCE)."""

    def __init__(self, fn, args):
        self.fn, self.args = fn, args

    def __reduce__(self):
        return self.fn, self.args


def newobj_build(cls, state) -> bytes:
    """The opcodes of a pickle that makes ``cls`` without calling its constructor and sets
    ``state`` straight into it: GLOBAL, EMPTY_TUPLE, NEWOBJ, <state>, BUILD."""
    return (b"\x80\x02c" + f"{cls.__module__}\n{cls.__name__}\n".encode() + b")\x81"
            + pickle.dumps(state, protocol=2)[2:-1] + b"b.")


def fate_unpickle(data: bytes):
    """What a FATE party runs on a federation message: FATE's own restricted unpickler."""
    import io
    from fate.arch.federation.api._serdes import TableRemotePersistentUnpickler
    return TableRemotePersistentUnpickler(None, None, "x", "t", None, io.BytesIO(data)).load()


def _wire(n_limbs=32, rows=2):
    return bytes(8 * n_limbs * rows)


HOSTILE = {
    # scales: any container, any bound
    "FV scales as a list, -2^24": (kit.FV, ((1,), [-(1 << 24)], None)),
    "FV scales as a tuple, 2^40": (kit.FV, ((1,), (1 << 40,), None)),
    "FV scales as a list, 2^20": (kit.FV, ((1,), [1 << 20], None)),
    "FV scales as floats": (kit.FV, ((1,), [1.5], None)),
    "FV scales as a string": (kit.FV, ((1,), "7", None)),
    "EV scales as a list, 2^40": (kit.EV, (_wire(rows=1), [1 << 40], None, 32)),
    "EV scales as a tuple, -2^24": (kit.EV, (_wire(rows=1), (-(1 << 24),), None, 32)),
    "EV trivial zeros, 2^20": (kit.EV, (None, [1 << 20], 1, None)),
    # values, moduli, sizes, limb widths
    "FV value of 2^20 bits": (kit.FV, ((1 << (1 << 20),), [0], None)),
    "FV value as a string": (kit.FV, (("123",), [0], None)),
    "FV residue above its modulus": (kit.FV, ((99,), [0], 97)),
    "FV even modulus": (kit.FV, ((1,), [0], 96)),
    "FV modulus of 2^20 bits": (kit.FV, ((1,), [0], (1 << (1 << 20)) + 1)),
    "EV limb width 2^40": (kit.EV, (b"", [], None, 1 << 40)),
    "EV size as a string": (kit.EV, (None, [0], "1", None)),
    "EV size 2^40 without scales": (kit.EV, (None, b"", 1 << 40, None)),
    "PK modulus as a string": (kit.PK, ("12345",)),
    # no __init__ at all: the state set straight into the slots / __dict__
    "FV built without __init__": (kit.FV, (), (None, {"values": [1], "exps": [-(1 << 24)],
                                                     "modulus": None})),
    "EV built without __init__": (kit.EV, (), (None, {"_batch": None, "_wire": None,
                                                     "exps": [1 << 40], "_size": 1})),
    "PK built without __init__": (kit.PK, (), {"n": 15, "key": None, "ctx": None, "_owner": None}),
}


REBUILD = {"FV": "_rebuild_fv", "EV": "_rebuild_ev", "PK": "_rebuild_pk"}


@pytest.mark.parametrize("case", list(HOSTILE))
def test_every_received_kit_field_is_bounded_whatever_its_container(case):
    """A peer's pickle of a kit object, through FATE's own federation unpickler: scales outside
    [0, 2^15] (a shift of 2^40 bits would allocate 128 GiB), values, moduli, sizes and limb widths
    beyond the 8192-bit key limit, and types other than ints are refused when unpickled
    (SerializationError).  The allow-list names the kit's checking rebuild functions, not its
    classes, so an object built without its constructor (NEWOBJ + BUILD) is refused by FATE's
    allow-list; with an unrestricted unpickler (FATE's ``restricted_type: unrestricted``) the
    classes refuse state set into them."""
    from unifl.core.errors import SerializationError
    cls, *rest = HOSTILE[case]
    if rest[1:]:                                   # no constructor at all
        wire = newobj_build(cls, rest[1])
        with pytest.raises(ValueError, match="Deserialization is restricted"):
            fate_unpickle(wire)
        with pytest.raises(SerializationError, match="constructor only"):
            pickle.loads(wire)
        return
    with pytest.raises(ValueError, match="Deserialization is restricted"):
        fate_unpickle(pickle.dumps(Forged(cls, *rest), protocol=4))   # the class itself
    wire = pickle.dumps(Forged(getattr(kit, REBUILD[cls.__name__]), *rest), protocol=4)
    with pytest.raises(SerializationError):
        fate_unpickle(wire)


def test_honest_kit_objects_still_travel_through_fates_unpickler(keys):
    sk, pk, coder = keys[0]
    ev = enc(keys[0], X)
    for obj in (pk, coder, kit.evaluator, ev, kit.evaluator.zeros(3), coder.encode_tensor(X),
                sk.decrypt_to_encoded(ev)):
        back = fate_unpickle(pickle.dumps(obj))
        assert type(back) is type(obj)
    np.testing.assert_allclose(dec(keys[0], fate_unpickle(pickle.dumps(ev))).numpy(), X.numpy(),
                               atol=1e-12)


# ----------------------------------------------------------------------- FATE: no private key
class RecordingFederation:
    """Where FATE's federation pickler pushes a message: what would leave for the peer."""

    def __init__(self):
        self.pushed = []

    def push_bytes(self, v, name, tag, parties):
        self.pushed.append(v)

    def push_table(self, table, name, tag, parties):  # pragma: no cover - no tables here
        self.pushed.append(table)


def fate_push(value) -> RecordingFederation:
    """FATE's own federation send path (``ctx.guest.put`` ends here) up to the wire."""
    from fate.arch.federation.api._serdes import TableRemotePersistentPickler
    fed = RecordingFederation()
    TableRemotePersistentPickler.push(value, fed, None, "x", "t", [("guest", "9999")],
                                      max_message_size=1 << 30, num_partitions_of_slice_table=1)
    return fed


def test_a_pickled_private_key_is_refused_on_receipt(keys):
    """A peer that sends an SK (p, q): FATE's unpickler refuses it (SK is not allow-listed)."""
    sk = keys[0][0]
    with pytest.raises(ValueError, match="Deserialization is restricted.*SK"):
        fate_unpickle(pickle.dumps(sk))
    assert "SK" not in register.ALLOWED["unifl.fate.kit"]


def test_a_private_key_never_leaves_through_the_federation(keys):
    """FATE's federation pickler, as ``ctx.hosts.put(...)`` uses it, refuses a private key object
    and a message carrying its primes (an int, hex text, bytes, a tensor of its bytes, inside a
    container), before anything is pushed; public objects still go."""
    from unifl.core.errors import PrivateKeyExposure
    sk, pk, coder = keys[0]
    p = sk.key.p
    leaks = {"SK": sk, "the UniFL key inside SK": sk.key, "SK in a dict": {"cipher": [sk]},
             "p as an int": (p,), "q in a list": [sk.key.q], "p as hex": {"v": format(p, "x")},
             "p as bytes": p.to_bytes(64, "big"),
             "p as a uint8 tensor": torch.tensor(list(p.to_bytes(64, "little")), dtype=torch.uint8)}
    for what, value in leaks.items():
        with pytest.raises(PrivateKeyExposure):
            fate_push(value)
    for honest in (pk, coder, enc(keys[0], X), {"n": pk.n, "x": X}):
        assert len(fate_push(honest).pushed) == 1


def test_documented_limit_a_table_travels_by_reference_unscanned(keys):
    """The documented limit, exactly: a FATE table (KVTable: DataFrames) is pushed by reference
    and serialized by FATE's computing engine, so what is inside it is not scanned -- the
    pickled message itself carries no secret (it passes), and the table reaches the federation's
    push_table as it is.  Nothing else gets past: the same key beside the table is refused."""
    from fate.arch.computing.api import KVTable
    from unifl.core.errors import PrivateKeyExposure
    sk = keys[0][0]

    class Table(KVTable):
        def __init__(self, rows):
            super().__init__(0, 0, 0, 1)
            self.rows = rows

    table = Table([("k", sk)])
    fed = fate_push({"gh": table})
    assert fed.pushed[0] is table and fed.pushed[0].rows[0][1] is sk   # the limit
    assert not any(isinstance(v, bytes) and sk.key.p.to_bytes(64, "little") in v
                   for v in fed.pushed)
    with pytest.raises(PrivateKeyExposure):
        fate_push({"gh": Table([]), "sk": sk})


def test_no_ciphertext_leaves_the_kit_unobfuscated(keys):
    """FATE 2.2's coordinated LR encrypts its per-row shares with obfuscate=False (its tensor
    encryptor drops the flag for distributed tensors), and 1 + m·n is its own plaintext: our kit
    obfuscates every encryption, whatever the flag says."""
    sk, pk, coder = keys[0]
    x = torch.tensor([3.0, -1.5, 0.25, 7.0, 0.0])
    ev = pk.encrypt_encoded(coder.encode_tensor(x), obfuscate=False)
    again = pk.encrypt_encoded(coder.encode_tensor(x), obfuscate=False)
    wire, _, size, width = ev.__reduce__()[1]
    cts = [from_limbs(row[None, :])[0] for row in
           np.frombuffer(wire, dtype="<u8").reshape(size, width)]
    # c = 1 + m·n is 1 mod n; an obfuscated c is r^n mod n
    assert all(c % pk.n != 1 for c in cts), "an unobfuscated ciphertext left the kit"
    assert wire != again.__reduce__()[1][0]
    np.testing.assert_allclose(dec(keys[0], ev).numpy(), x.numpy())
