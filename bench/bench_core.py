"""UniFL Table 2 and the Paillier operations (the same suites as ``unifl bench``), runnable as a script:

    python bench/bench_core.py [--quick] [--backend native --backend cpu]

Results: a table on the terminal, JSON (machine info, versions, every repetition's spread) and a PNG
of the speedups under bench/results/.
"""

from unifl.cli import app

if __name__ == "__main__":
    import sys
    app(["bench", *sys.argv[1:]])
