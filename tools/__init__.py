"""Developer tools that gate CI or analyse builds: not part of the installed SDK.

One subpackage per subject (``tools.gpu``: compile-time proxies of the CUDA kernels; ``tools.fpga``:
synthesis figures and the card estimate built on them; ``tools.scale_model``: the Ray scale model).
Each runs as ``python -m tools.<subject>.<module>``.  Tools may import ``unifl``; nothing in
``unifl`` imports a tool (``make lint`` checks both, and the types).
"""
