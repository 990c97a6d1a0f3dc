"""The bottom layer: what every layer above and every backend share, and nothing else.

``errors`` (every error type), ``limbs`` (the little-endian 64-bit limb layout, ``DeviceBatch``),
``montgomery`` (``MontContext``: m, n0' = -m^-1 mod 2^64, R^2 mod m), ``exponents`` (exponent limbs
and window digits), ``contract`` (the typed ``op_<name>`` signatures a backend implements),
``backend`` (the ``Backend`` base and ``ProbeResult``), ``keys`` (the plain Paillier key records the
fused ops take), ``state`` (per-instance device state, weakly keyed) and ``registry`` (backends
found by folder and entry point).

This package imports nothing from the rest of ``unifl``; a backend imports only this package and
its own folder (``make lint`` checks both, docs/architecture.md).  It is a regular package, not a
namespace one, so that packaging (``find_packages``) and the import-contract checker see it.
"""
