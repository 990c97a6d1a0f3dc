"""The op contract: every operation a backend may implement natively, as typed signatures.

A backend implements a subset of these methods (``op_<name>``) and lists the names in
``native_ops``; only ``mont_mul``, the base op, is mandatory.  Everything else is composed once,
generically, by the layer that owns it (:mod:`unifl.base_op`, :mod:`unifl.mod_op`,
:mod:`unifl.phe_sdk`) from the layer below, on the same backend.

Arguments are batches in the canonical layout (:mod:`unifl.core.limbs`): ``uint64`` arrays of shape
(N, L), or a backend's own :class:`~unifl.core.limbs.DeviceBatch`; results may be either, and every
consumer reads them through the NumPy array protocol.  Exponent batches are (N, Le) or (1, Le)
(:mod:`unifl.core.exponents`).  "Montgomery form" means x̄ = x·R mod m with R = 2^(64·L).
The fused Paillier ops take the plain key records of :mod:`unifl.core.keys`.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable, Mapping, Protocol, Union

import numpy as np

from .keys import PaillierPrivateMaterial, PaillierPublicMaterial
from .limbs import DeviceBatch
from .montgomery import MontContext

#: a batch of limbs: a host array of shape (N, L) or a backend's device-resident batch
Limbs = Union[np.ndarray, DeviceBatch]


class OpContract(Protocol):
    """Typed signatures of the native ops (a backend defines the ones it lists in ``native_ops``)."""

    # ---- base_op
    def op_mont_mul(self, ctx: MontContext, a: Limbs, b: Limbs) -> Limbs:
        """a·b·R^−1 mod m, element-wise over (N, L) batches."""
        ...

    # ---- mod_op
    def op_mod_mul(self, ctx: MontContext, a: Limbs, b: Limbs) -> Limbs:
        """a·b mod m."""
        ...

    def op_mod_exp(self, ctx: MontContext, base: Limbs, exps: np.ndarray) -> Limbs:
        """base^e mod m; ``exps`` (N|1, Le)."""
        ...

    def op_mod_exp_secret(self, ctx: MontContext, base: Limbs, exps: np.ndarray) -> Limbs:
        """base^e mod m for a SECRET e (and base): running time independent of their values beyond
        their limb counts.  Declared only by a backend whose exponentiation is constant time."""
        ...

    def op_mont_exp(self, ctx: MontContext, base_mont: Limbs, exps: np.ndarray) -> Limbs:
        """(x^e)·R mod m for x̄ = x·R mod m: in and out of the Montgomery domain."""
        ...

    def op_mont_multi_exp(self, ctx: MontContext, bases_mont: Limbs, exps: np.ndarray) -> Limbs:
        """(K, L): out[k] = ∏_i base_i^e_ki, Montgomery form; ``exps`` (K, N, Le)."""
        ...

    def op_mont_prod_groups(self, ctx: MontContext, a_mont: Limbs, groups: np.ndarray,
                            num_groups: int) -> Limbs:
        """(G, L): the product of the rows of each group (``groups`` (N,) int64), Montgomery form;
        R mod m for an empty group."""
        ...

    def op_mont_inverse(self, ctx: MontContext, a_mont: Limbs) -> Limbs:
        """(x^−1)·R mod m for a = x·R: Montgomery form in and out; ValueError when some x shares a
        factor with m."""
        ...

    # ---- phe_sdk: fused Paillier
    def op_paillier_encrypt(self, pk: PaillierPublicMaterial, m: Limbs, r: Limbs) -> Limbs:
        """(1 + m·n)·r^n mod n², Montgomery form mod n²; m, r (N, Ln)."""
        ...

    def op_paillier_encrypt_fixed_base(self, pk: PaillierPublicMaterial, m: Limbs,
                                       a: np.ndarray) -> Limbs:
        """(1 + m·n)·hs^a mod n², Montgomery form (DJN variant); a (N, La)."""
        ...

    def op_paillier_encrypt_owner(self, sk: PaillierPrivateMaterial, m: Limbs, yp: Limbs,
                                  yq: Limbs) -> Limbs:
        """Key-owner encryption with the CRT, Montgomery form mod n²:
        (1 + m·n)·CRT(yp^p mod p², yq^q mod q²) mod n²; m (N, Ln), yp (N, Lp), yq (N, Lq), with
        Lp, Lq the limb counts of p and q (``sk.p_limbs``, ``sk.q_limbs``).

        CRT(x_p, x_q) is the x < n² with x ≡ x_p (mod p²), x ≡ x_q (mod q²).  The SDK draws yp
        uniform in [1, p) and yq in [1, q), which makes the factor distributed exactly as r^n mod n²
        for r uniform in Z_n* (see ``unifl.phe_sdk.paillier``); for an explicit r it passes
        yp = r^q mod p, yq = r^p mod q, and the result is (1 + m·n)·r^n mod n².  Since x^p mod p²
        depends only on x mod p, every value of the limb width has one defined result, identical on
        every backend.  The exponents p and q are secret: constant-time exponentiation where the
        backend has it."""
        ...

    def op_paillier_encrypt_owner_fixed_base(self, sk: PaillierPrivateMaterial, m: Limbs,
                                             a: np.ndarray) -> Limbs:
        """Key-owner DJN encryption with the CRT, Montgomery form mod n²:
        (1 + m·n)·CRT(hs^a mod p², hs^a mod q²) mod n² = (1 + m·n)·hs^a mod n², with hs the fixed
        base of ``sk.public_key.fixed_base`` and a (N, La) of at most its ``exp_bits`` bits.
        Computed from comb tables of hs mod p² and hs mod q² (half-size moduli, so a quarter of
        the cost per multiplication of the full-size comb), built once per key record."""
        ...

    def op_paillier_encrypt_owner_generator(self, sk: PaillierPrivateMaterial, m: Limbs,
                                            kp: np.ndarray, kq: np.ndarray) -> Limbs:
        """Key-owner encryption from the owner's generators, Montgomery form mod n²:
        (1 + m·n)·CRT(gp^kp mod p², gq^kq mod q²) mod n², with gp, gq of ``sk.generators``;
        m (N, Ln), kp (N, Lp), kq (N, Lq) (``sk.p_limbs``, ``sk.q_limbs``), each exponent of at
        most p's (q's) bit length.

        gp and gq generate the n-th residues mod p² and q² (orders p − 1 and q − 1), so for kp, kq
        uniform in [0, p − 1), [0, q − 1) the factor is distributed exactly as r^n mod n² for r
        uniform in Z_n*.  Computed from comb tables of gp mod p² and gq mod q² (built once per key
        record): one MontMult of half size per non-zero comb digit, no squaring."""
        ...

    def op_paillier_decrypt(self, sk: PaillierPrivateMaterial, c_mont: Limbs) -> Limbs:
        """m (N, Ln) from Montgomery-form ciphertexts (N, L2), with the CRT; refuses (ValueError
        naming the element) a ciphertext whose CRT half is not ≡ 1 mod p after c^(p−1)."""
        ...


#: op name -> signature, in contract order
SIGNATURES: dict[str, inspect.Signature] = {
    name[3:]: inspect.signature(fn)
    for name, fn in vars(OpContract).items() if name.startswith("op_")}

#: every op name of the contract
OPS: tuple[str, ...] = tuple(SIGNATURES)

#: the ops that are a faster *route* to a result other ops already give (the key owner's
#: generators in place of y^p): the layers take one only where the backend runs it natively, since
#: its composition costs more than the route it replaces.  A backend that combines others (the
#: scheduler's size-aware dispatcher) offers one only where the member that takes the bulk of the
#: work runs it natively.
ROUTE_OPS: frozenset[str] = frozenset({"paillier_encrypt_owner_generator"})

#: the ops whose arguments are secrets of a key owner: a private key record (p, q and the CRT
#: constants, every op with a :class:`~unifl.core.keys.PaillierPrivateMaterial` parameter) or a
#: secret exponent, whose modulus may be secret too (``mod_exp_secret`` with p − 1 modulo p²,
#: RSA's d modulo p).  Whatever runs one of them holds the key, so an executor that ships work
#: out of the party's process keeps these in the process unless the party says otherwise.
SECRET_OPS: frozenset[str] = frozenset(
    {op for op, sig in SIGNATURES.items()
     if any("PaillierPrivateMaterial" in str(p.annotation) for p in sig.parameters.values())}
    | {"mod_exp_secret"})


#: the generic composition of an op: ``fn(backend, *op_args)`` computes op ``<name>`` from the layer
#: below on ``backend``, or runs it natively there when the backend has it.  The layer that owns an
#: op writes its composition once (``base_op``, ``mod_op``, ``phe_sdk.paillier``) and lists it in
#: its ``COMPOSITIONS``; the scheduler gathers them with :func:`composition_table`.
Composition = Callable[..., Any]


def check_composition(op: str, fn: Composition, owner: str) -> None:
    """TypeError unless ``fn`` is a composition of ``op``: a callable taking the backend, then the
    op's parameters by position with the contract's names, in its order (further parameters only
    with defaults)."""
    if op not in SIGNATURES:
        raise TypeError(f"{owner}: {op!r} is not an op of the contract (unifl.core.contract.OPS)")
    want = list(SIGNATURES[op].parameters)[1:]
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{owner}: the composition of op_{op} has no signature: {exc}") from None
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    names = [p.name for p in positional[1:1 + len(want)]]
    extra = positional[1 + len(want):] + [p for p in params if p.kind == p.KEYWORD_ONLY]
    if not positional or names != want or any(p.default is p.empty for p in extra):
        raise TypeError(f"{owner}: the composition of op_{op} must be fn(backend, "
                        f"{', '.join(want)}), got {getattr(fn, '__name__', fn)}"
                        f"{inspect.signature(fn)}")


def composition_table(*layers: tuple[str, Mapping[str, Composition]]) -> dict[str, Composition]:
    """One composition per op of the contract from the ``(layer name, COMPOSITIONS)`` of the layers
    that own the ops: each checked (:func:`check_composition`), none given twice, none missing.

    Raises:
        TypeError: naming the layer and op at fault.
    """
    out: dict[str, Composition] = {}
    owner: dict[str, str] = {}
    for layer, table in layers:
        for op, fn in table.items():
            check_composition(op, fn, layer)
            if op in out:
                raise TypeError(f"op_{op} is composed by both {owner[op]} and {layer}")
            out[op], owner[op] = fn, layer
    missing = [op for op in OPS if op not in out]
    if missing:
        raise TypeError("no layer composes " + "; ".join(describe(op) for op in missing)
                        + f" (layers: {', '.join(name for name, _ in layers)})")
    return out


def define_ops(cls: type, route: str, doc: str) -> None:
    """Give ``cls`` one ``op_<name>`` method per op of the contract, with the op's signature, that
    binds its arguments and calls ``self.<route>(name, args)``: the op methods of a wrapper
    (counting, splitting, forwarding) generated from the contract, so an op added to it reaches
    every wrapper without editing any.  ``doc`` is appended to each op's one-line meaning."""
    for op in OPS:
        setattr(cls, f"op_{op}", _route_method(cls.__name__, op, route, doc))


def _route_method(owner: str, op: str, route: str, doc: str) -> Any:
    sig = SIGNATURES[op]
    arity = len(sig.parameters) - 1      # without self

    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        if kwargs or len(args) != arity:
            args = tuple(sig.bind(self, *args, **kwargs).args[1:])
        return getattr(self, route)(op, args)
    method.__name__ = f"op_{op}"
    method.__qualname__ = f"{owner}.op_{op}"
    method.__doc__ = f"{describe(op)}  {doc}"
    method.__signature__ = sig  # type: ignore[attr-defined]
    return method


def describe(op: str) -> str:
    """``op_<name>(…)`` with its one-line meaning, for reports and error messages."""
    fn = getattr(OpContract, f"op_{op}")
    doc = (fn.__doc__ or "").strip().splitlines()[0]
    return f"op_{op}{SIGNATURES[op]}: {doc}"
