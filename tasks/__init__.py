"""Datasets turned into the non-IID, per-user client data of federated retrieval."""
