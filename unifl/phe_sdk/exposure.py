"""Whether data about to leave this process reveals a private key it holds (a value-based guard).

Every Paillier and RSA private key constructed in this process (generated, received, unpickled)
is watched while it is alive (:func:`watch`, called by the key constructors).  :func:`revealed_in`
answers whether a byte string or an integer carries one of the watched keys' secrets, judged on the
values themselves, not on markers such as a JSON ``kind``.  The codec runs it on every message it
encodes, and the FATE plug-in on every object FATE pickles for another party.

What "reveals" means here, exactly.  For a watched key with modulus n = p·q, the *secret values*
S are

* Paillier: p, q, p², q², φ = (p−1)(q−1), λ = lcm(p−1, q−1), μ = λ^-1 mod n, φ^-1 mod n,
  h_p, h_q (the CRT decryption constants), q^-1 mod p, (p²)^-1 mod q²;
* RSA: p, q, φ, λ, d = e^-1 mod φ, e^-1 mod λ, d_p, d_q, q^-1 mod p.

The upper half of φ, λ and RSA's d (and e^-1 mod λ) follows from n alone (φ = n − p − q + 1 begins
like n, λ like n/gcd(p−1, q−1), d like k·n/e for some k < e), and honest data does contain such
numbers (a bound of n/3 begins like λ when gcd(p−1, q−1) = 6): of these values only the lower
part is secret and matched, the bits below bit h = ⌊log2 n⌋/2 − 16 (for text, the trailing
h/4 hexadecimal and h·log10(2) − 1 decimal digits).

Data is refused when any of the following holds (and only then):

1. **Integers** (:func:`int_reveals`): an integer x, x ≠ 0, such that, with every factor n divided
   out of x, 1 < gcd(x, n) < n (x is a multiple of p or q: k·p, p², ...); or (p−1) | x or
   (q−1) | x (a multiple of p−1 factors n, so λ, φ and their multiples); RSA: (p−1) | e·x − 1 or
   (q−1) | e·x − 1 (d, d_p, d_q and every d + k·λ); Paillier: x·λ ≡ 1 or x·φ ≡ 1 (mod n) (μ).
2. **Binary** (:func:`bytes_reveal`): the bytes contain 8 consecutive bytes (64 bits) of one of
   the *binary forms* of some s in S: the big- or little-endian bytes of s·2^k for 0 ≤ k < 8 (any
   bit alignment), or its little-endian 16- or 32-bit words in most-significant-first order.
   This covers s as a Python int (the codec writes an int's magnitude little-endian), as bytes in
   either byte order, as uint8/uint16/uint32/uint64 arrays (64-bit limbs in either order), and any
   piece of s of 64 bits or more in one field: s split across fields is found piece by piece.
   Windows that the same forms of a public number also contain (n, n ± 1, n²: φ = n − p − q + 1
   begins with n's bytes) are not secret and not matched.
3. **Text** (same function): the bytes contain 16 consecutive characters of the decimal text of
   some s in S, of its hexadecimal text (all lower or all upper case), or -- for p and q -- of the
   base64 (standard or URL-safe alphabet, at any of the three alignments) of their binary forms or
   of their hexadecimal or decimal text (base64 of a key's JSON included).  Again, runs that the
   same text of n, n ± 1 or n² contains are not matched.

What this does not find, by construction: a secret transformed by anything not listed (XOR with
a pad, a sum of shares, encryption, compression, another radix, mixed-case hex, a float), and
pieces shorter than the thresholds above (a secret cut into pieces of fewer than 64 bits, or fewer
than 16 characters, each in its own field; such a piece is still found when the bytes beside
it in the message happen to continue the secret, as a header byte does about once in 256 per
side).  No guard can find every encoding: a piece of code that
computes on p to hide it defeats any detector, so the guarantee is this list; the SDK's own
protocol code never reads a private key's numbers outside :mod:`unifl.phe_sdk`.

False positives: random data of L bytes matches one of W watched 64-bit windows with probability
below L·W/2^64 (W is about 45,000 per 2048-bit Paillier key and 25,000 per RSA key: under 10^-8
for a terabyte of ciphertexts per key); honest values are never multiples of p − 1 or share a
factor with n except by that kind of chance, and n itself and its powers pass (rule 1 divides them
out).
"""

from __future__ import annotations

import base64
import collections
import math
import threading
import weakref
from dataclasses import dataclass, field
from typing import Any, Iterable

import numpy as np

__all__ = ["watch", "int_reveals", "bytes_reveal", "revealed_in", "WINDOW",
           "TEXT_WINDOW"]

#: bytes of a secret's binary form that must appear together to count as revealed
WINDOW = 8
#: characters of a secret's text form that must appear together to count as revealed
TEXT_WINDOW = 16
_CHUNK = 1 << 20            # byte offsets screened per step (bounds the scan's temporary memory)
_TOP_BITS = 21              # a table of the windows' top bits screens every offset
_LOW_BITS = 22              # and one of their low bits the few that pass (1 % of random data)
_TOP_SHIFT = np.uint64(64 - _TOP_BITS)
_LOW_MASK = np.uint64((1 << _LOW_BITS) - 1)


@dataclass
class _KeySecrets:
    """One private key's secret values (and its public numbers for the algebraic rules)."""

    n: int
    p: int
    q: int
    e: int | None                        # RSA's public exponent; None for Paillier
    values: tuple[int, ...]
    #: values whose upper half anyone computes from n (φ and λ begin like n/gcd(p−1, q−1), RSA's
    #: d like k·n/e for some k < e): only their lower half is secret, and only it is matched
    low_half: frozenset[int] = frozenset()
    refs: int = 1
    _windows: tuple[np.ndarray, np.ndarray, np.ndarray] | None = field(default=None, repr=False)

    def windows(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(binary 64-bit windows, text prefixes, text pair hashes), made once per key, without
        the windows the public numbers share (φ = n − p − q + 1 begins like n)."""
        if self._windows is None:
            public = _public_values(self.n)
            cut = self.n.bit_length() // 2 - 16      # bits of a low-half value that are secret
            keep = {s: (cut if s in self.low_half else None) for s in self.values}
            binary = np.setdiff1d(_binary_windows(keep), _binary_windows({v: None for v in public}))
            firsts, pairs = _text_windows(keep, (self.p, self.q))
            _, pub_pairs = _text_windows({v: None for v in public}, ())
            self._windows = (binary, firsts, np.setdiff1d(pairs, pub_pairs))
        return self._windows


def _public_values(n: int) -> tuple[int, ...]:
    """What a key owner publishes and computes with openly: n, g = n + 1, n − 1, n²."""
    return (n, n + 1, n - 1, n * n)


_lock = threading.Lock()
_watched: dict[int, _KeySecrets] = {}      # n -> the key's secrets (one entry per modulus)
_generation = 0
_Tables = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]
_tables: tuple[int, _Tables] | None = None
_released: collections.deque[int] = collections.deque()   # moduli of collected keys, not yet dropped


def _release(n: int) -> None:
    """A watched key was collected.  Its finalizer runs wherever the garbage collector happens to
    run, which can be inside a ``with _lock`` block of this same thread (any allocation there may
    start a collection): taking the lock here would then wait on itself forever.  The release is
    queued instead (a deque's append is atomic) and applied by the lock's next holder."""
    _released.append(n)


def _apply_released() -> None:
    """Drop the watch of every key collected since the last call; the caller holds ``_lock``."""
    global _generation
    while _released:
        n = _released.popleft()
        entry = _watched.get(n)
        if entry is None:
            continue
        entry.refs -= 1
        if entry.refs <= 0:
            del _watched[n]
            _generation += 1


def watch(key: object, n: int, p: int, q: int, e: int | None = None,
          extra: Iterable[int] = ()) -> None:
    """Watch the private key ``key`` (modulus ``n`` = ``p``·``q``; ``e`` for RSA) until it is
    garbage-collected.  ``extra``: secret values the key object stores beyond those derived here."""
    global _generation
    n, p, q = int(n), int(p), int(q)
    lam = (p - 1) * (q - 1) // math.gcd(p - 1, q - 1)
    phi = (p - 1) * (q - 1)
    vals = {p, q, p * p, q * q, lam, phi, pow(q, -1, p)}
    low = {lam, phi}
    if e is None:
        vals |= {pow(lam, -1, n), pow(phi, -1, n)}
        vals.add(pow(p * p, -1, q * q))
    else:
        d, d_lam = pow(int(e), -1, phi), pow(int(e), -1, lam)
        vals |= {d, d_lam, d % (p - 1), d % (q - 1)}
        low |= {d, d_lam}
    vals |= {int(v) for v in extra}
    vals -= {0, 1}
    with _lock:
        _apply_released()
        entry = _watched.get(n)
        if entry is not None:
            entry.refs += 1
        else:
            _watched[n] = _KeySecrets(n, p, q, None if e is None else int(e),
                                      tuple(sorted(vals)), frozenset(low & vals))
            _generation += 1
    weakref.finalize(key, _release, n)


# ------------------------------------------------------------------ rule 1: integers
def int_reveals(x: int) -> bool:
    """Whether the integer ``x`` reveals a watched key by rule 1 of the module docstring."""
    x = abs(int(x))
    if x == 0:
        return False
    with _lock:
        _apply_released()
        keys = list(_watched.values())
    for k in keys:
        if x.bit_length() < min(k.p, k.q).bit_length() - 18:
            continue          # too short to be a multiple of p, p−1, or an inverse mod n
        y = x
        while y % k.n == 0:
            y //= k.n
        if 1 < math.gcd(y, k.n) < k.n:
            return True
        if x % (k.p - 1) == 0 or x % (k.q - 1) == 0:
            return True
        if k.e is not None:
            t = k.e * x - 1
            if t % (k.p - 1) == 0 or t % (k.q - 1) == 0:
                return True
        else:
            lam = (k.p - 1) * (k.q - 1) // math.gcd(k.p - 1, k.q - 1)
            if (x * lam - 1) % k.n == 0 or (x * (k.p - 1) * (k.q - 1) - 1) % k.n == 0:
                return True
    return False


# ------------------------------------------------------------------ rules 2 and 3: bytes
def _words(data: bytes) -> np.ndarray:
    """``words[i]`` = the little-endian 64-bit word ``data[i:i + 8]``, for every offset i with 8
    bytes from it: a read-only strided view of ``data`` itself (unaligned reads, nothing copied)."""
    return np.ndarray((max(len(data) - 7, 0),), "<u8", buffer=data, strides=(1,))


def _all_windows(blobs: Iterable[bytes]) -> np.ndarray:
    words = [_words(b) for b in blobs]
    return np.concatenate(words) if words else np.zeros(0, np.uint64)


def _binary_forms(s: int, low_bits: int | None = None) -> list[bytes]:
    """The binary forms of rule 2; with ``low_bits``, only the bytes that hold the ``low_bits``
    least significant bits of ``s`` (a value whose upper half is public)."""
    forms = []
    for k in range(8):
        v = s << k
        be = v.to_bytes((v.bit_length() + 7) // 8, "big")
        keep = len(be) if low_bits is None else (low_bits + k) // 8
        forms += [be[len(be) - keep:], be[::-1][:keep]]
    le = s.to_bytes((s.bit_length() + 7) // 8, "little")
    for w in (2, 4):
        padded = le + bytes(-len(le) % w)
        words = [padded[i:i + w] for i in range(0, len(padded), w)]
        form = b"".join(reversed(words))
        forms.append(form if low_bits is None else form[len(form) - low_bits // 8:])
    return forms


def _binary_windows(values: dict[int, int | None]) -> np.ndarray:
    """Every 64-bit window of the binary forms of ``values`` (value -> its secret low bits, or
    None when all of it is secret)."""
    return np.unique(_all_windows(f for s, low in values.items() for f in _binary_forms(s, low)))


def _b64_forms(data: bytes) -> list[bytes]:
    """The base64 text of ``data`` as it appears inside any longer base64 text: at each of the
    three alignments, without the groups it shares with its neighbours."""
    out = []
    for a in range(3):
        text = base64.b64encode(bytes(a) + data)
        body = text[4 if a else 0:len(text) - 4]
        out += [body, body.translate(bytes.maketrans(b"+/", b"-_"))]
    return out


def _text_forms(s: int, is_prime: bool, low_bits: int | None = None) -> list[bytes]:
    dec, hexl = str(s).encode(), format(s, "x").encode()
    if low_bits is not None:       # the trailing digits: the leading ones follow from n
        dec, hexl = dec[len(dec) - int(low_bits * 0.30103) + 1:], hexl[len(hexl) - low_bits // 4:]
    forms = [dec, hexl, hexl.upper()]
    if is_prime:
        be = s.to_bytes((s.bit_length() + 7) // 8, "big")
        for src in (be, be[::-1], hexl, dec):
            forms += _b64_forms(src)
    return forms


_MIX = np.uint64(0x9E3779B97F4A7C15)


def _pair_hash(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        return (a * _MIX) ^ b ^ (b >> np.uint64(29))


def _text_windows(values: dict[int, int | None], primes: tuple[int, ...]
                  ) -> tuple[np.ndarray, np.ndarray]:
    forms = [f for s, low in values.items() for f in _text_forms(s, s in primes, low)]
    firsts, pairs = [], []
    for f in forms:
        if len(f) < TEXT_WINDOW:
            continue
        w = _words(f)
        m = len(f) - TEXT_WINDOW + 1
        firsts.append(w[:m])
        pairs.append(_pair_hash(w[:m], w[8:8 + m]))
    if not firsts:
        return np.zeros(0, np.uint64), np.zeros(0, np.uint64)
    return np.unique(np.concatenate(firsts)), np.unique(np.concatenate(pairs))


def _current_tables() -> _Tables | None:
    """The windows of every watched key, merged (rebuilt when the watched set changes): binary
    windows, text prefixes, text pair hashes, and two screens (:func:`_screen`) indexed by a
    window's top :data:`_TOP_BITS` and its low :data:`_LOW_BITS` bits.  A window in a table passes
    both screens: they only spare the exact lookup for offsets that cannot match."""
    global _tables
    with _lock:
        _apply_released()
        gen, keys = _generation, list(_watched.values())
        if _tables is not None and _tables[0] == gen:
            return _tables[1]
    if not keys:
        return None
    parts = [k.windows() for k in keys]
    binary = np.unique(np.concatenate([p[0] for p in parts]))
    firsts = np.unique(np.concatenate([p[1] for p in parts]))
    pairs = np.unique(np.concatenate([p[2] for p in parts]))
    built: _Tables = (binary, firsts, pairs,
                      _screen(binary >> _TOP_SHIFT, firsts >> _TOP_SHIFT, _TOP_BITS),
                      _screen(binary & _LOW_MASK, firsts & _LOW_MASK, _LOW_BITS))
    with _lock:
        if _generation == gen:
            _tables = (gen, built)
    return built


def _screen(binary_index: np.ndarray, text_index: np.ndarray, bits: int) -> np.ndarray:
    """2^``bits`` flags: bit 0 where some binary window has that index, bit 1 where some text
    prefix has it."""
    screen = np.zeros(1 << bits, np.uint8)
    screen[binary_index.astype(np.intp)] |= 1
    screen[text_index.astype(np.intp)] |= 2
    return screen


def _nonzero_bytes(marks: np.ndarray) -> np.ndarray:
    """Indices of the non-zero entries of the uint8 array ``marks`` (its length a multiple of
    8), found eight at a time: few are non-zero, and a scan of 64-bit groups is 8x shorter."""
    groups = np.flatnonzero(marks.view(np.uint64))
    pos = (groups[:, None] * 8 + np.arange(8)).ravel()
    return pos[marks[pos] != 0]


def _in_sorted(values: np.ndarray, table: np.ndarray) -> np.ndarray:
    """Which of ``values`` are in the sorted ``table``."""
    if len(table) == 0:
        return np.zeros(len(values), bool)
    pos = np.minimum(np.searchsorted(table, values), len(table) - 1)
    return table[pos] == values


def bytes_reveal(data: bytes | bytearray | memoryview) -> bool:
    """Whether ``data`` holds a watched key's binary or text form (rules 2 and 3).

    Every byte offset is screened: the top bits of the 64-bit word there (:func:`_words`, no
    copy) index the first screen, and the few offsets that pass are checked against the second
    screen, then looked up exactly (binary windows; text prefixes, then the hash of the prefix
    and the next word)."""
    tables = _current_tables()
    data = bytes(data)
    if tables is None or len(data) < WINDOW:
        return False
    binary, firsts, pairs, top_screen, low_screen = tables
    words = _words(data)
    n = len(words)
    size = min(_CHUNK, n)
    top = np.empty(size, np.uint64)
    marks = np.zeros(size + 8, np.uint8)     # zero past the chunk, to whole groups of 8
    for start in range(0, n, _CHUNK):
        m = min(_CHUNK, n - start)
        np.right_shift(words[start:start + m], _TOP_SHIFT, out=top[:m])
        np.take(top_screen, top[:m].view(np.int64), out=marks[:m])
        marks[m:] = 0
        pos = _nonzero_bytes(marks[:m + (-m % 8)])
        if not len(pos):
            continue
        at = pos + start
        found = words[at]
        kinds = marks[pos] & low_screen[(found & _LOW_MASK).astype(np.intp)]
        if _in_sorted(found[(kinds & 1) != 0], binary).any():
            return True
        text = (kinds & 2) != 0
        hits = at[text][_in_sorted(found[text], firsts)]
        hits = hits[hits + TEXT_WINDOW <= len(data)]
        if len(hits) and _in_sorted(_pair_hash(words[hits], words[hits + 8]), pairs).any():
            return True
    return False


def revealed_in(data: bytes | bytearray | memoryview, ints: Iterable[int] = ()) -> bool:
    """:func:`bytes_reveal` on ``data`` or :func:`int_reveals` on any of ``ints``."""
    if not _watched:
        return False
    return any(int_reveals(x) for x in ints) or bytes_reveal(data)


def int_list_bytes(items: Any) -> bytes | None:
    """A list of non-negative ints below 2^64 as the array it stands for: little-endian words of
    1, 2, 4 or 8 bytes (the narrowest that holds them all), in list order; None for any other
    list (one that holds something else, or a negative or larger int)."""
    if not items or not all(type(v) is int for v in items):
        return None
    lo, hi = min(items), max(items)
    if lo < 0 or hi >= 1 << 64:
        return None
    width = next(w for w in (1, 2, 4, 8) if hi < 1 << (8 * w))
    return np.asarray(items, dtype=f"<u{width}").tobytes()
