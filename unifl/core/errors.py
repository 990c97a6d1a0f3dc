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


# ---- transport faults (unifl.app.transport): each names the peer and what was refused ----------
class PeerUnavailable(TransportError, ConnectionError):
    """A peer could not be reached (not started, gone, TLS handshake refused) within the deadline."""


class PeerClosed(TransportError):
    """The peer closed its transport (its party stopped) while a message from it was awaited."""


class ProtocolVersionError(TransportError):
    """The peer speaks another version of the wire protocol."""


class JobMismatchError(TransportError):
    """A message belongs to another job (job id differs): a misconfigured or foreign peer."""


class MalformedMessageError(TransportError):
    """An envelope could not be parsed, failed its checksum, or was addressed to another role."""


class SequenceError(TransportError):
    """A message arrived out of order (a gap in the sender's sequence numbers): one was lost."""


class MessageTooLarge(TransportError):
    """A message exceeds the configured size limit (``network.max_message_mb``)."""


# ---- what a hostile or faulty peer is refused with --------------------------------------------
class InvalidCiphertextError(OperandError):
    """A ciphertext is not a unit mod n² (it shares a factor with n), or its decryption would pass
    through a zero CRT half: decrypting it could reveal the factorisation of n, so it is refused."""


class ProtocolViolation(TransportError):
    """A peer sent something the protocol does not allow: a value of the wrong shape, size or count,
    a repeated or out-of-range query, a value it must not send back.  Names the field and the limit."""


class PeerQuotaExceeded(TransportError):
    """A peer has more bytes or messages queued at this party than the configured cap."""


class SessionError(TransportError):
    """A peer opened a second session (or replayed an old one) without an explicit resume."""


class InsecureTransportError(TransportError):
    """A secret (a private key) was about to cross a link that is not mutually authenticated TLS."""


class SignatureError(UniflError, ValueError):
    """An RSA signature does not verify (s^e != FDH(x) mod n): a faulty or dishonest signer."""


class PrivateKeyExposure(UniflError, TypeError):
    """A private key (the object, or its JSON text however wrapped or nested) was about to be
    encoded into an ordinary message; private keys travel only through the explicit private-key
    path over mutually authenticated TLS."""


class DeviceError(UniflError, RuntimeError):
    """A device (GPU, FPGA card, QAT instance) or its driver failed while running an op: a launch, a
    copy, a request that came back failed.  The scheduler's fallback chain hands the batch on."""


class DeviceDataLost(DeviceError):
    """Values held only in the memory of a device that failed cannot be read back, so the work that
    needs them cannot be re-run on another backend; the job has to resume from a checkpoint.  A
    device fault, but not one the fallback chain can mend: it is raised to the caller, never re-run."""


class BenchmarkWorkerError(UniflError, RuntimeError):
    """A benchmark measured in another interpreter (``python -m unifl.bench.worker``, e.g. FATE's kit
    in FATE's own virtual environment) failed, timed out or broke the one-JSON-document-on-stdout
    protocol; the message has the command's exit status and the end of its stderr."""


class DecryptionProofError(UniflError, ValueError):
    """A decryption returned by a key owner does not open its ciphertext: the randomness r sent
    with plaintext m fails (1 + m·n)·r^n ≡ c (mod n²), or a value is out of range.  The key owner
    returned something other than the decryption (it is never used)."""
