"""The agent harness: what the model sees and does in a sandbox, turn by turn.

loop.py      the agent loop (`run_episode`), token in, token out
tools.py     the tools the agent calls and their results
handover.py  an episode begun by one policy and continued by another
"""
