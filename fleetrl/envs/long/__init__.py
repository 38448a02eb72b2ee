"""The bundled `long` suite and the scripted expert that solves it with a summary.

    suite.py   the 900 task records: two-file fixes whose reads overflow the window
    expert.py  the scripted expert: reads, summarises when the harness asks, fixes

Nothing in this package imports the suite registry (`fleetrl.envs.tasks.suites` imports it).
"""
