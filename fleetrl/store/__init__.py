"""The object store and what travels through it.

`objectstore` (folder or S3 access), `weights` (versions, full snapshots and deltas, with
`codec`, `manifest`, `shards`, `rebuild`), `follower` and `relay` (regions tracking the
versions), `trajectories` (the group channel), `control` (the run's control objects).
This package imports nothing; `store` never imports `inference`: a follower talks to any
engine through `follower.WeightSink`.
"""
