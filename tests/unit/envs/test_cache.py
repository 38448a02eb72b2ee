from fleetrl.envs.cache import cache_dir, write_whole


def test_cache_dir_follows_fleetrl_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("FLEETRL_CACHE", str(tmp_path / "c"))
    assert cache_dir() == tmp_path / "c"


def test_write_whole_makes_the_folder_replaces_and_leaves_nothing_beside(tmp_path):
    entry = tmp_path / "sweeps" / "key.json"
    write_whole(entry, b"first")
    write_whole(entry, b"second")
    assert entry.read_bytes() == b"second"
    assert [p.name for p in entry.parent.iterdir()] == ["key.json"]
