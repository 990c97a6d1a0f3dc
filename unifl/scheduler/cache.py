"""The scheduler's calibration cache: small JSON files in a private per-user folder.

Another local user is hostile: the folder (``$XDG_CACHE_HOME/unifl``, else ``~/.cache/unifl``) is
created 0700 and used only while it is a real directory owned by us and writable by nobody else;
files are opened relative to the folder's descriptor without following links, read only when
they are regular files of ours, and written to a fresh name (``O_CREAT | O_EXCL | O_NOFOLLOW``,
0600) then renamed over the old one, so a planted link or a half-written file is never read back.
A cache that cannot be used is skipped with a log line: a run never fails for it, it measures.
``UNIFL_CALIBRATION_CACHE=off`` turns every cache off.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import stat
from pathlib import Path
from typing import Any

log = logging.getLogger("unifl.scheduler")

__all__ = ["cache_dir", "read_json", "write_json", "MAX_BYTES"]

#: the largest cache file read back (a calibration is a few kB)
MAX_BYTES = 4 << 20


def cache_dir() -> Path | None:
    """The cache folder (None when caching is off)."""
    if os.environ.get("UNIFL_CALIBRATION_CACHE") == "off":
        return None
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "unifl"


def _open_dir(folder: Path, create: bool) -> int | None:
    """A descriptor of ``folder`` when it is a private directory of ours (made 0700 if missing and
    ``create``), else None (with the reason logged)."""
    if create:
        try:
            folder.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            os.mkdir(folder, 0o700)
        except FileExistsError:
            pass
        except OSError as exc:
            log.info("calibration cache %s not used: %s", folder, exc)
            return None
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError as exc:
        if create:
            log.info("calibration cache %s not used: %s", folder, exc)
        return None
    st = os.fstat(fd)
    if st.st_uid != os.getuid() or st.st_mode & 0o022:
        os.close(fd)
        log.warning("calibration cache %s not used: not a private folder of this user (owner "
                    "uid %d, mode %o)", folder, st.st_uid, stat.S_IMODE(st.st_mode))
        return None
    return fd


def read_json(name: str, folder: Path | None = None) -> dict[str, Any]:
    """The JSON object in file ``name`` of the cache folder ({} when absent or unusable)."""
    folder = folder if folder is not None else cache_dir()
    if folder is None:
        return {}
    dfd = _open_dir(folder, create=False)
    if dfd is None:
        return {}
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=dfd)
    except OSError:
        os.close(dfd)
        return {}
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid() or st.st_size > MAX_BYTES:
            log.warning("calibration cache file %s/%s ignored: not a regular file of this user "
                        "under %d bytes", folder, name, MAX_BYTES)
            return {}
        with os.fdopen(fd, "rb", closefd=False) as fh:
            data = json.loads(fh.read(MAX_BYTES))
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError) as exc:
        log.info("calibration cache file %s/%s ignored: %s", folder, name, exc)
        return {}
    finally:
        os.close(fd)
        os.close(dfd)


def write_json(name: str, data: dict[str, Any], folder: Path | None = None) -> bool:
    """Replace file ``name`` of the cache folder by ``data`` (atomically); False when the cache is
    off or unusable."""
    folder = folder if folder is not None else cache_dir()
    if folder is None:
        return False
    dfd = _open_dir(folder, create=True)
    if dfd is None:
        return False
    tmp = f".{name}.{secrets.token_hex(8)}.tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=dfd)
        try:
            with os.fdopen(fd, "w", closefd=False) as fh:
                json.dump(data, fh, indent=1, sort_keys=True)
                fh.flush()
                os.fsync(fh.fileno())
        finally:
            os.close(fd)
        os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
        return True
    except OSError as exc:
        log.info("calibration cache file %s/%s not written: %s", folder, name, exc)
        try:
            os.unlink(tmp, dir_fd=dfd)
        except OSError:
            pass
        return False
    finally:
        os.close(dfd)
