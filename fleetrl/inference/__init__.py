"""Inference: the batched generation engine (`inference.engine`) and its HTTP server
(`inference.server`). This package imports nothing, so that naming it does not load torch."""
