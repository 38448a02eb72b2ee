"""Research code: what only the experiments under `scripts/` use, kept out of the package.

    pretrain.py  a corpus of the machine's own Python for pretraining (`pretrain_code.py`)
    shapes.py    function shapes drawn at random from a grammar (`shape_tasks.py`)
    folders.py   task folders of one's own train tasks beside the bundled evaluation splits
                 (`control_tasks.py`, `shape_tasks.py`)

Scripts run as `python scripts/NAME.py` find it on their path; `fleetrl/` never imports it
(`tests/unit/test_layers.py`). Its tests are under `tests/lab/`.
"""
