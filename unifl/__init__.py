"""UniFL: one API for the homomorphic cryptography of cross-silo federated learning, fast on the
hardware each party owns (CPU, our C++ core, GPU, Intel QAT, FPGA).

The public surface, one import path per name::

    import unifl
    pk, sk = unifl.keygen(2048)
    x = unifl.EncryptedArray.encrypt(pk, [1.5, -2.0], backend=unifl.backend("native"))
    frame = unifl.dumps(x); y = unifl.loads(frame, public_key=pk)

Layers (each built only on the one below; docs/architecture.md): ``app`` → ``phe_sdk`` → ``mod_op``
→ ``base_op`` → ``core``; ``backends`` implement the op contract of ``core``, and ``scheduler`` picks
them from a party's YAML.
"""

from .core.errors import (BackendUnavailable, ConfigError, DeviceError, EncodingOverflowError,
                          InvalidCiphertextError, InvalidKeyError, KeyMismatchError, OperandError,
                          SerializationError, TransportError, UniflError, WeakKeyError)
from .core.registry import available as available_backends
from .core.registry import backend
from .phe_sdk.array import EncryptedArray
from .phe_sdk.paillier import PrivateKey, PublicKey, keygen
from .phe_sdk.serialize import dumps, loads

__version__ = "0.3.0.dev0"

__all__ = ["keygen", "PublicKey", "PrivateKey", "EncryptedArray", "dumps", "loads", "backend",
           "available_backends", "UniflError", "BackendUnavailable", "ConfigError", "DeviceError",
           "EncodingOverflowError", "InvalidCiphertextError", "InvalidKeyError", "KeyMismatchError",
           "OperandError", "SerializationError", "TransportError", "WeakKeyError"]
