"""Build step of the ``qat`` backend, run by setup.py (which finds every
``unifl/backends/<name>/build.py`` and loads it from its path, before unifl itself is importable;
so this file imports only the standard library, setuptools and pybind11).

Two compiled parts:

* ``unifl.backends.qat._qat``: our QAT driver (pybind11, C++17), which dlopens libqat / libusdm at
  run time, so it builds without the QAT software stack;
* ``unifl.backends.qat.libqat_sim``: our QAT simulator, a plain C-ABI shared library (not a Python
  module) that the driver loads where no libqat is installed.  It computes ModExp with OpenSSL's
  BIGNUM, hence libcrypto.so.3.

Both are OpenSSL-era C++ like the native backend's, and ``UNIFL_NO_NATIVE=1`` (no compiled C++
against OpenSSL) skips them too: the ``qat`` backend then probes unavailable and says why.
"""

from __future__ import annotations

import glob
import os
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from setuptools import Extension


class BuildContext(Protocol):
    """What this step uses of setup.py's ``BuildContext`` (defined there: setup.py is not
    importable from here)."""

    folder: str
    package: str
    #: the include directory of unifl.core's shared C/C++ headers
    core_include: str

    def core_headers(self) -> list[str]: ...

    def link_args(self, name: str, soname: str, missing: str) -> list[str]: ...


def extensions(ctx: BuildContext) -> list[Extension]:
    """The driver extension and the simulator library, unless ``UNIFL_NO_NATIVE=1``."""
    if os.environ.get("UNIFL_NO_NATIVE") == "1":
        return []
    from pybind11.setup_helpers import Pybind11Extension
    from setuptools import Extension

    src = os.path.join(ctx.folder, "src")
    # rebuilt when a header changes, its own or core's
    headers = sorted(glob.glob(os.path.join(src, "*.h")) + ctx.core_headers())
    return [
        Pybind11Extension(
            f"{ctx.package}._qat",
            [os.path.join(src, "qat_driver.cpp")],
            depends=headers,
            include_dirs=[src, ctx.core_include],
            cxx_std=17,
            extra_compile_args=["-O2", "-Wall", "-Wextra", "-Wno-unused-parameter"],
            extra_link_args=["-ldl", "-lpthread"],
        ),
        Extension(
            f"{ctx.package}.libqat_sim",
            [os.path.join(src, "qat_sim.cpp")],
            depends=headers,
            include_dirs=[ctx.core_include],
            language="c++",
            extra_compile_args=["-std=c++17", "-O2", "-fvisibility=hidden", "-Wall",
                                "-Wno-unused-parameter"],
            extra_link_args=ctx.link_args(
                "crypto", "libcrypto.so.3",
                "UniFL qat simulator: libcrypto.so.3 (OpenSSL 3) not found; install libssl3 or "
                "set UNIFL_NO_NATIVE=1") + ["-lpthread"],
        ),
    ]


def package_data(ctx: BuildContext) -> list[str]:
    """The driver and simulator sources (and the QAT C API declarations they share)."""
    return ["src/*"]
