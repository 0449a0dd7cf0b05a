"""Model loading: bundled models, Hugging Face ids and local folders, one shared copy per (model, device, dtype)."""
from interpscope.models.loading import LoadedModel, available_models, clear_cache, load_model

__all__ = ["LoadedModel", "available_models", "clear_cache", "load_model"]
