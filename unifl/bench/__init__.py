"""``unifl bench``: UniFL's backends measured against baselines in the same run, so that the ratios
mean something on any machine.

One concept per module:

* :mod:`~unifl.bench.harness` -- how a figure is measured (warm-up, repetitions, median, spread),
  the machine and versions behind it, the :class:`Row` and the run's :class:`Session`;
* :mod:`~unifl.bench.suites` -- ``table2`` (MontMult / ModMult / ModExp, Paillier encryption),
  ``ops`` (FLASH O1-O9: Paillier, matmul, histogram, RSA), ``peers`` and ``e2e`` (the apps);
* :mod:`~unifl.bench.peers` -- what UniFL is compared with: gmpy2, python-paillier, FATE's kit and
  jobs, SecretFlow HEU (published figures marked "quoted, not measured" when it is absent);
* :mod:`~unifl.bench.report` -- the terminal table, the JSON document and the speedup plots;
* :mod:`~unifl.bench.worker` -- ``python -m unifl.bench.worker``: a peer measured in another
  interpreter (FATE's venv), answering with one JSON document on stdout.

From Python::

    from unifl.bench import Session, SUITES, report
    s = Session(["native"], min_time=0.05, repeats=2, quick=True)
    SUITES["table2"](s)
    print(report.to_json(s)["rows"][0]["op"])
"""

from . import report
from .harness import Row, Session, Stats, machine_info, measure, measure_full, summarize
from .suites import SUITES

__all__ = ["Row", "Session", "Stats", "SUITES", "machine_info", "measure", "measure_full",
           "summarize", "report"]
