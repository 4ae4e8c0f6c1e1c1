"""fed-retrieval: federated deep retrieval (dual encoders) with TensorFlow Federated."""
