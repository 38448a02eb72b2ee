"""Tasks: SWE-bench records, where they come from and the repositories they start from.

records.py    the record format (JSON lines), splits, refusal of malformed input
suites.py     the registry: bundled suites and task folders, by name or path
workspace.py  a task's repository, checked out at its base commit
git.py        the git calls the rest share
generator.py  new tasks from a user's repository (`fleetrl tasks make`)
mutations.py  the bugs the generator puts into working functions
testrun.py    a plain pytest run of a folder, parsed
guide.py      guides: scripted episodes that reach a task's gold fix (the protocol)
gold_guide.py the guide of any task with a gold patch (a `tasks make` folder's)
"""
