"""Whole-file writes: the folder made, the file replaced, no temporary file left."""

import pytest

from fleetrl.files import cache_dir, write_whole


def test_write_whole_makes_the_folder_replaces_and_leaves_nothing_beside(tmp_path):
    entry = tmp_path / "sweeps" / "key.json"
    write_whole(entry, b"first")
    write_whole(entry, b"second")
    assert entry.read_bytes() == b"second"
    assert [p.name for p in entry.parent.iterdir()] == ["key.json"]


def test_a_failed_write_keeps_what_was_there_and_leaves_nothing_beside(tmp_path):
    entry = tmp_path / "key.json"
    (entry / "inside").mkdir(parents=True)  # a folder where the file goes: rename fails
    with pytest.raises(OSError):
        write_whole(entry, b"data")
    assert (entry / "inside").is_dir()
    assert [p.name for p in tmp_path.iterdir()] == ["key.json"]


def test_cache_dir_follows_fleetrl_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("FLEETRL_CACHE", str(tmp_path / "c"))
    assert cache_dir() == tmp_path / "c"
