"""Production-like coding environments, one folder per job:

tasks/      task records, the suites registry, workspaces, git, the task generator
micro/      the bundled micro and product suites and the scripted expert that solves them
harness/    the agent loop, its tools, and handing an episode over to another policy
sandbox/    isolated copies of a repository (bubblewrap), a pool of them
verifier/   the reward: hidden tests graded out of the agent's reach (grader_runner; calls
            mode: call_grader and call_worker, the tests never where agent code runs)
anticheat/  the checks that flag a submission which games the tests
"""
