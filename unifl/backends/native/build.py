"""Build step of the ``native`` backend, run by setup.py (which finds every
``unifl/backends/<name>/build.py`` and loads it from its path, before unifl itself is importable;
so this file imports only the standard library, setuptools and pybind11).

The extension ``unifl.backends.native._native`` (pybind11, C++17) links libcrypto.so.3 (OpenSSL 3),
which every CPython on Debian/Ubuntu already depends on; its BIGNUM declarations are our own
(``unifl/core/include/unifl/bn_api.h``), so no -dev package and no root are needed.  ``UNIFL_NO_NATIVE=1`` skips it (the
``native`` backend then probes unavailable and says so).
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
    """The C++ extension, unless ``UNIFL_NO_NATIVE=1``."""
    if os.environ.get("UNIFL_NO_NATIVE") == "1":
        return []
    from pybind11.setup_helpers import Pybind11Extension

    src = os.path.join(ctx.folder, "src")
    return [Pybind11Extension(
        f"{ctx.package}._native",
        sorted(glob.glob(os.path.join(src, "*.cpp"))),
        # rebuilt when a header changes, its own or core's
        depends=sorted(glob.glob(os.path.join(src, "*.h")) + ctx.core_headers()),
        include_dirs=[src, ctx.core_include],
        cxx_std=17,
        extra_compile_args=["-O3", "-Wall", "-Wextra", "-Wno-unused-parameter"],
        extra_link_args=ctx.link_args(
            "crypto", "libcrypto.so.3",
            "UniFL native backend: libcrypto.so.3 (OpenSSL 3) not found; install libssl3 or "
            "set UNIFL_NO_NATIVE=1"),
    )]


def package_data(ctx: BuildContext) -> list[str]:
    """The C++ sources travel with the package (a from-source rebuild needs them), and the type
    stub of the extension (``_native.pyi``) with it."""
    return ["src/*", "*.pyi"]
