"""Causal tools: activation patching of a clean / corrupt prompt pair (residual stream, attention and MLP outputs,
heads), its one-backward-pass estimates (attribution patching, relevance patching) and path patching.

`interpscope.patch` / `interpscope.path_patch` (interpscope.api) are the entry points; `interpscope patch` the
command; pages/patching.py the view.
"""
