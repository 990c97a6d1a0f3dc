"""UniFL: one API for the homomorphic cryptography of cross-silo federated learning, fast on the
hardware each party owns (CPU, our C++ core, GPU, Intel QAT, FPGA).

Layers (each built only on the one below): ``app`` → ``phe_sdk`` → ``mod_op`` → ``base_op``;
``backends`` implement them on hardware and ``scheduler`` picks one from a party's YAML.
"""

from .backends import available, backend, default_backend, register
from .errors import (BackendUnavailable, EncodingOverflowError, InvalidKeyError, KeyMismatchError,
                     OperandError, SerializationError, UniflError, WeakKeyError)

__version__ = "0.1.0"

__all__ = ["backend", "available", "default_backend", "register", "paillier", "rsa",
           "BackendUnavailable", "EncodingOverflowError", "InvalidKeyError", "KeyMismatchError",
           "OperandError", "SerializationError", "UniflError", "WeakKeyError"]


def __getattr__(name):  # lazy: ``unifl.paillier`` / ``unifl.rsa`` / ``unifl.EncryptedArray``
    if name in ("paillier", "rsa", "encoding"):
        import importlib
        return importlib.import_module(f".phe_sdk.{name}", __name__)
    if name == "EncryptedArray":
        from .phe_sdk.array import EncryptedArray
        return EncryptedArray
    raise AttributeError(name)
