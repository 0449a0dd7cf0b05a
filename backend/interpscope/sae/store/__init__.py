"""Feature stores: one precompute pass over a corpus per SAE, then instant feature cards, search and live views."""
from interpscope.sae.store.build import build_store
from interpscope.sae.store.layout import StoreSpec, default_store_dir, list_stores
from interpscope.sae.store.store import FeatureCard, FeatureStore, read_manifest

__all__ = ["FeatureCard", "FeatureStore", "StoreSpec", "build_store", "default_store_dir", "list_stores",
           "read_manifest"]
