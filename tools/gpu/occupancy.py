"""Theoretical occupancy of one H100 SM from a kernel's registers, block size and shared memory (the
CUDA occupancy calculator's rules), and the block sizes the gpu runtime launches each kernel
with.  What the hardware *can* keep resident, not what a launch achieves."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from .errors import OccupancyError, ProxyError


@dataclass(frozen=True)
class SmLimits:
    """Per-SM limits of a GPU for the occupancy model (defaults: H100, compute capability 9.0;
    the values of the CUDA occupancy calculator, ``cuda_occupancy.h``)."""

    name: str = "H100 (sm_90)"
    regs_per_sm: int = 65536
    reg_alloc_unit: int = 256            #: registers, allocated per warp in multiples of this
    max_regs_per_thread: int = 255
    regs_per_block: int = 65536
    sub_partitions: int = 4              #: the register file is split over 4 SM sub-partitions
    max_threads_per_sm: int = 2048
    max_threads_per_block: int = 1024
    max_blocks_per_sm: int = 32
    max_warps_per_sm: int = 64
    warp_size: int = 32
    smem_per_sm: int = 228 * 1024        #: with the largest carveout (the driver may pick less)
    smem_per_block: int = 227 * 1024     #: opt-in maximum (static + dynamic); 48 KiB without it
    smem_per_block_default: int = 48 * 1024
    smem_reserved_per_block: int = 1024  #: reserved by the system in every block
    smem_alloc_unit: int = 128


H100 = SmLimits()


def _round_up(x: int, unit: int) -> int:
    return -(-x // unit) * unit


@dataclass
class Occupancy:
    """Theoretical occupancy of one SM: how many blocks/warps *can* be resident at once.

    ``blocks_by``: the block limit each resource allows (registers, shared memory, threads, warps,
    the 32-block cap); the smallest wins, and ``limiter`` names every resource at that limit
    (``registers+threads+warps`` when they tie).  ``occupancy`` = active warps / 64.
    Local memory (the stack frame) does not limit occupancy -- it lives in device memory -- but
    ``local_kib_per_sm`` (frame x resident threads) is the working set those threads keep in the
    SM's L1 (256 KiB with shared memory) and the L2 (50 MiB for 132 SMs).
    """

    block_size: int
    dyn_smem: int
    warps_per_block: int
    regs_per_warp: int
    smem_per_block: int
    blocks_by: dict[str, int]
    active_blocks: int
    active_warps: int
    occupancy: float
    limiter: str
    local_kib_per_sm: float | None = None
    notes: list[str] = field(default_factory=list)


def occupancy(registers: int, block_size: int, static_smem: int = 0, dyn_smem: int = 0,
              stack_frame: int | None = None, limits: SmLimits = H100) -> Occupancy:
    """Resident blocks and warps per SM for a kernel using ``registers`` per thread, launched with
    ``block_size`` threads and ``dyn_smem`` bytes of dynamic shared memory per block, as the CUDA
    occupancy calculator computes it (no partitioned global caching):

    * registers: regs x 32 rounded up to 256 per warp; each of the 4 sub-partitions holds
      floor(16384 / that) warps; blocks = 4 x that / warps per block (0 if a block needs more than
      65,536 registers: the launch fails);
    * shared memory: static + dynamic + 1 KiB reserved, rounded up to 128 B, into 228 KiB (the
      largest carveout); 0 blocks past 227 KiB + 1 KiB per block;
    * threads (2048), warps (64) and blocks (32) per SM.
    """
    if not 1 <= block_size <= limits.max_threads_per_block:
        raise OccupancyError(f"block size {block_size} outside 1..{limits.max_threads_per_block}")
    if not 0 <= registers <= limits.max_regs_per_thread:
        raise OccupancyError(f"{registers} registers per thread: the limit is "
                             f"{limits.max_regs_per_thread}")
    if static_smem < 0 or dyn_smem < 0:
        raise OccupancyError("shared memory sizes must be >= 0")
    notes: list[str] = []
    warps = -(-block_size // limits.warp_size)
    per_warp = _round_up(registers * limits.warp_size, limits.reg_alloc_unit)
    assumed = per_warp * _round_up(warps, limits.sub_partitions)
    if per_warp == 0:
        by_regs = limits.max_blocks_per_sm
    elif assumed > limits.regs_per_block or per_warp * warps > limits.regs_per_block:
        by_regs = 0
        notes.append("too many registers for one block: the launch fails")
    else:
        per_sub = (limits.regs_per_sm // limits.sub_partitions) // per_warp
        by_regs = per_sub * limits.sub_partitions // warps
    smem = _round_up(static_smem + dyn_smem + limits.smem_reserved_per_block,
                     limits.smem_alloc_unit)
    if smem > limits.smem_per_block + limits.smem_reserved_per_block:
        by_smem = 0
        notes.append(f"{static_smem + dyn_smem} B of shared memory per block: over the "
                     f"{limits.smem_per_block // 1024} KiB limit, the launch fails")
    else:
        by_smem = limits.smem_per_sm // smem
        if static_smem + dyn_smem > limits.smem_per_block_default:
            notes.append("over 48 KiB of shared memory per block: needs the "
                         "cudaFuncAttributeMaxDynamicSharedMemorySize opt-in")
    blocks_by = {
        "registers": by_regs,
        "shared": by_smem,
        "threads": limits.max_threads_per_sm // block_size,
        "warps": limits.max_warps_per_sm // warps,
        "blocks": limits.max_blocks_per_sm,
    }
    active = min(blocks_by.values())
    limiter = "+".join(k for k, v in blocks_by.items() if v == active)
    active_warps = active * warps
    local = None if stack_frame is None else stack_frame * active * block_size / 1024
    return Occupancy(block_size, dyn_smem, warps, per_warp, smem, blocks_by, active, active_warps,
                     active_warps / limits.max_warps_per_sm, limiter, local, notes)


#: threads per block the runtime launches each kernel with: (regex on the short demangled name,
#: threads or "class").  "class" is kernels.cu's ``block_size(LM)``: 64 threads for size
#: classes of 64 limbs and more, else 128 (LM: the kernel's template argument).  First match wins;
#: edit this table when the runtime's launches change.
BLOCK_SIZE_TABLE: list[tuple[str, int | str]] = [
    (r"_g<|group", 128),                     # cooperative (group) kernels
    (r"^k_relayout$", 256),
    (r"^k_(mul|exp|powers|prod_round|encrypt|encrypt_owner|decrypt)<\d+>$", "class"),
]
DEFAULT_BLOCK_SIZE = 128


def runtime_block_size(lmax: int) -> int:
    """kernels.cu's ``block_size(lmax)``."""
    return 64 if lmax >= 64 else 128


def block_size_for(name: str, table: Sequence[tuple[str, int | str]] = BLOCK_SIZE_TABLE
                   ) -> tuple[int, str]:
    """(threads per block, where it came from) for a kernel's short name."""
    for pattern, rule in table:
        if re.search(pattern, name):
            if rule == "class":
                m = re.search(r"<(\d+)", name)
                if m is None:
                    raise ProxyError(f"{name}: block size rule 'class' needs a <LM> template "
                                     f"argument")
                return runtime_block_size(int(m.group(1))), f"block_size({m.group(1)})"
            return int(rule), f"table {pattern!r}"
    return DEFAULT_BLOCK_SIZE, "default (no table entry)"
