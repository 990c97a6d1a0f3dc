"""Build UniFL: the Python package plus whatever each backend compiles.

Every backend owns its build step: setup.py finds ``unifl/backends/<name>/build.py`` by path and loads
it from that file (unifl itself is not importable yet: its extensions are what is being built).  A
build module may define any of these hooks, each taking the :class:`BuildContext` of its folder:

* ``extensions(ctx) -> list[Extension]``: setuptools / pybind11 extensions to compile;
* ``after_build_ext(ctx, out_dir)``: work after the extensions are built (e.g. a library compiled by
  another toolchain); ``out_dir`` is where the backend's files go: its source folder for in-place
  and editable builds, else its folder in the build tree;
* ``package_data(ctx) -> list[str]``: globs, relative to the backend's folder, of files to ship;
* ``extras_require(ctx) -> dict[str, list[str]]``: pip extras (``pip install unifl[<extra>]``).

Each build module documents the environment variables it reads.  Nothing here names a backend.
"""

import ctypes.util
import glob
import importlib.util
import os
from types import ModuleType

from setuptools import find_packages, setup
from setuptools.command.build_ext import build_ext as _build_ext

BACKENDS_DIR = os.path.join("unifl", "backends")
#: C/C++ headers every backend may include (``#include "unifl/<name>.h"``), as backends import only
#: unifl.core in Python: e.g. the libcrypto declarations that native and the qat simulator share
CORE_INCLUDE = os.path.join("unifl", "core", "include")
#: where a system library may live, the distribution's multiarch directories first
_LIBRARY_DIRS = ("/usr/lib/x86_64-linux-gnu", "/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib",
                 "/usr/lib/aarch64-linux-gnu")


class BuildContext:
    """What a backend's build hooks get: its folder and package, and generic helpers."""

    def __init__(self, folder: str) -> None:
        self.name = os.path.basename(folder)
        #: the backend's folder, relative to this file (setuptools wants relative source paths)
        self.folder = folder
        self.package = folder.replace(os.sep, ".")
        #: the include directory of unifl.core's shared headers
        self.core_include = CORE_INCLUDE

    @staticmethod
    def core_headers() -> list:
        """unifl.core's shared headers (a build depends on them)."""
        return sorted(glob.glob(os.path.join(CORE_INCLUDE, "unifl", "*.h")))

    @staticmethod
    def link_args(name: str, soname: str, missing: str) -> list:
        """Linker flags for the system library ``lib<name>``: the unversioned development symlink
        when present, else the runtime ``soname`` itself (no -dev package needed), else what
        ``ctypes.util.find_library`` finds; ``SystemExit(missing)`` when there is none."""
        for d in _LIBRARY_DIRS:
            if os.path.exists(os.path.join(d, f"lib{name}.so")):
                return [f"-L{d}", f"-l{name}"]
            if os.path.exists(os.path.join(d, soname)):
                return [f"-L{d}", f"-l:{soname}"]
        found = ctypes.util.find_library(name)
        if found:
            return [f"-l:{found}"]
        raise SystemExit(missing)


def _load(path: str) -> ModuleType:
    """A backend's build.py, executed from its file under a private module name."""
    name = "_unifl_build_" + os.path.basename(os.path.dirname(path))
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"cannot load the build step {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


BUILD_STEPS = [(BuildContext(os.path.dirname(path)), _load(path))
               for path in sorted(glob.glob(os.path.join(BACKENDS_DIR, "*", "build.py")))]


def _hook(module: ModuleType, name: str):
    return getattr(module, name, None)


ext_modules = []
package_data = ["configs/*.yaml", "app/transport/*.proto", "app/data/*", "core/include/unifl/*.h"]
#: the Makefile's editable install registers the package only; `make build` then compiles the
#: extensions once, in place and in parallel (an editable build compiles in a throwaway directory,
#: so the in-place build after it would compile everything a second time)
REGISTER_ONLY = os.environ.get("UNIFL_REGISTER_ONLY") == "1"
# ray: executor: ray (unifl.scheduler.ray), a party's batches on its own Ray cluster
extras_require = {"test": ["pytest", "hypothesis", "phe"], "ray": ["ray==2.60.0"]}
for ctx, step in BUILD_STEPS:
    if _hook(step, "extensions"):
        ext_modules += step.extensions(ctx)
    if _hook(step, "package_data"):
        rel = os.path.relpath(ctx.folder, "unifl")
        package_data += [os.path.join(rel, pattern) for pattern in step.package_data(ctx)]
    if _hook(step, "extras_require"):
        for extra, reqs in step.extras_require(ctx).items():
            if extra in extras_require:
                raise SystemExit(f"{ctx.folder}/build.py: the extra {extra!r} is defined twice")
            extras_require[extra] = reqs


class BuildExt(_build_ext):
    """build_ext, then each backend's ``after_build_ext`` hook."""

    def finalize_options(self):
        super().finalize_options()
        # the extensions compile side by side on every core in pip's and `python -m build`'s builds
        # too, not only in the Makefile's (which passes --parallel); True: one worker per CPU
        if self.parallel is None:
            self.parallel = True

    def run(self):
        super().run()
        # in place for --inplace and for editable installs (pip install -e: the package is the
        # source tree), so the Makefile's later `build_ext --inplace` finds the outputs fresh
        in_tree = self.inplace or getattr(self, "editable_mode", False)
        for ctx, step in BUILD_STEPS:
            if _hook(step, "after_build_ext"):
                out_dir = ctx.folder if in_tree else os.path.join(self.build_lib, ctx.folder)
                os.makedirs(out_dir, exist_ok=True)
                step.after_build_ext(ctx, out_dir)


# name, version, dependencies, scripts and entry points: pyproject.toml's [project]
setup(
    packages=find_packages(include=["unifl", "unifl.*"]),
    package_data={"unifl": package_data},
    # the data is exactly package_data.  setuptools' default also takes every file of the sdist's
    # manifest under a package, and then warned, a screenful per folder (kernel sources, configs,
    # datasets: not Python packages), on every install, a newcomer's first `make demo` included;
    # the wheel's file list is the same either way
    include_package_data=False,
    extras_require=extras_require,
    cmdclass={"build_ext": BuildExt},
    ext_modules=[] if REGISTER_ONLY else ext_modules,
)
