"""Attention heads: every head's pattern on a text, the head finder (induction, previous-token, duplicate-token
scores against chance) and head ablation on in-context repetition."""
