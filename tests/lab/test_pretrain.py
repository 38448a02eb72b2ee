"""Pretraining corpus: which files are read, and how their tokens are packed into rows."""

from pathlib import Path

from lab.pretrain import corpus_roots, pack_rows, source_files

from fleetrl.model.tokenizer import bundled_tokenizer

TOKENIZER = bundled_tokenizer()


def _tree(root: Path) -> None:
    files = {
        "pkg/a.py": "def a():\n    return 1\n",
        "pkg/b.py": "x = [i * 2 for i in range(3)]\n",
        "pkg/tests/test_a.py": "def test_a(): pass\n",
        "pkg/testing.py": "import pytest\n",
        "fleetrl/envs/micro/templates.py": "UNSEEN = []\n",
        "__editable___fleetrl_finder.py": "MAPPING = {}\n",
        "pkg/data.txt": "not python\n",
    }
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)


def test_source_files_leave_out_tests_and_fleetrl_in_a_seeded_order(tmp_path: Path) -> None:
    _tree(tmp_path)
    files = source_files([tmp_path], seed=0)
    assert sorted(p.relative_to(tmp_path).as_posix() for p in files) == ["pkg/a.py", "pkg/b.py"]
    assert files == source_files([tmp_path], seed=0)
    orders = {tuple(source_files([tmp_path], seed=s)) for s in range(8)}
    assert len(orders) == 2  # both orders of two files turn up


def test_rows_are_whole_files_ended_by_eos_cut_to_length(tmp_path: Path) -> None:
    texts = ["def f(x):\n    return x + 1\n", "y = 'abc' * 3\n", ""]
    paths = []
    for i, text in enumerate(texts):
        paths.append(tmp_path / f"m{i}.py")
        paths[-1].write_text(text)
    (tmp_path / "latin.py").write_bytes(b"s = '\xe9'\n")  # not UTF-8: passed over
    paths.insert(1, tmp_path / "latin.py")
    eos = TOKENIZER.eos_id
    stream = [*TOKENIZER.encode(texts[0]), eos, *TOKENIZER.encode(texts[1]), eos]
    rows = pack_rows(paths, TOKENIZER.encode, eos, length=4, budget=10_000)
    assert [t for row in rows for t in row.token_ids] == stream[: len(stream) // 4 * 4]
    assert all(len(r.token_ids) == 4 and r.loss_mask == [1, 1, 1, 1] for r in rows)
    assert len(pack_rows(paths, TOKENIZER.encode, eos, length=4, budget=8)) == 2


def test_the_corpus_is_this_interpreter_s_own_sources() -> None:
    roots = corpus_roots()
    assert all(root.is_dir() for root in roots)
    assert (roots[0] / "json" / "__init__.py").is_file()
