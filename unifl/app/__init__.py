"""Layer 1: federated-learning algorithms on ``unifl.phe_sdk``.

``jobs.run_job`` is the one entry point (each party calls it with its role); ``params`` holds the
job schema and one parameter model per algorithm; ``channel`` and ``codec`` carry objects between
parties (``transport/`` holds the gRPC transport); ``psi``, ``vertical``, ``horizontal`` and
``secureboost`` are the algorithms, ``reference`` their plaintext references (which import none of
them: ``batching``, ``model`` and ``binning`` hold what both sides compute alike), ``data`` the
example datasets, ``synthetic`` a generated dataset for scale runs, ``chunks`` the checked
chunk streams in which the vertical and tree algorithms send a batch's (a level's) ciphertexts,
and ``checkpoint`` the vertical algorithms' per-epoch checkpoints.
See docs/app.md.
"""
