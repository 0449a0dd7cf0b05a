"""Interpscope backend: pure Python + PyTorch. Never imports streamlit."""
