"""Backend independence holds for the compiled sources too: a backend's C, C++, CUDA and OpenCL files
include only their own folder, system headers and unifl.core's shared headers
(``unifl/core/include/unifl/*.h``), as its Python imports only unifl.core (the import contracts)."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from tests.helpers.paths import ROOT as REPO_ROOT

ROOT = REPO_ROOT
BACKENDS = ROOT / "unifl" / "backends"
CORE_INCLUDE = ROOT / "unifl" / "core" / "include"
SOURCES = ("*.c", "*.cc", "*.cpp", "*.h", "*.hpp", "*.cu", "*.cuh", "*.cl")
QUOTED_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.MULTILINE)


def _quoted_includes() -> list[tuple[Path, str]]:
    found = []
    for folder in sorted(p for p in BACKENDS.iterdir() if p.is_dir()):
        for pattern in SOURCES:
            for src in folder.rglob(pattern):
                found += [(src, inc) for inc in QUOTED_INCLUDE.findall(src.read_text(errors="replace"))]
    return found


def test_backend_sources_include_only_their_folder_and_core():
    includes = _quoted_includes()
    assert includes, "no backend source found: the scan itself is broken"
    bad = []
    for src, inc in includes:
        backend = src.relative_to(BACKENDS).parts[0]
        own = (src.parent / inc).resolve()
        shared = (CORE_INCLUDE / inc).resolve()
        inside_own = own.is_relative_to(BACKENDS / backend) and own.exists()
        from_core = shared.is_relative_to(CORE_INCLUDE) and shared.exists()
        if not (inside_own or from_core):
            bad.append(f"{src.relative_to(ROOT)}: #include \"{inc}\"")
    assert not bad, "includes outside the backend's folder and unifl/core/include:\n" + "\n".join(bad)


def test_the_scan_sees_a_cross_backend_include(tmp_path, monkeypatch):
    """The check fails on the include it exists to stop (a backend reaching into another's src)."""
    fake = tmp_path / "unifl" / "backends"
    (fake / "a" / "src").mkdir(parents=True)
    (fake / "b" / "src").mkdir(parents=True)
    (fake / "b" / "src" / "x.h").write_text("#pragma once\n")
    (fake / "a" / "src" / "y.cpp").write_text('#include "../../b/src/x.h"\n')
    (tmp_path / "unifl" / "core" / "include").mkdir(parents=True)
    monkeypatch.setattr(sys.modules[__name__], "BACKENDS", fake)
    monkeypatch.setattr(sys.modules[__name__], "CORE_INCLUDE", tmp_path / "unifl/core/include")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    try:
        test_backend_sources_include_only_their_folder_and_core()
    except AssertionError as exc:
        assert "a/src/y.cpp" in str(exc)
    else:
        raise AssertionError("a cross-backend include passed the check")
