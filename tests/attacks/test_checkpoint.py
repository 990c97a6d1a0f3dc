"""Checkpoints against another local user who can write where the job keeps them.

A user who plants a symbolic link at the name the party writes its checkpoint through would have
the party overwrite the link's target with its own rights (a job run by a service account, a link
to that account's ~/.bashrc or to another job's model).  The party writes through a descriptor of a
private folder, to an unguessable temp name created O_CREAT|O_EXCL|O_NOFOLLOW, renamed over the
checkpoint: planted links are never followed, and a folder another user can write in is refused.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

import unifl
from unifl.app import checkpoint
from unifl.app.jobs import run_local
from unifl.core.errors import ConfigError

BE = unifl.backend("native")
VICTIM = b"the victim's file, which no checkpoint may overwrite\n"


def job(ck: Path, **params) -> dict:
    return {"job_id": "atk", "algorithm": "vlr", "dataset": "breast", "parties": ["guest", "host"],
            "seed": 7, "key_bits": 1024,
            "params": {"epochs": 1, "batch_size": 40, "max_rows": 120, "tol": None,
                       "checkpoint_dir": str(ck), **params}}


def plant(ck: Path, name: str, target: Path) -> Path:
    link = ck / name
    link.symlink_to(target)
    return link


def test_a_link_planted_at_the_temp_name_is_not_followed(tmp_path):
    """Links at every name a checkpoint was ever written through (``x.tmp``, ``x.json.tmp``) to a
    file of the victim's: the job runs, the checkpoints are written, the victim file is intact."""
    ck = tmp_path / "ck"
    ck.mkdir(mode=0o700)
    victim = tmp_path / "victim"
    victim.write_bytes(VICTIM)
    links = [plant(ck, f"atk_vlr_{role}{suffix}", victim)
             for role in ("guest", "host") for suffix in (".tmp", ".json.tmp")]
    res = run_local(job(ck), BE)
    assert victim.read_bytes() == VICTIM
    for role in ("guest", "host"):
        saved = json.loads((ck / f"atk_vlr_{role}.json").read_text())
        assert saved["states"][0]["weights"] == res[role]["model"]["weights"]
    assert all(link.is_symlink() for link in links)        # left as they were
    assert not [p for p in ck.iterdir() if p.name.startswith(".")]   # no temp file left


def test_a_link_planted_at_the_checkpoint_name_is_replaced_not_followed(tmp_path):
    ck = tmp_path / "ck"
    ck.mkdir(mode=0o700)
    victim = tmp_path / "victim"
    victim.write_bytes(VICTIM)
    link = plant(ck, "x.json", victim)
    checkpoint.save(link, np.ones(3), 1, 5, False)
    assert victim.read_bytes() == VICTIM
    assert not link.is_symlink() and checkpoint.load(link, 3, 5)[1][0].tolist() == [1.0] * 3


def test_a_checkpoint_that_is_a_link_is_not_read(tmp_path):
    """A link at the checkpoint's name, to a file of weights the attacker wrote: refused."""
    ck = tmp_path / "ck"
    ck.mkdir(mode=0o700)
    forged = tmp_path / "forged.json"
    forged.write_text(json.dumps({"unifl_checkpoint": 2, "rng": {"seed": 5},
                                  "states": [{"epoch": 1, "weights": [9.0] * 3,
                                              "stopped": False}]}))
    plant(ck, "x.json", forged)
    with pytest.raises(ConfigError, match="symbolic link"):
        checkpoint.load(ck / "x.json", 3, 5)


@pytest.mark.parametrize("mode", [0o777, 0o770, 0o755 | 0o002])
def test_a_folder_others_can_write_is_refused(tmp_path, mode):
    ck = tmp_path / "shared"
    ck.mkdir()
    os.chmod(ck, mode)
    with pytest.raises(ConfigError, match="writable by group or others"):
        checkpoint.save(ck / "x.json", np.ones(3), 1, 5, False)
    with pytest.raises(ConfigError, match="writable by group or others"):
        checkpoint.load(ck / "x.json", 3, 5)
    assert list(ck.iterdir()) == []


def test_a_folder_of_another_user_is_refused(tmp_path, monkeypatch):
    ck = tmp_path / "theirs"
    ck.mkdir(mode=0o700)
    real = os.geteuid()
    monkeypatch.setattr(os, "geteuid", lambda: real + 1)   # as if another user owned it
    with pytest.raises(ConfigError, match="owned by uid"):
        checkpoint.save(ck / "x.json", np.ones(3), 1, 5, False)


def test_a_linked_folder_is_refused(tmp_path):
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    (tmp_path / "link").symlink_to(real)
    with pytest.raises(ConfigError, match="symbolic link"):
        checkpoint.save(tmp_path / "link" / "x.json", np.ones(3), 1, 5, False)
    assert list(real.iterdir()) == []


def test_a_new_folder_is_private(tmp_path):
    path = tmp_path / "a" / "b" / "x.json"
    checkpoint.save(path, np.ones(3), 1, 5, False)
    assert path.parent.stat().st_mode & 0o777 == 0o700
    assert path.stat().st_mode & 0o777 == 0o600


def test_a_failed_write_keeps_the_old_checkpoint_and_no_temp_file(tmp_path, monkeypatch):
    path = tmp_path / "ck" / "x.json"
    checkpoint.save(path, np.ones(3), 1, 5, False)

    def broken(fd):
        raise OSError("disk full")
    monkeypatch.setattr(os, "fsync", broken)
    with pytest.raises(OSError, match="disk full"):
        checkpoint.save(path, np.zeros(3), 2, 5, False)
    monkeypatch.undo()
    assert sorted(checkpoint.load(path, 3, 5)) == [1]
    assert [p.name for p in path.parent.iterdir()] == ["x.json"]
