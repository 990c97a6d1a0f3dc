"""Our QAT simulator library keeps the contract our driver is tested against, called directly through
its C ABI (ctypes): the process must be started, buffers must be pinned (translatable), a full
ring answers CPA_STATUS_RETRY, completions arrive only through the poll call, results are
big-endian and correct, and bad operands are CPA_STATUS_INVALID_PARAM; capabilities per instance
(symmetric-only ones without lnSupported), a capped size class refused with CPA_STATUS_FAIL, and
pinned memory freed after icp_sal_userStop refused and counted.
"""

from __future__ import annotations

import ctypes as C
import secrets
import time

import pytest

from unifl.core import registry

pytestmark = pytest.mark.skipif(not registry.probe("qat").available,
                                reason=f"qat unavailable: {registry.probe('qat').reason}")

from unifl.backends.qat import runtime  # noqa: E402

SUCCESS, FAIL, RETRY, INVALID = 0, -1, -2, -4


class FlatBuffer(C.Structure):
    _fields_ = [("dataLenInBytes", C.c_uint32), ("pData", C.c_void_p)]


class ModExpOpData(C.Structure):
    _fields_ = [("modulus", FlatBuffer), ("base", FlatBuffer), ("exponent", FlatBuffer)]


CALLBACK = C.CFUNCTYPE(None, C.c_void_p, C.c_int32, C.c_void_p, C.POINTER(FlatBuffer))


@pytest.fixture
def sim(monkeypatch):
    path = runtime.simulator_path()
    if not path:
        pytest.skip("simulator not built")
    runtime.close()                      # the simulator is one process-wide device
    monkeypatch.setenv("UNIFL_QAT_SIM_RING", "1")
    monkeypatch.setenv("UNIFL_QAT_SIM_INSTANCES", "1")
    lib = C.CDLL(path)
    lib.qaeMemAllocNUMA.restype = C.c_void_p
    lib.qaeMemAllocNUMA.argtypes = [C.c_size_t, C.c_int, C.c_size_t]
    lib.qaeMemFreeNUMA.argtypes = [C.POINTER(C.c_void_p)]
    lib.qaeVirtToPhysNUMA.restype = C.c_uint64
    lib.qaeVirtToPhysNUMA.argtypes = [C.c_void_p]
    lib.cpaCyLnModExp.argtypes = [C.c_void_p, CALLBACK, C.c_void_p, C.POINTER(ModExpOpData),
                                  C.POINTER(FlatBuffer)]
    lib.icp_sal_CyPollInstance.argtypes = [C.c_void_p, C.c_uint32]
    for f in ("cpaCyStartInstance", "cpaCyStopInstance"):
        getattr(lib, f).argtypes = [C.c_void_p]
    lib.cpaCySetAddressTranslation.argtypes = [C.c_void_p, C.c_void_p]
    yield lib
    lib.icp_sal_userStop()
    runtime.close()


def _pinned(lib, value: int, width: int):
    p = lib.qaeMemAllocNUMA(width, 0, 8)
    C.memmove(p, value.to_bytes(width, "big"), width)
    return FlatBuffer(width, p)


def _poll_until_one(lib, inst, seconds: float = 30.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if lib.icp_sal_CyPollInstance(inst, 0) == SUCCESS:
            return True
        time.sleep(0.0005)
    return False


def test_simulator_contract(sim):
    lib = sim
    n = C.c_uint16()
    assert lib.cpaCyGetNumInstances(C.byref(n)) == FAIL          # not started yet
    assert lib.icp_sal_userStart(b"SSL") == SUCCESS
    assert lib.icp_sal_userStart(b"SSL") == FAIL                  # one start per process
    assert lib.cpaCyGetNumInstances(C.byref(n)) == SUCCESS and n.value == 1
    handles = (C.c_void_p * 1)()
    assert lib.cpaCyGetInstances(1, handles) == SUCCESS
    inst = handles[0]
    assert lib.cpaCyStartInstance(inst) == SUCCESS

    width = 64                                                    # the 512-bit class
    m = secrets.randbits(511) | (1 << 510) | 1
    x, e = secrets.randbelow(m), secrets.randbits(500)
    op = ModExpOpData(_pinned(lib, m, width), _pinned(lib, x, width), _pinned(lib, e, width))
    res = _pinned(lib, 0, width)
    landed = []

    @CALLBACK
    def cb(tag, status, opdata, out):
        landed.append((tag, status, C.string_at(out.contents.pData, out.contents.dataLenInBytes)))

    # no address translation yet: the buffers cannot be checked for being pinned
    assert lib.cpaCyLnModExp(inst, cb, None, C.byref(op), C.byref(res)) == INVALID
    v2p = C.cast(lib.qaeVirtToPhysNUMA, C.c_void_p)
    assert lib.cpaCySetAddressTranslation(inst, v2p) == SUCCESS
    # an ordinary (not pinned) buffer is refused
    plain = C.create_string_buffer(width)
    bad = ModExpOpData(op.modulus, FlatBuffer(width, C.cast(plain, C.c_void_p)), op.exponent)
    assert lib.cpaCyLnModExp(inst, cb, None, C.byref(bad), C.byref(res)) == INVALID
    # a result buffer shorter than the modulus is refused
    short = FlatBuffer(width - 8, res.pData)
    assert lib.cpaCyLnModExp(inst, cb, None, C.byref(op), C.byref(short)) == INVALID

    assert lib.cpaCyLnModExp(inst, cb, C.c_void_p(7), C.byref(op), C.byref(res)) == SUCCESS
    assert lib.cpaCyLnModExp(inst, cb, None, C.byref(op), C.byref(res)) == RETRY   # ring of 1
    assert _poll_until_one(lib, inst)                             # completes only via the poll
    assert len(landed) == 1
    tag, status, out = landed[0]
    assert tag == 7 and status == SUCCESS
    assert int.from_bytes(out, "big") == pow(x, e, m)
    assert lib.icp_sal_CyPollInstance(inst, 0) == RETRY          # nothing left
    assert lib.cpaCyLnModExp(inst, cb, None, C.byref(op), C.byref(res)) == SUCCESS  # slot freed
    assert _poll_until_one(lib, inst) and len(landed) == 2
    assert lib.cpaCyStopInstance(inst) == SUCCESS
    assert lib.cpaCyLnModExp(inst, cb, None, C.byref(op), C.byref(res)) == FAIL   # stopped
    for fb in (op.modulus, op.base, op.exponent, res):
        p = C.c_void_p(fb.pData)
        lib.qaeMemFreeNUMA(C.byref(p))
        assert p.value is None


def test_simulator_capabilities_size_cap_and_shutdown_order(sim, monkeypatch):
    """The deployment cases the driver is tested against: a symmetric-only instance (no
    lnSupported; cpaCyLnModExp fails), a size class the library lacks (CPA_STATUS_FAIL at
    submission), and pinned memory freed after icp_sal_userStop (refused and counted)."""
    lib = sim
    monkeypatch.setenv("UNIFL_QAT_SIM_INSTANCES", "2")
    monkeypatch.setenv("UNIFL_QAT_SIM_SYM_ONLY", "1")
    monkeypatch.setenv("UNIFL_QAT_SIM_MAX_BITS", "4096")
    monkeypatch.setenv("UNIFL_QAT_SIM_RING", "8")
    lib.cpaCyQueryCapabilities.argtypes = [C.c_void_p, C.c_void_p]
    assert lib.icp_sal_userStart(b"SSL") == SUCCESS
    handles = (C.c_void_p * 2)()
    assert lib.cpaCyGetInstances(2, handles) == SUCCESS
    caps = (C.c_int32 * 128)()                       # larger than any CpaCyCapabilitiesInfo
    assert lib.cpaCyQueryCapabilities(handles[0], caps) == FAIL      # not started yet
    v2p = C.cast(lib.qaeVirtToPhysNUMA, C.c_void_p)
    for h in handles:
        assert lib.cpaCyStartInstance(h) == SUCCESS
        assert lib.cpaCySetAddressTranslation(h, v2p) == SUCCESS
    ln = []
    for h in handles:
        assert lib.cpaCyQueryCapabilities(h, caps) == SUCCESS
        assert caps[0] == 1                          # symSupported
        ln.append(caps[9])                           # lnSupported: the 10th flag, offset 36
    assert ln == [0, 1]

    landed = []

    @CALLBACK
    def cb(tag, status, opdata, out):
        landed.append(status)

    def op(bits: int):
        width = bits // 8
        m = secrets.randbits(bits) | (1 << (bits - 1)) | 1
        return (ModExpOpData(_pinned(lib, m, width), _pinned(lib, secrets.randbelow(m), width),
                             _pinned(lib, secrets.randbits(bits), width)), _pinned(lib, 0, width))

    small, small_res = op(2048)
    big, big_res = op(8192)
    assert lib.cpaCyLnModExp(handles[0], cb, None, C.byref(small), C.byref(small_res)) == FAIL
    assert lib.cpaCyLnModExp(handles[1], cb, None, C.byref(big), C.byref(big_res)) == FAIL
    assert lib.cpaCyLnModExp(handles[1], cb, None, C.byref(small), C.byref(small_res)) == SUCCESS
    assert _poll_until_one(lib, handles[1]) and landed == [SUCCESS]

    counters = (C.c_uint64 * 8)()
    p = C.c_void_p(small.base.pData)
    lib.qaeMemFreeNUMA(C.byref(p))                   # before the stop: freed
    assert p.value is None
    assert lib.icp_sal_userStop() == SUCCESS
    lib.unifl_qat_sim_stats(counters)
    live = counters[7]
    p = C.c_void_p(small.modulus.pData)
    lib.qaeMemFreeNUMA(C.byref(p))                   # after the stop: refused, counted
    assert p.value == small.modulus.pData
    lib.unifl_qat_sim_stats(counters)
    assert counters[6] == 1 and counters[7] == live
    assert lib.icp_sal_userStart(b"SSL") == SUCCESS  # the fixture stops it again
