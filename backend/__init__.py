"""Interpscope: pure Python + PyTorch (the backend/ folder is the `interpscope` package). Never imports streamlit."""
