"""groupkit: consumer groups for confluent-kafka, coordinated over a compacted control topic."""

__version__ = "0.1.0"

__all__ = ["__version__"]
