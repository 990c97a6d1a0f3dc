"""Typed errors of UniFL. Each names the broken contract, so callers can catch precisely."""

from __future__ import annotations


class UniflError(Exception):
    """Base class of every error UniFL raises on purpose."""


class BackendUnavailable(UniflError, RuntimeError):
    """A backend cannot run here; the message says why (no driver, no device, library missing)."""


class OperandError(UniflError, ValueError):
    """An operand is outside the range an operation accepts (negative, >= modulus, even modulus)."""


class InvalidKeyError(UniflError, ValueError):
    """Base of key problems (weak, malformed, mismatched)."""


class WeakKeyError(InvalidKeyError):
    """A key is too small or malformed to be used safely."""


class KeyMismatchError(InvalidKeyError):
    """Operands were produced under different keys."""


class EncodingOverflowError(UniflError, OverflowError):
    """A fixed-point value does not fit, or an operation could grow it past the safe bound."""


class SerializationError(UniflError, ValueError):
    """A serialized key or ciphertext frame is malformed, truncated, foreign or of another version."""


class ConfigError(UniflError, ValueError):
    """A configuration file or value is invalid; the message names the field."""


class TransportError(UniflError, RuntimeError):
    """A message could not be delivered or received (peer closed, malformed or out-of-order frame)."""


class PeerTimeout(TransportError, TimeoutError):
    """Nothing arrived from a peer within the receive timeout; the message names the peer and tag."""
