"""The FPGA RTL's figures: yosys synthesis of the MontMult engine and the exponentiation unit
(:mod:`tools.fpga.synth`), and the card estimate built on them (:mod:`tools.fpga.estimate`).

Run as ``python -m tools.fpga.synth`` and ``python -m tools.fpga.estimate``; nothing here runs on an
FPGA, and every throughput figure is labelled an estimate.
"""
