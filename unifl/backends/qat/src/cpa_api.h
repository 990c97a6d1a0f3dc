// Our declarations of the part of the Intel QuickAssist (QAT) C API that UniFL uses, written from
// the documented API (the Cpa*/cpaCy* reference manual and the public qatlib headers cpa.h,
// cpa_types.h, cpa_cy_common.h, cpa_cy_im.h, cpa_cy_ln.h, icp_sal_user.h, icp_sal_poll.h, qae_mem.h).
// No vendor header is copied: only the documented names, values and struct layouts we need.
//
// Both sides of the ABI include this file: the driver (qat_driver.cpp, which resolves every function
// at run time with dlsym) and the simulator library (qat_sim.cpp, which exports them).
//
// CpaInstanceInfo2 and its layout.  The documented struct is
//   { CpaAccelerationServiceType accelerationServiceType;      //   0  (enum: 4 bytes)
//     Cpa8U vendorName[64]; partName[64]; swVersion[64];       //   4, 68, 132
//     Cpa8U instName[64]; instID[128];                         // 196, 260
//     CpaPhysicalInstanceId physInstId;  /* 4 x Cpa16U + Cpa32U = 12 */ // 388
//     CPA_BITMAP(coreAffinity, CPA_MAX_CORES);  /* Cpa32U[(CPA_MAX_CORES+31)/32] */ // 400
//     Cpa32U nodeAffinity; CpaOperationalState operState;
//     CpaBoolean requiresPhysicallyContiguousMemory, isPolled, isOffloaded; }   // enums: 4 bytes
// CPA_MAX_CORES is 256 in older API releases (QAT 1.7 / early qatlib, the 8970 era) and 4096 in
// newer ones, so everything after physInstId moves between releases (sizeof 452 vs 932).  We
// therefore never pass a struct of one assumed size: the driver passes a canary-filled buffer much
// larger than either, reads the stable leading fields at their fixed offsets, and recognises which
// of the two documented tails the library wrote from where its writes end (qat_driver.cpp,
// read_instance_info).  If neither matches, it reads only the leading fields and assumes the
// conservative defaults (polled, physically contiguous memory, node 0) -- and says so in info().
#pragma once
#include <cstddef>
#include <cstdint>

extern "C" {
typedef uint8_t Cpa8U;
typedef uint16_t Cpa16U;
typedef uint32_t Cpa32U;
typedef int32_t Cpa32S;
typedef uint64_t Cpa64U;
typedef Cpa32S CpaStatus;
typedef Cpa32S CpaBoolean;  // enum { CPA_FALSE = 0, CPA_TRUE = 1 }: int-sized
typedef void *CpaInstanceHandle;
typedef Cpa64U CpaPhysicalAddr;
typedef CpaPhysicalAddr (*CpaVirtualToPhysical)(void *pVirtualAddr);

enum : CpaStatus {
    CPA_STATUS_SUCCESS = 0,
    CPA_STATUS_FAIL = -1,
    CPA_STATUS_RETRY = -2,
    CPA_STATUS_RESOURCE = -3,
    CPA_STATUS_INVALID_PARAM = -4,
    CPA_STATUS_FATAL = -5,
    CPA_STATUS_UNSUPPORTED = -6,
    CPA_STATUS_RESTARTING = -7,
};
enum : CpaBoolean { CPA_FALSE = 0, CPA_TRUE = 1 };

typedef struct _CpaFlatBuffer {
    Cpa32U dataLenInBytes;  // input: current length; output: capacity (never written past)
    Cpa8U *pData;           // virtual address; physically contiguous unless Info2 says otherwise
} CpaFlatBuffer;

// Large-number ModExp operands: big-endian octet strings, leading zero bytes allowed; each at most
// 8192 bits; modulus > 0.  Owned by the implementation until the callback.
typedef struct _CpaCyLnModExpOpData {
    CpaFlatBuffer modulus;
    CpaFlatBuffer base;
    CpaFlatBuffer exponent;
} CpaCyLnModExpOpData;

typedef void (*CpaCyGenFlatBufCbFunc)(void *pCallbackTag, CpaStatus status, void *pOpdata,
                                      CpaFlatBuffer *pOut);

// --- CpaInstanceInfo2: the stable leading part (offsets above) -----------------------------------
typedef struct _CpaPhysicalInstanceId {
    Cpa16U packageId;
    Cpa16U acceleratorId;
    Cpa16U executionEngineId;
    Cpa16U busAddress;
    Cpa32U kptAcHandle;
} CpaPhysicalInstanceId;

typedef struct _UniflCpaInstanceInfo2Head {
    Cpa32S accelerationServiceType;  // CPA_ACC_SVC_TYPE_CRYPTO = 0
    Cpa8U vendorName[64];
    Cpa8U partName[64];
    Cpa8U swVersion[64];
    Cpa8U instName[64];
    Cpa8U instID[128];
    CpaPhysicalInstanceId physInstId;
} UniflCpaInstanceInfo2Head;

// The documented tail that follows coreAffinity.
typedef struct _UniflCpaInstanceInfo2Tail {
    Cpa32U nodeAffinity;
    Cpa32S operState;  // CPA_OPER_STATE_DOWN = 0, CPA_OPER_STATE_UP = 1
    CpaBoolean requiresPhysicallyContiguousMemory;
    CpaBoolean isPolled;
    CpaBoolean isOffloaded;
} UniflCpaInstanceInfo2Tail;

// --- CpaCyCapabilitiesInfo (cpa_cy_im.h), filled by cpaCyQueryCapabilities ----------------------
// A sequence of CpaBoolean flags (4 bytes each).  The documented order of the leading flags has not
// changed across the API releases we checked (qatlib 20.08 .. 26.08): sym, symDp, dh, dsa, rsa, ec,
// ecdh, ecdsa, key, ln, prime, drbg, nrbg, rand, kpt, hkdf, extAlgchain, ecEdMont, then ecSm2 from
// 22.07 on.  Newer releases append flags, so the struct grows at its end: the driver passes a
// zeroed buffer larger than any documented size (kCapabilitiesBufferBytes) and reads only
// lnSupported, at its fixed offset 36.  qatlib sets lnSupported for crypto and asym instances and
// clears it for symmetric-only ones, on which cpaCyLnModExp fails (CPA_STATUS_FAIL).
typedef struct _UniflCpaCyCapabilitiesInfo {
    CpaBoolean symSupported;
    CpaBoolean symDpSupported;
    CpaBoolean dhSupported;
    CpaBoolean dsaSupported;
    CpaBoolean rsaSupported;
    CpaBoolean ecSupported;
    CpaBoolean ecdhSupported;
    CpaBoolean ecdsaSupported;
    CpaBoolean keySupported;
    CpaBoolean lnSupported;  // the Large Number API (cpaCyLnModExp): what we need
    CpaBoolean primeSupported;
    CpaBoolean drbgSupported;
    CpaBoolean nrbgSupported;
    CpaBoolean randSupported;
    CpaBoolean kptSupported;
    CpaBoolean hkdfSupported;
    CpaBoolean extAlgchainSupported;
    CpaBoolean ecEdMontSupported;
    CpaBoolean ecSm2Supported;
} UniflCpaCyCapabilitiesInfo;

}  // extern "C"

static const size_t kCapabilitiesBufferBytes = 512;
static_assert(offsetof(UniflCpaCyCapabilitiesInfo, lnSupported) == 36, "lnSupported offset");
static_assert(sizeof(UniflCpaCyCapabilitiesInfo) == 76, "CpaCyCapabilitiesInfo, 19 flags");
static_assert(sizeof(UniflCpaCyCapabilitiesInfo) < kCapabilitiesBufferBytes, "capabilities buffer");

// The full struct for a given CPA_MAX_CORES (the two documented values are 256 and 4096).
template <unsigned MaxCores>
struct UniflCpaInstanceInfo2 {
    UniflCpaInstanceInfo2Head head;
    Cpa32U coreAffinity[(MaxCores + 31) / 32];
    UniflCpaInstanceInfo2Tail tail;
};
static_assert(sizeof(UniflCpaInstanceInfo2Head) == 400, "CpaInstanceInfo2 leading fields");
static_assert(offsetof(UniflCpaInstanceInfo2<256>, tail) == 432, "CPA_MAX_CORES=256 layout");
static_assert(sizeof(UniflCpaInstanceInfo2<256>) == 452, "CPA_MAX_CORES=256 layout");
static_assert(sizeof(UniflCpaInstanceInfo2<4096>) == 932, "CPA_MAX_CORES=4096 layout");
static_assert(sizeof(CpaFlatBuffer) == 16 && offsetof(CpaFlatBuffer, pData) == 8, "CpaFlatBuffer");
static_assert(sizeof(CpaCyLnModExpOpData) == 48, "CpaCyLnModExpOpData");

extern "C" {

// --- function signatures (resolved with dlsym by the driver; exported by the simulator) ---------
typedef CpaStatus (*fn_icp_sal_userStart)(const char *pProcessName);
typedef CpaStatus (*fn_icp_sal_userStop)(void);
typedef CpaStatus (*fn_cpaCyGetNumInstances)(Cpa16U *pNumInstances);
typedef CpaStatus (*fn_cpaCyGetInstances)(Cpa16U numInstances, CpaInstanceHandle *cyInstances);
typedef CpaStatus (*fn_cpaCyInstanceGetInfo2)(const CpaInstanceHandle instanceHandle,
                                              void *pInstanceInfo2);
typedef CpaStatus (*fn_cpaCyStartInstance)(CpaInstanceHandle instanceHandle);
// pCapInfo: a CpaCyCapabilitiesInfo of the library's own (release-dependent) size; see above
typedef CpaStatus (*fn_cpaCyQueryCapabilities)(const CpaInstanceHandle instanceHandle,
                                               void *pCapInfo);
typedef CpaStatus (*fn_cpaCyStopInstance)(CpaInstanceHandle instanceHandle);
typedef CpaStatus (*fn_cpaCySetAddressTranslation)(const CpaInstanceHandle instanceHandle,
                                                   CpaVirtualToPhysical virtual2Physical);
typedef CpaStatus (*fn_cpaCyLnModExp)(const CpaInstanceHandle instanceHandle,
                                      const CpaCyGenFlatBufCbFunc pLnModExpCb, void *pCallbackTag,
                                      const CpaCyLnModExpOpData *pLnModExpOpData,
                                      CpaFlatBuffer *pResult);
typedef CpaStatus (*fn_icp_sal_CyPollInstance)(CpaInstanceHandle instanceHandle,
                                               Cpa32U response_quota);
// USDM (pinned, physically contiguous, NUMA-local memory)
typedef int (*fn_qaeMemInit)(void);
typedef void (*fn_qaeMemDestroy)(void);
typedef void *(*fn_qaeMemAllocNUMA)(size_t size, int node, size_t phys_alignment_byte);
typedef void (*fn_qaeMemFreeNUMA)(void **ptr);
typedef uint64_t (*fn_qaeVirtToPhysNUMA)(void *pVirtAddr);

// Exported by our simulator only: lets the driver label itself honestly ("QAT simulator"), and
// tell it from a real library (the two may not share one process: qat_driver.cpp, claim_process).
typedef const char *(*fn_unifl_qat_sim_identity)(void);
// The simulator's counters (kSimStats entries; see qat_sim.cpp, unifl_qat_sim_stats).
enum { kSimStats = 8 };
typedef void (*fn_unifl_qat_sim_stats)(uint64_t out[kSimStats]);
}

// QAT operand size classes (bits) of cpaCyLnModExp; every operand is padded to the op's class.
static const unsigned kQatSizeClassesBits[] = {512, 1024, 1536, 2048, 2560, 3072, 3584, 4096, 8192};
static const unsigned kQatMaxBytes = 8192 / 8;

static const unsigned kQatSizeClasses =
    sizeof(kQatSizeClassesBits) / sizeof(kQatSizeClassesBits[0]);

// The class (in bytes) for an op whose widest operand has `bytes` significant bytes; 0 if too wide.
inline unsigned qat_class_bytes(unsigned bytes) {
    for (unsigned bits : kQatSizeClassesBits)
        if (bytes * 8 <= bits) return bits / 8;
    return 0;
}

// The index of a class (given in bytes, as qat_class_bytes returns it) in kQatSizeClassesBits.
inline unsigned qat_class_index(unsigned class_bytes) {
    for (unsigned k = 0; k < kQatSizeClasses; ++k)
        if (kQatSizeClassesBits[k] == class_bytes * 8) return k;
    return kQatSizeClasses - 1;
}
