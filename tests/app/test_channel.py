"""Codec (typed, versioned, no pickle) and channels: round trips, rejection of bad input, timeouts."""

import secrets
import threading
import time

import numpy as np
import pytest

import unifl
from unifl.app import codec
from unifl.app.channel import MAX_KEYS, Channel, Transport, local_transports
from unifl.core.errors import KeyMismatchError, PeerTimeout, SerializationError, TransportError
from unifl.phe_sdk import EncryptedArray, paillier, rsa


@pytest.fixture(scope="module")
def keys():
    return paillier.keygen(1024)


@pytest.fixture(scope="module")
def be():
    return unifl.backend("native")


def test_round_trip_plain_values():
    obj = {"none": None, "t": True, "f": False, "small": 7, "neg": -12345678901234567890123,
           "zero": 0, "float": -1.5e-300, "str": "héllo", "bytes": b"\x00\xff",
           "list": [1, [2, (3, "x")]], "tuple": (1.0, None),
           "f64": np.arange(6, dtype=np.float64).reshape(2, 3), "i8": np.array([-1, 5], np.int8),
           "u64": np.array([2**64 - 1], np.uint64), "bool": np.array([True, False]),
           "empty": np.zeros((0, 3))}
    back = codec.decode(codec.encode(obj))
    assert back.keys() == obj.keys()
    for k, v in obj.items():
        if isinstance(v, np.ndarray):
            assert back[k].dtype == v.dtype and back[k].shape == v.shape
            assert np.array_equal(back[k], v)
        else:
            assert back[k] == v and type(back[k]) is type(v)


def test_round_trip_keys_and_encrypted_array(keys, be):
    pk, sk = keys
    rpk, _ = rsa.keygen(1024)
    arr = EncryptedArray.encrypt(pk, np.array([[1.25, -2.0], [3.5, 0.0]]), backend=be)
    seen = {}
    data = codec.encode({"pk": pk, "rsa": rpk, "arr": arr})
    back = codec.decode(data, seen.get, on_key=lambda k: seen.__setitem__(codec.fingerprint16(k), k),
                        backend=be)
    assert back["pk"] == pk and back["rsa"] == rpk
    np.testing.assert_array_equal(back["arr"].decrypt(sk), [[1.25, -2.0], [3.5, 0.0]])


def test_unknown_key_rejected(keys, be):
    pk, _ = keys
    arr = EncryptedArray.encrypt(pk, np.array([1, 2]), backend=be)
    with pytest.raises(KeyMismatchError):
        codec.decode(codec.encode(arr), lambda fp: None)


def test_private_keys_and_foreign_types_refused(keys):
    with pytest.raises(TypeError):
        codec.encode(keys[1])
    with pytest.raises(TypeError):
        codec.encode({1: 2})
    with pytest.raises(TypeError):
        codec.encode(object())
    with pytest.raises(TypeError):
        codec.encode(np.array(["a"]))


@pytest.mark.parametrize("data", [b"", b"UFLM", b"XXXX\x01N", b"UFLM\x02N", b"UFLM\x01Z",
                                  b"UFLM\x01NN", b"UFLM\x01S\x05\x00\x00\x00ab",
                                  b"UFLM\x01L\xff\xff\xff\xff", b"UFLM\x01I\x02\x01\x00\x00\x00\x01",
                                  b"UFLM\x01A\x63\x01", b"UFLM\x01S\x02\x00\x00\x00\xff\xfe",
                                  b"UFLM\x01" + b"L\x01\x00\x00\x00" * 40 + b"N"])
def test_malformed_rejected(data):
    with pytest.raises(SerializationError):
        codec.decode(data)


def test_every_truncation_rejected(keys, be):
    pk, _ = keys
    data = codec.encode({"a": [1, 2.0, "s"], "x": np.ones(3), "e": EncryptedArray.encrypt(pk, [1],
                                                                                             backend=be)})
    known = {codec.fingerprint16(pk): pk}
    for cut in range(len(data)):
        with pytest.raises((SerializationError, KeyMismatchError)):
            codec.decode(data[:cut], known.get)


def test_tampered_ciphertext_frame_rejected(keys, be):
    pk, _ = keys
    data = bytearray(codec.encode(EncryptedArray.encrypt(pk, [1, 2, 3], backend=be)))
    data[-20] ^= 0x40
    with pytest.raises(SerializationError):
        codec.decode(bytes(data), {codec.fingerprint16(pk): pk}.get)


def test_local_transport_order_timeout_and_close():
    t = local_transports(("guest", "host"))
    assert isinstance(t["guest"], Transport)
    for i in range(5):
        t["guest"].send("host", "tag", bytes([i]))
    t["guest"].send("host", "other", b"o")
    assert t["host"].recv("guest", "other", 1) == b"o"
    assert [t["host"].recv("guest", "tag", 1)[0] for _ in range(5)] == list(range(5))
    assert t["guest"].stats["bytes_sent"] == 6 and t["host"].stats["bytes_received"] == 6
    t0 = time.monotonic()
    with pytest.raises(PeerTimeout, match="guest"):
        t["host"].recv("guest", "never", timeout=0.2)
    assert time.monotonic() - t0 < 2
    t["guest"].close()
    with pytest.raises(TransportError):
        t["host"].recv("guest", "x", timeout=5)


def test_channel_threads_and_key_registry(keys, be):
    pk, sk = keys
    t = local_transports(("guest", "host"))
    g, h = Channel(t["guest"], 5, be), Channel(t["host"], 5, be)
    out = {}

    def host():
        key = h.recv("guest", "pk")
        arr = h.recv("guest", "arr")
        h.send("guest", "res", (arr * 3).obfuscate())
        out["key"] = key

    th = threading.Thread(target=host)
    th.start()
    g.send("host", "pk", pk)
    g.send("host", "arr", EncryptedArray.encrypt(pk, np.array([1.5, -2.0]), backend=be))
    res = g.recv("host", "res")
    th.join()
    np.testing.assert_allclose(res.decrypt(sk), [4.5, -6.0])
    # an array under a key the host never saw is rejected
    other, _ = paillier.keygen(1024)
    g.send("host", "bad", EncryptedArray.encrypt(other, [1], backend=be))
    with pytest.raises(KeyMismatchError):
        h.recv("guest", "bad")
    with pytest.raises(PeerTimeout):
        h.recv("guest", "silent", timeout=0.1)


def test_run_job_validates_the_job():
    from unifl.app.jobs import run_job, validate_job
    from unifl.core.errors import ConfigError
    t = local_transports(("guest", "host"))
    chan = Channel(t["guest"], 1)
    with pytest.raises(ConfigError, match="algorithm"):
        run_job("guest", {"algorithm": "nope"}, chan, None)
    with pytest.raises(ConfigError, match="parties"):
        validate_job({"algorithm": "vlr", "parties": ["guest"]})
    with pytest.raises(ConfigError, match="key_bits"):
        validate_job({"algorithm": "vlr", "key_bits": 512})
    with pytest.raises(ConfigError, match="role"):
        run_job("arbiter", {"algorithm": "vlr"}, chan, None)
    with pytest.raises(ConfigError, match="unknown field"):
        run_job("guest", {"algorithm": "vlr", "params": {"epoch": 1}}, chan, None)


def test_a_peer_sending_ever_new_keys_does_not_grow_the_key_registry(keys, be):
    """A hostile peer that puts a public key of a new modulus in every message: the receiving
    channel keeps the MAX_KEYS most recently used, and its own key, still in use, stays known."""
    pk, sk = keys
    t = local_transports(("guest", "host"))
    guest, host = Channel(t["guest"], 5, be), Channel(t["host"], 5, be)
    guest.send("host", "own", pk)                 # host learns the guest's key first
    assert host.recv("guest", "own") == pk
    arr = EncryptedArray.encrypt(pk, np.array([1.5, -2.0]), backend=be)
    for i in range(3 * MAX_KEYS):
        # a fresh odd composite 1024-bit modulus per message (a receiver cannot factor it)
        n = ((1 << 511) | secrets.randbits(510) << 1 | 1) * ((1 << 512) | secrets.randbits(511) << 1 | 1)
        guest.send("host", "junk", paillier.PublicKey(n))
        host.recv("guest", "junk")
        if i % 16 == 0:                           # the protocol keeps using the real key
            guest.send("host", "ct", arr)
            np.testing.assert_array_equal(host.recv("guest", "ct").decrypt(sk), [1.5, -2.0])
    assert len(host._keys) <= MAX_KEYS
    assert host.known_key(codec.fingerprint16(pk)) == pk
