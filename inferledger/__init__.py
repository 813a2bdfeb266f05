"""InferLedger: cost-and-capacity analytics for teams that serve LLMs."""

__version__ = "0.1.0"
