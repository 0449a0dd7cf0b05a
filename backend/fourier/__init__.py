"""Fourier features of numbers (Zhou et al., NeurIPS 2024): spectra, Fourier-space logit lens, frequency filters.

Modules: basis (orthonormal basis, periods, outliers), numbers (number tokens), spectrum (embedding and
hidden-state spectra), data (addition task and split), addition (accuracy), lens (module logit lens in Fourier
space, top components), filters (null-space projections and the ablation table), vocab (adder tokenizer).
"""
