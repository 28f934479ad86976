"""groupkit: consumer groups for confluent-kafka, coordinated over a compacted control topic."""

from groupkit.runtime.consumer import GroupConsumer

__version__ = "0.1.0"

__all__ = ["GroupConsumer", "__version__"]
