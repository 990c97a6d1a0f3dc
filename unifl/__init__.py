"""UniFL: one API for the homomorphic cryptography of cross-silo federated learning, fast on the
hardware each party owns (CPU, our C++ core, GPU, Intel QAT, FPGA).

Layers (each built only on the one below): ``app`` → ``phe_sdk`` → ``mod_op`` → ``base_op``;
``backends`` implement them on hardware and ``scheduler`` picks one from a party's YAML.
"""

from . import paillier, rsa
from .backends import available, backend, default_backend, register
from .errors import (BackendUnavailable, EncodingOverflowError, InvalidKeyError, KeyMismatchError,
                     OperandError, SerializationError, UniflError, WeakKeyError)

__version__ = "0.1.0"

__all__ = ["EncryptedArray", "histogram", "ops", "backend", "available", "default_backend", "register", "paillier", "rsa",
           "BackendUnavailable", "EncodingOverflowError", "InvalidKeyError", "KeyMismatchError",
           "OperandError", "SerializationError", "UniflError", "WeakKeyError"]


from .phe_sdk import EncryptedArray, histogram, ops  # noqa: E402
