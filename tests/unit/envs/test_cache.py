from fleetrl.envs.cache import cache_dir


def test_cache_dir_follows_fleetrl_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("FLEETRL_CACHE", str(tmp_path / "c"))
    assert cache_dir() == tmp_path / "c"
