"""tools.gpu (the compile-time proxies of the CUDA kernels, ``python -m tools.gpu.proxies``).

The parsers, the loop finder, the IMAD classes, the occupancy model, the MontMult accounting and the
threshold check run on small captured samples of ptxas / cuobjdump output (no CUDA tools needed).
Two ``slow`` tests share one compile of the real kernels for sm_90 (a module fixture; about 2
minutes on two cores) and check the figures of today's kernels; they skip, saying why, where nvcc
(or cuobjdump / nvdisasm) is not installed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tools.gpu import controlflow, errors, montmult, occupancy, proxies, ptxas, report, sass, \
    toolchain

pytestmark = pytest.mark.cuda_toolchain

# ---------------------------------------------------------------------------- captured samples
# nvcc 13.0.88 -Xptxas -v for sm_90: two real blocks of gpu_runtime.cu (k_mul<32>, k_relayout), and
# a made-up kernel with a called function, spills, smem, cmem and a warning, then a stray line
PTXAS_LOG = """\
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function '_ZN47_GLOBAL__N__1ba35f42_14_gpu_runtime_cu_5474d9645k_mulILi32EEEvxPKmiPmN9unifl_gpu3LayES2_S5_S2_S5_i' for 'sm_90'
ptxas info    : Function properties for _ZN47_GLOBAL__N__1ba35f42_14_gpu_runtime_cu_5474d9645k_mulILi32EEEvxPKmiPmN9unifl_gpu3LayES2_S5_S2_S5_i
    784 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 40 registers, used 1 barriers, 784 bytes cumulative stack size
ptxas info    : Compile time = 183.544 ms
ptxas info    : Compiling entry function '_ZN47_GLOBAL__N__1ba35f42_14_gpu_runtime_cu_5474d96410k_relayoutExiPmN9unifl_gpu3LayEPKmS2_' for 'sm_90'
ptxas info    : Function properties for _ZN47_GLOBAL__N__1ba35f42_14_gpu_runtime_cu_5474d96410k_relayoutExiPmN9unifl_gpu3LayEPKmS2_
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 32 registers, used 0 barriers
ptxas info    : Compile time = 9.586 ms
ptxas info    : Compiling entry function '_Z8k_mul_g2Pm' for 'sm_90'
ptxas info    : Function properties for _Z6helperv
    16 bytes stack frame, 8 bytes spill stores, 4 bytes spill loads
ptxas info    : Function properties for _Z8k_mul_g2Pm
    2464 bytes stack frame, 24 bytes spill stores, 32 bytes spill loads
ptxas info    : Used 255 registers, used 1 barriers, 4096 bytes smem, 380 bytes cmem[0], 8 bytes cmem[2], 2480 bytes cumulative stack size
ptxas warning : Stack size for entry function '_Z8k_mul_g2Pm' cannot be statically determined
some line nobody expected
"""

# cuobjdump -sass: the header, a function with an encoding half-line, a loop nest (inner
# 0x40-0xa0 in outer 0x30-0xf0), IMADs of every kind, and the trailing branch-to-self trap
SASS = """
\tcode for sm_90
\t.target\tsm_90

\t\tFunction : _Z4demoPm
\t.headerflags\t@"EF_CUDA_SM90 EF_CUDA_VIRTUAL_SM(EF_CUDA_SM90)"
        /*0000*/                   LDC R1, c[0x0][0x28] ;                     /* 0x00000a00ff017b82 */
                                                                              /* 0x000e220000000800 */
        /*0010*/                   IMAD.MOV.U32 R7, RZ, RZ, R11 ;             /* 0x000000ffff077224 */
        /*0020*/                   IMAD.WIDE R2, R7, 0x8, R4 ;                /* 0x0000000807027825 */
        /*0030*/                   LDL.64 R4, [R1] ;                          /* 0x0000000001047983 */
        /*0040*/                   IMAD.WIDE.U32 R12, R19, R4, RZ ;           /* 0x00000004130c7225 */
        /*0050*/                   IMAD R15, R5, R18.reuse, RZ ;              /* 0x00000012050f7224 */
        /*0060*/                   IMAD.WIDE.U32.X R4, R19, R5, R8, P4 ;      /* 0x0000000513047225 */
        /*0070*/                   IMAD.X R22, R9, 0x1, R15, P1 ;             /* 0x0000000109167824 */
        /*0080*/                   IMAD.HI.U32 R6, R4, R5, RZ ;               /* 0x0000000504067227 */
        /*0090*/                   STL.64 [R1], R4 ;                          /* 0x0000000401007387 */
        /*00a0*/               @P0 BRA 0x40 ;                                 /* 0xfffffffc00e48947 */
        /*00b0*/                   IMAD.IADD R7, R6, 0x1, R7 ;                /* 0x0000000106077824 */
        /*00c0*/                   IMAD.SHL.U32 R8, R7, 0x4, RZ ;             /* 0x0000000407087824 */
        /*00d0*/                   SHFL.BFLY PT, R9, R8, 0x1, 0x1f ;          /* 0x0c201f0008097f89 */
        /*00e0*/                   VOTE.ANY R0, PT, P0 ;                      /* 0x0000000000007806 */
        /*00f0*/              @!P1 BRA 0x30 ;                                 /* 0xfffffffc00e48947 */
        /*0100*/                   STG.E.64 desc[UR8][R2.64], R4 ;            /* 0x0000000402007986 */
        /*0110*/                   EXIT ;                                     /* 0x000000000000794d */
        /*0120*/                   BRA 0x120;                                 /* 0xfffffffc00fc7947 */
\t\t..........
"""

# a loop whose warp shuffle has a divergence fallback (BRA.DIV) placed after the EXIT, which jumps
# back into the loop body below its header (as ptxas lays out the cooperative kernels)
SASS_DIV = """
\t\tFunction : _Z3divv
        /*0000*/                   S2R R0, SR_TID.X ;
        /*0010*/                   IMAD.WIDE.U32 R2, R0, R0, RZ ;
        /*0020*/              @!P5 BRA.DIV UR4, 0x90 ;
        /*0030*/                   SHFL.IDX PT, R4, R2, RZ, 0x1f ;
        /*0040*/                   IADD3 R0, R0, 0x1, RZ ;
        /*0050*/               @P0 BRA 0x10 ;
        /*0060*/                   EXIT ;
        /*0070*/                   BRA 0x70;
        /*0080*/                   NOP;
        /*0090*/                   WARPSYNC.ALL ;
        /*00a0*/                   SHFL.IDX PT, R4, R2, RZ, 0x1f ;
        /*00b0*/                   BRA 0x40 ;
"""

RES_USAGE = """
Resource usage:
 Common:
  GLOBAL:0
 Function _Z4demoPm:
  REG:40 STACK:784 SHARED:1024 LOCAL:0 CONSTANT[0]:628 TEXTURE:0 SURFACE:0 SAMPLER:0
"""


# ------------------------------------------------------------------------------------ parsers
def test_ptxas_log_is_parsed_per_function() -> None:
    log = ptxas.parse_ptxas(PTXAS_LOG)
    mul = log.functions["_ZN47_GLOBAL__N__1ba35f42_14_gpu_runtime_cu_5474d9645k_mulILi32EEEvxPKmiPm"
                        "N9unifl_gpu3LayES2_S5_S2_S5_i"]
    assert (mul.entry, mul.registers, mul.barriers, mul.stack_frame, mul.spill_stores,
            mul.spill_loads, mul.cumulative_stack, mul.smem, mul.compile_ms) == (
        True, 40, 1, 784, 0, 0, 784, None, 183.544)
    relayout = [f for n, f in log.functions.items() if "k_relayout" in n][0]
    assert (relayout.registers, relayout.stack_frame, relayout.cumulative_stack) == (32, 0, None)
    g = log.functions["_Z8k_mul_g2Pm"]
    assert (g.registers, g.stack_frame, g.spill_stores, g.spill_loads, g.smem, g.cmem) == (
        255, 2464, 24, 32, 4096, {0: 380, 2: 8})
    assert g.warnings and "cannot be statically determined" in g.warnings[0]
    helper = log.functions["_Z6helperv"]   # a called function: its own frame, no registers line
    assert (helper.entry, helper.stack_frame, helper.spill_stores, helper.registers) == (
        False, 16, 8, None)
    assert log.gmem == 0
    assert log.unparsed == ["some line nobody expected"]   # kept and reported, not dropped


@pytest.mark.parametrize("text, match", [
    ("ptxas info    : Used 40 registers, used 1 barriers\n", "outside any entry function"),
    ("ptxas info    : Compiling entry function '_Z1kv' for 'sm_90'\n"
     "ptxas info    : Used 40 registers, 12 bytes of something new\n", "unknown part"),
    ("    16 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n", "no 'Function"),
])
def test_ptxas_log_structure_errors_are_loud(text: str, match: str) -> None:
    with pytest.raises(errors.ParseError, match=match):
        ptxas.parse_ptxas(text)


def test_res_usage_is_parsed() -> None:
    usage, unparsed = ptxas.parse_res_usage(RES_USAGE + "garbage\n")
    assert usage == {"_Z4demoPm": {"REG": 40, "STACK": 784, "SHARED": 1024, "LOCAL": 0,
                                   "CONSTANT[0]": 628, "TEXTURE": 0, "SURFACE": 0, "SAMPLER": 0}}
    assert unparsed == ["garbage"]


def test_sass_is_parsed_into_instructions() -> None:
    funcs, unparsed = sass.parse_sass(SASS)
    assert unparsed == []
    ins = funcs["_Z4demoPm"].instrs
    assert len(ins) == 19 and [i.addr for i in ins] == list(range(0, 0x130, 0x10))
    bra = ins[10]
    assert (bra.addr, bra.pred, bra.opcode, bra.target) == (0xA0, "@P0", "BRA", 0x40)
    wide_x = ins[6]
    assert (wide_x.opcode, wide_x.base, wide_x.operands) == (
        "IMAD.WIDE.U32.X", "IMAD", ("R4", "R19", "R5", "R8", "P4"))
    assert ins[16].operands == ("desc[UR8][R2.64]", "R4")
    _, unparsed = sass.parse_sass(SASS.replace("EXIT ;", "EXIT"))   # no ';': not an instruction
    assert unparsed and "EXIT" in unparsed[0]
    with pytest.raises(errors.ParseError, match="outside any function"):
        sass.parse_sass("        /*0000*/                   EXIT ;\n")


@pytest.mark.parametrize("text, kind", [
    ("IMAD.MOV.U32 R7, RZ, RZ, R11", "mov"),
    ("IMAD.SHL.U32 R8, R7, 0x4, RZ", "shl"),
    ("IMAD.IADD R7, R6, 0x1, R7", "iadd"),
    ("IMAD.X R22, R9, 0x1, R15, P1", "nonmul"),      # add with carry
    ("IMAD.X R9, RZ, RZ, RZ, P0", "nonmul"),         # carry materialised
    ("IMAD.U32 R0, RZ, RZ, 0x8", "nonmul"),
    ("IMAD.WIDE.U32 R12, P0, R18, R5, R12", "wide"),
    ("IMAD.WIDE.U32.X R4, R19, R5, R8, P4", "wide"),
    ("IMAD.WIDE R2, R7, 0x8, R4", "wide"),
    ("IMAD.HI.U32 R6, R4, R5, RZ", "hi"),
    ("IMAD.X R13, R24, R22, R1, P5", "x"),
    ("IMAD R15, R5, R18.reuse, RZ", "lo"),
    ("IMAD R6, R13, UR12, RZ", "lo"),
    ("IADD3 R6, P1, R12, R10, RZ", None),
    ("UIMAD UR4, UR5, UR6, URZ", None),
])
def test_imad_kinds(text: str, kind: str | None) -> None:
    assert sass.imad_kind(sass.parse_instr(0, text)) == kind


def test_loops_and_classes_of_the_sample() -> None:
    funcs, _ = sass.parse_sass(SASS)
    ins = funcs["_Z4demoPm"].instrs
    whole = sass.count_classes(ins)
    assert (whole["total"], whole["imad"], whole["imad_mul"], whole["imad_slots"],
            whole["imad_mul_imm"], whole["imad_mov"], whole["imad_shl"], whole["imad_iadd"],
            whole["imad_nonmul"], whole["SHFL"], whole["VOTE"], whole["LDL"], whole["STL"],
            whole["STG"]) == (19, 9, 5, 8, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1)
    loops = controlflow.find_loops(ins)
    assert [lp.label for lp in loops] == ["0x0030-0x00f0", "0x0040-0x00a0"]   # no self-branch trap
    outer, inner = loops
    assert (outer.depth, outer.innermost, inner.depth, inner.innermost) == (0, False, 1, True)
    assert (inner.counts["total"], inner.counts["imad_mul"], inner.counts["imad_slots"],
            inner.counts["imad_wide"], inner.counts["imad_wide_x"], inner.counts["imad_hi"],
            inner.counts["imad_lo"], inner.counts["imad_nonmul"], inner.counts["STL"]) == (
        7, 4, 6, 2, 1, 1, 1, 1, 1)
    assert outer.counts["total"] == 13 and outer.own["total"] == 6 and outer.own["imad_mul"] == 0
    assert (outer.own["SHFL"], outer.own["VOTE"], outer.own["LDL"]) == (1, 1, 1)
    assert controlflow.multiply_loops(loops) == [inner]
    assert outer.ranges == [(0x30, 0xF0)] and inner.ranges == [(0x40, 0xA0)]
    assert outer.own_ranges == [(0x30, 0x30), (0xB0, 0xF0)]


def test_loops_come_from_the_control_flow_not_from_address_order() -> None:
    """The fallback block after EXIT branches back to 0x40: a backward branch, but no loop of its
    own (0x40 does not dominate it); with ``follow_div`` it joins the loop it rejoins."""
    funcs, unparsed = sass.parse_sass(SASS_DIV)
    assert unparsed == []
    ins = funcs["_Z3divv"].instrs
    blocks, succs = controlflow.control_flow(ins)
    assert [(ins[a].addr, ins[b - 1].addr) for a, b in blocks] == [
        (0x00, 0x00), (0x10, 0x20), (0x30, 0x30), (0x40, 0x50), (0x60, 0x60), (0x70, 0x70),
        (0x80, 0x80), (0x90, 0xB0)]
    assert succs == [[1], [2], [3], [1, 4], [], [5], [7], [3]]   # BRA.DIV not followed
    (loop,) = controlflow.find_loops(ins)
    assert (loop.header, loop.label, loop.blocks, loop.ranges) == (
        0x10, "0x0010-0x0050", [(0x10, 0x20), (0x30, 0x30), (0x40, 0x50)], [(0x10, 0x50)])
    assert (loop.counts["total"], loop.counts["SHFL"], loop.counts["imad_slots"]) == (5, 1, 2)
    # a subroutine after the EXIT, reached only by CALL.REL, with a loop of its own
    sub = SASS_DIV.replace("S2R R0, SR_TID.X ;", "CALL.REL.NOINC 0xc0 ;") + (
        "        /*00c0*/                   IMAD R5, R5, R5, RZ ;\n"
        "        /*00d0*/               @P1 BRA 0xc0 ;\n"
        "        /*00e0*/                   RET.REL.NODEC R2 0x0 ;\n")
    funcs, unparsed = sass.parse_sass(sub)
    assert unparsed == [] and funcs["_Z3divv"].instrs[0].target == 0xC0
    assert [lp.label for lp in controlflow.find_loops(funcs["_Z3divv"].instrs)] == [
        "0x0010-0x0050", "0x00c0-0x00d0"]
    (loop,) = controlflow.find_loops(ins, follow_div=True)
    assert loop.label == "0x0010-0x00b0" and loop.counts["SHFL"] == 2
    assert loop.ranges == [(0x10, 0x50), (0x90, 0xB0)]
    assert loop.counts["total"] == 8


def test_converged_code_leaves_out_divergence_fallbacks_and_padding() -> None:
    funcs, _ = sass.parse_sass(SASS_DIV)
    ins = funcs["_Z3divv"].instrs
    hot = controlflow.converged_code(ins)
    assert [i.addr for i in hot] == [0x00, 0x10, 0x20, 0x30, 0x40, 0x50, 0x60]


def test_product_shares_of_function_converged_code_and_loop() -> None:
    funcs, _ = sass.parse_sass(SASS_DIV)
    ins = funcs["_Z3divv"].instrs
    k = report.KernelProxies("_Z3divv", "div()", "div", instrs=ins,
                             loops=controlflow.find_loops(ins), sass=sass.count_classes(ins))
    sh = montmult.product_shares(k)
    assert sh["function"] == {"instructions": 12, "products": 1, "address_products": 0,
                              "share": 1 / 12}
    assert sh["converged"]["instructions"] == 7 and sh["converged"]["share"] == 1 / 7
    assert sh["loop"] == {"instructions": 5, "products": 1, "address_products": 0, "share": 0.2,
                          "label": "0x0010-0x0050"}


# ------------------------------------------------------------------------------------ names
@pytest.mark.parametrize("demangled, short", [
    ("void (anonymous namespace)::k_mul<32>(long long, unsigned long const*, int, unsigned long*, "
     "unifl_gpu::Lay, unsigned long const*, unifl_gpu::Lay, unsigned long const*, unifl_gpu::Lay, "
     "int)", "k_mul<32>"),
    ("(anonymous namespace)::k_relayout(long long, int, unsigned long*, unifl_gpu::Lay, unsigned "
     "long const*, unifl_gpu::Lay)", "k_relayout"),
    ("void unifl_gpu::k_mul_g<32, 8>(unifl_gpu::Lay, std::pair<int, int>)", "k_mul_g<32, 8>"),
    ("demo(unsigned long*)", "demo"),
])
def test_short_names(demangled: str, short: str) -> None:
    assert toolchain.short_name(demangled) == short


@pytest.mark.parametrize("name, threads", [
    ("k_mul<32>", 128), ("k_mul<48>", 128), ("k_mul<64>", 64), ("k_exp<128>", 64),
    ("k_encrypt_owner<16>", 128), ("k_mul_g<64, 16>", 128), ("k_exp_group<128>", 128),
    ("k_relayout", 256), ("k_new_thing", occupancy.DEFAULT_BLOCK_SIZE),
])
def test_block_size_table(name: str, threads: int) -> None:
    assert occupancy.block_size_for(name)[0] == threads


# ------------------------------------------------------------------------------------ occupancy
@pytest.mark.parametrize("regs, block, dyn, warps, limiter", [
    (48, 64, 0, 40, "registers"),     # 1536 regs/warp: 10 warps per sub-partition
    (72, 64, 0, 28, "registers"),     # 2304 regs/warp: 7 per sub-partition
    (40, 128, 0, 48, "registers"),    # 1280: 12 per sub-partition, 3 blocks of 4 warps each
    (32, 256, 0, 64, "registers+threads+warps"),
    (16, 32, 0, 32, "blocks"),        # 32 blocks of 1 warp
    (255, 128, 0, 8, "registers"),    # 8160 -> 8192 regs/warp: 2 per sub-partition
    (32, 128, 100 * 1024, 8, "shared"),   # 101 KiB per block: 2 blocks in 228 KiB
    (32, 128, 227 * 1024, 4, "shared"),   # the largest block that fits
    (32, 128, 227 * 1024 + 1, 0, "shared"),
    (255, 1024, 0, 0, "registers"),   # 255 x 1024 > 65,536 registers in a block
])
def test_occupancy(regs: int, block: int, dyn: int, warps: int, limiter: str) -> None:
    o = occupancy.occupancy(regs, block, dyn_smem=dyn)
    assert (o.active_warps, o.limiter) == (warps, limiter)
    assert o.occupancy == warps / 64
    if warps == 0:
        assert any("launch fails" in n for n in o.notes)
    if dyn > 48 * 1024 and warps:
        assert any("opt-in" in n for n in o.notes)


def test_dyn_smem_arguments() -> None:
    assert proxies.parse_dyn_smem([]) == (0, {})
    assert proxies.parse_dyn_smem(["512", "_g<=66048", "k_exp<(32|64)>=1024"]) == (
        512, {"_g<": 66048, "k_exp<(32|64)>": 1024})
    for bad in (["x"], ["_g<=-1"], ["_g<="]):
        with pytest.raises(errors.ProxyError):
            proxies.parse_dyn_smem(bad)


def test_occupancy_local_memory_and_bad_inputs() -> None:
    o = occupancy.occupancy(48, 64, stack_frame=19472)
    assert o.active_blocks == 20 and o.local_kib_per_sm == 19472 * 20 * 64 / 1024
    for args in ((256, 128), (32, 0), (32, 2048)):
        with pytest.raises(errors.OccupancyError):
            occupancy.occupancy(*args)


# ------------------------------------------------------------------------------------ MontMult
def test_montmult_model() -> None:
    assert montmult.montmult_model(2048) == {"bits": 2048, "n": 64, "word_products": 8192,
                                       "imad_slots": 16384}
    assert montmult.montmult_model(1024)["imad_slots"] == 4 * 32 * 32
    with pytest.raises(ValueError):
        montmult.montmult_model(2047)


def _sample_kernel() -> Any:
    funcs, _ = sass.parse_sass(SASS)
    ins = funcs["_Z4demoPm"].instrs
    return report.KernelProxies("_Z4demoPm", "demo(unsigned long*)", "demo", instrs=ins,
                            loops=controlflow.find_loops(ins), sass=sass.count_classes(ins))


def test_imad_slots_per_montmult_is_slots_times_trips_times_lanes() -> None:
    k = _sample_kernel()
    (inner,) = montmult.select_loops(k, ["#0"])
    assert montmult.select_loops(k, ["0x40"]) == [inner] == montmult.select_loops(k, ["0x40-0xa0"])
    outer = montmult.select_loops(k, ["0x30"])[0]
    res = montmult.imad_slots_per_montmult(
        k, 64, [montmult.loop_span(inner, 10), montmult.loop_span(outer, 2, own=True),
                montmult.Span(((0x10, 0x20),), 1, "setup")], lanes=3)
    assert [r["slots_per_trip"] for r in res["spans"]] == [6, 0, 2]
    assert res["imad_slots_per_montmult"] == (6 * 10 + 0 * 2 + 2 * 1) * 3
    assert res["model_4n2"] == 16 and res["ratio"] == 186 / 16
    assert [r["span"] for r in res["spans"]] == [
        "0x0040-0x00a0", "0x0030-0x0030,0x00b0-0x00f0", "0x0010-0x0020"]
    assert montmult.parse_span(k, "#0=10") == montmult.loop_span(inner, 10)
    assert montmult.parse_span(k, "0x30=2:own") == montmult.loop_span(outer, 2, own=True)
    assert montmult.parse_span(k, "0x10-0x20=1") == montmult.Span(((0x10, 0x20),), 1.0, "0x10-0x20")
    for bad in ("#5=1", "#x=1", "0x50=1", "#0", "#0=x", "#0=1:all", "0x10-0x20=1:own", "zz-0x1=1"):
        with pytest.raises(errors.ProxyError):
            montmult.parse_span(k, bad)
    with pytest.raises(errors.ProxyError, match="no instructions"):
        montmult.imad_slots_per_montmult(k, 64, [montmult.Span(((0x1000, 0x2000),), 1)])


# ------------------------------------------------------------------------------------ the check
def _report(*kernels: Any) -> Any:
    return report.Report(list(kernels), "90", "x.cubin", None, [], None, occupancy.H100)


def _kernel(name: str, stack: int | None, st: int | None, ld: int | None) -> Any:
    return report.KernelProxies(f"_Z{name}", f"void {name}(int)", name, registers=40,
                            stack_frame=stack, spill_stores=st, spill_loads=ld)


def test_check_fails_on_spills_big_frames_and_no_match() -> None:
    good = _kernel("k_mul_g<32, 8>", 512, 0, 0)
    assert report.check(_report(good, _kernel("k_exp<128>", 19472, 0, 0))) == []
    fails = report.check(_report(_kernel("k_exp<128>", 19472, 0, 0)))
    assert len(fails) == 1 and "no kernel matched" in fails[0]
    fails = report.check(_report(good, _kernel("k_exp_g<128, 32>", 4096, 8, 0),
                             _kernel("k_mul_g<64, 8>", None, None, None)))
    assert any("k_exp_g<128, 32>: spills 8 B" in f for f in fails)
    assert any("k_exp_g<128, 32>: stack frame 4096 B > 2048 B" in f for f in fails)
    assert any("k_mul_g<64, 8>: spills unknown" in f for f in fails)
    assert report.check(_report(good), max_stack=256) == ["k_mul_g<32, 8>: stack frame 512 B > 256 B"]


# ------------------------------------------------------------------------------------ errors
def test_missing_nvcc_says_how_to_install(monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    build = toolchain.load_build_module()
    monkeypatch.setattr(build, "_find_nvcc", lambda: (None, "nvcc not found at build time"))
    monkeypatch.setattr(toolchain, "_COMPILED", {})
    with pytest.raises(errors.ToolMissing, match="pip install -r requirements-cuda.txt"):
        toolchain.find_nvcc()
    assert proxies.main([]) == 2
    assert "pip install -r requirements-cuda.txt" in capsys.readouterr().err
    monkeypatch.setenv("PATH", "")
    monkeypatch.delenv("CUDA_HOME", raising=False)
    with pytest.raises(errors.ToolMissing, match="cuobjdump not found.*requirements-cuda.txt"):
        toolchain.find_tool("cuobjdump")


def test_missing_cubin_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert proxies.main(["--cubin", str(tmp_path / "none.cubin")]) == 2
    assert "no cubin at" in capsys.readouterr().err


# ------------------------------------------------------------------ the real kernels (nvcc, slow)
def _need_tools() -> None:
    ok, why = toolchain.nvcc_available()
    if not ok:
        pytest.skip(f"nvcc is not installed ({why})")
    for tool in ("cuobjdump", "nvdisasm"):
        try:
            toolchain.find_tool(tool)
        except errors.ToolMissing as exc:
            pytest.skip(str(exc))


@pytest.fixture(scope="module")
def real(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Any]:
    """The kernels (src/kernels.cu) compiled for sm_90 once for this module, and their report."""
    _need_tools()
    compiled = toolchain.compile_cubin(tmp_path_factory.mktemp("gpu_proxies"))
    return compiled, report.build_report(compiled)


@pytest.mark.slow
def test_real_kernels_have_every_figure(real: tuple[Any, Any]) -> None:
    compiled, rep = real
    assert compiled.seconds and compiled.seconds > 0
    assert rep.warnings == []   # every line of ptxas, res-usage and SASS understood
    names = {k.name for k in rep.kernels}
    assert {"k_mul<32>", "k_exp<128>", "k_relayout", "k_exp_g<32, true>"} <= names
    for k in rep.kernels:
        assert isinstance(k.registers, int) and 0 < k.registers <= 255, k.name
        assert k.stack_frame is not None and k.spills is not None, k.name
        assert k.occupancy is not None and k.occupancy.active_warps > 0, k.name
        assert k.sass is not None and k.sass["total"] > 0, k.name
    # today's known state (docs/backends/gpu.md): the thread-per-instance exponentiation keeps its 16-entry
    # window table in a local frame of 2.4-24 KiB
    exp128 = rep.kernel(r"^k_exp<128>$")
    assert exp128.stack_frame > 2048
    assert report.check(rep, r"^k_exp<128>$") == [
        f"k_exp<128>: stack frame {exp128.stack_frame} B > 2048 B"]
    assert "no kernel matched" in report.check(rep, r"^no_such_kernel$")[0]
    assert report.check(rep) == []   # the cooperative kernels: no spills, frames <= 2 KiB
    json.dumps(report.to_json(rep), default=str)


@pytest.mark.slow
def test_k_mul_32_montmult_accounting(real: tuple[Any, Any]) -> None:
    """The CIOS loops of the first inlined mont_mul of k_mul<32>: two innermost multiply loops in
    one outer loop over i; each mac ends its 64x64 high half with one IMAD.WIDE*.X, which gives the
    unroll factor u; trips per MontMult are (L // u)·L and ((L-1) // u)·L (L = 32)."""
    _, rep = real
    k = rep.kernel(r"^k_mul<32>$")
    outers = [lp for lp in k.loops if not lp.innermost
              and len([m for m in controlflow.multiply_loops(k.loops) if lp.contains(m)]) == 2]
    assert outers, "no CIOS loop nest (an outer loop with two inner multiply loops) in k_mul<32>"
    first, second = [m for m in controlflow.multiply_loops(k.loops) if outers[0].contains(m)]
    L = 32
    spans = []
    for lp, words in ((first, L), (second, L - 1)):
        u = lp.counts["imad_wide_x"]
        assert u >= 1 and lp.counts["imad_slots"] % u == 0
        per_mac = lp.counts["imad_slots"] // u
        assert 8 <= per_mac <= 16   # at least the model's 4 products of 32x32 -> 64 per mac
        spans.append(montmult.loop_span(lp, (words // u) * L))
    res = montmult.imad_slots_per_montmult(k, 2048, spans)
    assert res["model_4n2"] == 16384
    assert 1.0 <= res["ratio"] <= 2.0, res


@pytest.mark.slow
def test_k_mul_g_32_products_share(real: tuple[Any, Any]) -> None:
    """The cooperative 2048-bit MontMult: its main loop (8 trips of 8 words per lane) is 16 products
    per word on carry chains (IMAD.WIDE.U32 with carry in and out), the 4n² IMAD slots of the
    model plus q; the products are at least 30 % of what one MontMult issues and of a loop trip."""
    _, rep = real
    k = rep.kernel(r"^k_mul_g<32>$")
    main, rest = controlflow.multiply_loops(k.loops)[:2]
    assert main.counts["imad_wide"] == 16 * 8 and rest.counts["imad_wide"] == 16 * 2
    spans = [montmult.loop_span(main, 8), montmult.loop_span(rest, 0)]
    slots = montmult.imad_slots_per_montmult(k, 2048, spans, lanes=8)
    assert 1.0 <= slots["ratio"] < 1.05, slots
    sh = montmult.product_shares(k, spans=spans)
    assert sh["executed"]["share"] >= 0.30 and sh["loop"]["share"] >= 0.30, sh
