"""The bundled `micro` suite and the scripted expert that solves it, side by side.

    templates.py  function templates, each with the bugs that can be put in it
    statement.py  the problem statement's wording: written by the suite, read by the expert
    suite.py      the 872 task records and their repositories' base trees
    names.py      names a generated identifier must avoid; renamed copies of a task
    gold.py       a gold patch read as the one change it makes
    expert.py     the scripted expert: a TokenPolicy that fixes micro tasks by a plan
    guide.py      the expert behind the guide protocol (`fleetrl.envs.tasks.guide`)

Nothing in this package imports the suite registry (`fleetrl.envs.tasks.suites` imports it).
"""
