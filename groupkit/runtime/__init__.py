"""The I/O layer: everything of groupkit that talks to Kafka lives here."""
