"""Make FATE 2.x accept ``kind: unifl`` without editing FATE's files (done once per process).

Three runtime additions, each the narrowest that works:

1. ``PHECipherBuilder.setup`` is wrapped: kind ``unifl`` builds a :mod:`unifl.fate.kit` cipher, every
   other kind goes to FATE's original.  ``PHECipherBuilder.__init__`` is wrapped to accept the extra
   options ``backend`` (a UniFL backend name) and ``config`` (a party YAML path), so
   ``ctx.cipher.set_phe(ctx.device, {"kind": "unifl", "key_length": 2048, "backend": "native"})`` works.
2. The federation unpickler's allow-list gets exactly the kit's four checking rebuild functions and
   ``evaluator`` (:data:`ALLOWED`): no class (a pickle could make one without its constructor) and
   no ``SK`` (a private key is refused on receipt).  The restriction itself stays on.  The
   federation *pickler* refuses to send a private key: a UniFL or FATE-kit private key object
   (``reducer_override``), and any message whose bytes carry a secret value of a private key
   this process holds, by the binary and text rules of :mod:`unifl.phe_sdk.exposure` (p as a
   pickled int, inside a string or tensor, ...), with ``PrivateKeyExposure`` before anything
   is pushed.  Tables (``KVTable``, FATE's DataFrames) travel by reference and are serialized
   by FATE's computing engine: those are not scanned.
3. ``HEParam.kind`` (the ``he_param`` of coordinated LR/LinR, hetero SecureBoost and feature binning)
   accepts ``unifl`` as one more choice.
"""

from __future__ import annotations

import os
import threading
from typing import Any, Optional

KIND = "unifl"
MIN_KEY_BITS = 1024
#: what a peer's pickle may name: the kit's validating rebuild functions and the evaluator (static
#: methods only); never a class (NEWOBJ would skip its checks) and never SK (a private key)
ALLOWED = {"unifl.fate.kit": {"_rebuild_fv", "_rebuild_ev", "_rebuild_pk", "_rebuild_coder",
                              "evaluator"}}
_done = False
_lock = threading.Lock()


def _patch_dispatch() -> None:
    from fate.arch.context import _cipher

    builder = _cipher.PHECipherBuilder
    if getattr(builder, "_unifl_patched", False):
        return
    orig_init, orig_setup = builder.__init__, builder.setup

    def __init__(self: Any, ctx: Any, kind: str, key_length: int, **unifl_options: Any) -> None:
        orig_init(self, ctx, kind, key_length)
        unknown = set(unifl_options) - {"backend", "config"}
        if unknown:
            raise TypeError(f"unknown PHE options {sorted(unknown)} (UniFL adds 'backend', 'config')")
        self._unifl_options = unifl_options

    def setup(self: Any, options: Optional[dict[str, Any]] = None) -> Any:
        opts = dict(getattr(self, "_unifl_options", {}))
        opts.update(options or {})
        kind = opts.get("kind", self.kind)
        if kind != KIND:
            if options is not None:
                options = {k: v for k, v in options.items() if k not in ("backend", "config")}
            return orig_setup(self, options)
        key_size = int(opts.get("key_length", self.key_length))
        if key_size < MIN_KEY_BITS:
            raise ValueError(f"key length {key_size} < {MIN_KEY_BITS}, not allowed for kind {KIND}")
        from . import kit, party
        if opts.get("config"):
            os.environ["UNIFL_CONFIG"] = str(opts["config"])
            party.set_backend(None)
        if opts.get("backend"):
            party.set_backend(str(opts["backend"]))
        from fate.arch.tensor.phe import PHETensorCipher
        sk, pk, coder = kit.keygen(key_size)
        tensor_cipher = PHETensorCipher.from_raw_cipher(pk, coder, sk, kit.evaluator)
        # negative numbers: yes; squeeze and pack: yes (same bit layouts as FATE's paillier kit)
        return _cipher.PHECipher(KIND, key_size, pk, sk, kit.evaluator, coder, tensor_cipher,
                                 True, True, True)

    builder.__init__ = __init__
    builder.setup = setup
    builder._unifl_patched = True


def _patch_allow_list() -> None:
    from fate.arch.federation.api import _serdes

    allow = _serdes.TableRemotePersistentUnpickler._TableRemotePersistentUnpickler__ALLOW_CLASSES
    for module, names in ALLOWED.items():
        allow.setdefault(module, set()).update(names)


def _patch_federation_pickler() -> None:
    import pickle

    from fate.arch.federation.api import _serdes

    from ..core.errors import PrivateKeyExposure
    from ..phe_sdk import exposure, paillier, rsa
    from . import kit

    pickler = _serdes.TableRemotePersistentPickler
    if getattr(pickler, "_unifl_patched", False):
        return
    orig_init = pickler.__init__
    private = (kit.SK, paillier.PrivateKey, rsa.PrivateKey)

    def __init__(self: Any, federation: Any, name: str, tag: str, parties: Any, f: Any) -> None:
        orig_init(self, federation, name, tag, parties, f)
        self._unifl_file = f

    def reducer_override(self: Any, obj: Any) -> Any:
        if isinstance(obj, private):
            raise PrivateKeyExposure(f"a private key ({type(obj).__name__}) is never sent to "
                                     "another party")
        return NotImplemented

    def dump(self: Any, obj: Any) -> None:
        pickle.Pickler.dump(self, obj)
        getvalue = getattr(self._unifl_file, "getvalue", None)
        if callable(getvalue) and exposure.revealed_in(getvalue()):
            raise PrivateKeyExposure("this federation message carries a secret value of a "
                                     "private key this party holds (unifl.phe_sdk.exposure); "
                                     "it is not sent")

    pickler.__init__ = __init__
    pickler.reducer_override = reducer_override
    pickler.dump = dump
    pickler._unifl_patched = True


def _patch_he_param() -> None:
    from fate.components.core.params import _he_param

    choice_type = _he_param.HEParam.__fields__["kind"].type_
    if KIND not in choice_type.choice:
        choice_type.choice = [*choice_type.choice, KIND]


def install() -> None:
    """Apply the additions (idempotent; raises ImportError when FATE is not installed)."""
    global _done
    with _lock:
        if _done:
            return
        _patch_dispatch()
        _patch_allow_list()
        _patch_federation_pickler()
        _patch_he_param()
        _done = True
