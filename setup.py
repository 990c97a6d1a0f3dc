"""Build UniFL and its native C++ extension.

The native backend links libcrypto.so.3 (OpenSSL 3), which every CPython on Debian/Ubuntu already
depends on; its BIGNUM declarations are our own (unifl/backends/native/src/bn_api.h), so no -dev
package and no root are needed.  Set UNIFL_NO_NATIVE=1 to skip the extension (the ``native`` backend
then probes unavailable and says so).
"""

import ctypes.util
import glob
import os

from setuptools import find_packages, setup

ext_modules = []
if os.environ.get("UNIFL_NO_NATIVE") != "1":
    from pybind11.setup_helpers import Pybind11Extension

    def _libcrypto_link_args():
        # prefer the unversioned dev symlink when present, else the runtime soname
        for d in ("/usr/lib/x86_64-linux-gnu", "/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib",
                  "/usr/lib/aarch64-linux-gnu"):
            if os.path.exists(os.path.join(d, "libcrypto.so")):
                return [f"-L{d}", "-lcrypto"]
            if os.path.exists(os.path.join(d, "libcrypto.so.3")):
                return [f"-L{d}", "-l:libcrypto.so.3"]
        name = ctypes.util.find_library("crypto")
        if name:
            return [f"-l:{name}"]
        raise SystemExit("UniFL native backend: libcrypto.so.3 (OpenSSL 3) not found; "
                         "install libssl3 or set UNIFL_NO_NATIVE=1")

    ext_modules.append(Pybind11Extension(
        "unifl.backends.native._native",
        sorted(glob.glob("unifl/backends/native/src/*.cpp")),
        include_dirs=["unifl/backends/native/src"],
        cxx_std=17,
        extra_compile_args=["-O3", "-Wall", "-Wextra", "-Wno-unused-parameter"],
        extra_link_args=_libcrypto_link_args(),
    ))

# ---- fpga backend (issue 3): its OpenCL C kernels are package data, built at run time ----------
FPGA_PACKAGE_DATA = ["backends/fpga/kernels/*.cl"]
# ------------------------------------------------------------------------------------------------

# ---- FATE plugin (issue 7): the [fate] extra (pins that make pyfate 2.2.0 run) and FATE's ------
# component entry point.  torch: take the CPU build (PyTorch's CPU index, or a local CPU wheel);
# PyPI's Linux torch pulls ~4 GB of CUDA packages.  See docs/fate.md.
FATE_EXTRA = ["pyfate==2.2.0", "pandas==2.2.3", "setuptools<81", "torch==2.13.0"]
FATE_ENTRY_POINTS = {"fate.ext.component_desc": [
    f"{name} = unifl.fate.components:{name}" for name in
    ("unifl_coordinated_lr", "unifl_coordinated_linr", "unifl_hetero_secureboost")]}
# ------------------------------------------------------------------------------------------------

setup(
    name="unifl",
    version="0.1.0",
    description="Unified heterogeneous acceleration of the cryptography of cross-silo federated learning",
    packages=find_packages(include=["unifl", "unifl.*"]),
    package_data={"unifl": ["configs/*.yaml", "backends/*/src/*", "app/data/*"] + FPGA_PACKAGE_DATA},
    python_requires=">=3.10",
    install_requires=["numpy>=1.24", "gmpy2>=2.1", "pyyaml>=6", "pydantic>=2", "rich>=13",
                      "typer>=0.9", "tqdm>=4"],
    extras_require={"test": ["pytest", "hypothesis", "phe"], "fate": FATE_EXTRA},
    ext_modules=ext_modules,
    entry_points={"console_scripts": ["unifl=unifl.cli:main"], **FATE_ENTRY_POINTS},
)
