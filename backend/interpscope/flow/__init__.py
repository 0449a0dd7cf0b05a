"""Lenses that read a middle layer as a prediction: the tuned lens (per-layer translators, shipped per model)."""
