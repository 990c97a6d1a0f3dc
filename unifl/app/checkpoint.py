"""Per-epoch checkpoints of vertical training: durable, atomic, and safe in a shared file system.

A checkpoint is one JSON file per party, ``<job_id>_<algorithm>_<role>.json`` in the job's
``checkpoint_dir``, holding the last two states (weights, epoch, stopped) and the seed of the
batch schedule::

    {"unifl_checkpoint": 2, "rng": {"seed": 42},
     "states": [{"epoch": 3, "weights": [...], "stopped": false}, {"epoch": 2, ...}]}

Two states, because the parties save in turn (the guest, then the host, then the next epoch): a
party one save ahead of its peer can still resume from their common epoch (:func:`agree_start`).

Another local user is hostile: the folder is created private (0700) and, found existing, must be
owned by this user and writable by no one else (``ConfigError`` otherwise: whoever can write in it
could swap the weights a resumed job starts from).  Every file operation goes through a descriptor
of that folder opened with ``O_NOFOLLOW``: the new state is written to a temp file of an
unguessable name created with ``O_CREAT | O_EXCL | O_NOFOLLOW`` (mode 0600), flushed and fsynced,
renamed over the checkpoint (atomic; a link planted at the checkpoint's name is replaced, never
followed), and the folder fsynced.  A crash leaves the old file or the new one, never half of one.
Reading opens the file ``O_NOFOLLOW`` through the same folder descriptor.
"""

from __future__ import annotations

import errno
import json
import os
import secrets
import stat
from pathlib import Path

import numpy as np

from ..core.errors import ConfigError, SerializationError

__all__ = ["VERSION", "path_for", "save", "load", "agree_start"]

VERSION = 2
#: a checkpoint holds d + 2 numbers per state; anything this large is not one of ours
MAX_BYTES = 64 << 20


def path_for(checkpoint_dir: str | None, job_id: str, algorithm: str, role: str) -> Path | None:
    """This party's checkpoint file, or None when the job keeps none."""
    if not checkpoint_dir:
        return None
    return Path(checkpoint_dir) / f"{job_id}_{algorithm}_{role}.json"


def _open_dir(folder: Path, create: bool) -> int | None:
    """A descriptor of ``folder`` (opened without following a link at its last component), after
    checking it is private to this user; None when it does not exist and ``create`` is false.

    Raises:
        ConfigError: the folder is a link, not a folder, owned by another user, or writable by
            group or others.
    """
    if create:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except FileNotFoundError:
        if create:
            raise
        return None
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise ConfigError(f"checkpoint_dir {folder} is a symbolic link or not a folder; "
                              "refused") from exc
        raise
    st = os.fstat(fd)
    problem = None
    if st.st_uid != os.geteuid():
        problem = f"is owned by uid {st.st_uid}, not this user ({os.geteuid()})"
    elif st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        problem = f"is writable by group or others (mode {stat.S_IMODE(st.st_mode):04o})"
    if problem:
        os.close(fd)
        raise ConfigError(f"checkpoint_dir {folder} {problem}: another user could replace the "
                          "weights a resumed job starts from; use a private folder (chmod 700)")
    return fd


def save(path: Path | None, w: np.ndarray, epoch: int, seed: int, stopped: bool,
         previous: tuple[int, np.ndarray, bool] | None = None) -> None:
    """Weights after ``epoch`` completed epochs (and the state before it, ``previous``, so that a
    party one save ahead of its peer can still resume from their common epoch), durably and
    atomically, never through a link (see the module docstring)."""
    if path is None:
        return
    states = [{"epoch": int(epoch), "weights": w.tolist(), "stopped": bool(stopped)}]
    if previous is not None and previous[0] < epoch:
        states.append({"epoch": int(previous[0]), "weights": np.asarray(previous[1]).tolist(),
                       "stopped": bool(previous[2])})
    data = json.dumps({"unifl_checkpoint": VERSION, "rng": {"seed": seed},
                       "states": states}).encode("utf-8")
    dfd = _open_dir(path.parent, create=True)
    assert dfd is not None
    try:
        tmp = f".{path.name}.{secrets.token_hex(8)}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600,
                     dir_fd=dfd)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            # atomic: a crash never leaves a half-written checkpoint; a link at the name is
            # replaced by the file, not followed
            os.replace(tmp, path.name, src_dir_fd=dfd, dst_dir_fd=dfd)
        except BaseException:
            try:
                os.unlink(tmp, dir_fd=dfd)
            except OSError:
                pass
            raise
        os.fsync(dfd)
    finally:
        os.close(dfd)


def load(path: Path | None, dim: int, seed: int) -> dict[int, tuple[np.ndarray, bool]]:
    """The saved states {epoch: (weights, stopped)} (empty without a checkpoint).

    Raises:
        ConfigError: the folder is not private, the file is a link or not a regular file, or it
            belongs to another model (shape or seed).
        SerializationError: the file is malformed.
    """
    if path is None:
        return {}
    dfd = _open_dir(path.parent, create=False)
    if dfd is None:
        return {}
    try:
        try:
            fd = os.open(path.name, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=dfd)
        except FileNotFoundError:
            return {}
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise ConfigError(f"checkpoint {path} is a symbolic link; refused") from exc
            raise
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(f.fileno())
            if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_BYTES:
                raise ConfigError(f"checkpoint {path} is not a regular file of at most "
                                  f"{MAX_BYTES} bytes")
            text = f.read(MAX_BYTES + 1)
    finally:
        os.close(dfd)
    try:
        obj = json.loads(text)
        ck_seed = int(obj["rng"]["seed"])
        if obj.get("unifl_checkpoint") == 1:      # one state, written before version 2
            raw = [{"epoch": obj["epoch"], "weights": obj["weights"], "stopped": obj["stopped"]}]
        else:
            raw = obj["states"]
        states = {int(s["epoch"]): (np.array(s["weights"], dtype=np.float64), bool(s["stopped"]))
                  for s in raw}
    except (ValueError, KeyError, TypeError) as exc:
        raise SerializationError(f"checkpoint {path} is malformed: {exc}") from exc
    for w, _ in states.values():
        if w.shape != (dim,) or ck_seed != seed:
            raise ConfigError(f"checkpoint {path} belongs to another model (shape {w.shape}, "
                              f"seed {ck_seed}); expected ({dim},), seed {seed}")
    return states


def agree_start(own: dict[int, bool], peer: dict[int, bool]) -> int:
    """The epoch both parties resume from: the latest one both have saved (0 when neither has a
    checkpoint).  Both compute it from the same two lists, so they agree.

    Raises:
        ConfigError: the two sets of saved epochs have none in common, or disagree on stopping.
    """
    if not own and not peer:
        return 0
    common = set(own) & set(peer)
    if not common:
        raise ConfigError(f"the parties' checkpoints have no common epoch (this party "
                          f"{sorted(own)}, the peer {sorted(peer)}): checkpoints or data differ")
    e = max(common)
    if own[e] != peer[e]:
        raise ConfigError(f"the parties' checkpoints disagree on stopping at epoch {e}: "
                          "checkpoints or data differ")
    return e
