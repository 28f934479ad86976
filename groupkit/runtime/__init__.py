"""The I/O layer: everything of groupkit that talks to Kafka lives here.

One job a module. A member is:

- ``consumer``: ``GroupConsumer``, the confluent-shaped API and the poll hot path (fence cache);
- ``coordinator``: the control thread (replay, the member's step, leading) and the narrow
  interface the poll thread uses ("the poll thread's side");
- ``handoff``: carries out the coordinator's hand-offs on the poll thread (lose; revoke, commit,
  then release; assign at offset hints);
- ``data_consumer``: the librdkafka data handle (assignment at offsets, commits, offset repair,
  renewal);
- ``probe``: a read-only view of a member for observers (metrics read nothing else).

Around them: ``config`` (the config dict), ``control_topic`` and ``control_log`` (the control
topic and its reader and writer), ``catch_up`` (a newcomer's bounded replay), ``lag`` (the one
reader of end and committed offsets), ``admin`` (topic administration), ``hooks`` (observers),
``telemetry`` (the leader's lag telemetry), ``describe`` (``groupkit describe``).
"""
