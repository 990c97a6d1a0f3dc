"""Layer 2: Paillier and RSA on batches -- keys, fixed-point encoding, encrypted arrays,
serialization and the nine FL operations O1–O9 (``unifl.phe_sdk.ops``)."""

from . import encoding, ops, paillier, rsa
from .array import EncryptedArray, histogram

__all__ = ["paillier", "rsa", "encoding", "ops", "EncryptedArray", "histogram"]
