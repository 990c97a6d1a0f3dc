"""Compile-time proxies of the gpu backend's CUDA kernels, for machines without a GPU (CI, and
whoever changes a kernel): what ptxas and the SASS say about registers, spills, stack, occupancy,
loops and the multiply work of a MontMult.  Run as ``python -m tools.gpu.proxies`` (``make
gpu-proxies``).  One module per concept:

* :mod:`.toolchain`   nvcc and the tools beside it; the sm_90 compile
* :mod:`.ptxas`       the compiler's per-kernel report (``-Xptxas -v``, ``cuobjdump -res-usage``)
* :mod:`.sass`        SASS parsed into instructions, and the instruction classes
* :mod:`.controlflow` basic blocks, natural loops, the code a converged warp runs
* :mod:`.occupancy`   theoretical occupancy of an H100 SM, block sizes of the launches
* :mod:`.report`      the per-kernel figures, the CI check, tables and JSON
* :mod:`.montmult`    the 4n² MontMult model and the product-instruction share
* :mod:`.errors`      what they raise
* :mod:`.proxies`     the command line
"""
