"""Test tools for groupkit, and for users testing their own assignors against simulated groups.

:mod:`~groupkit.testing.sim` runs a group of protocol :class:`~groupkit.protocol.node.Node`\\ s
over an in-memory control log with a fake broker clock: members that read at their own speed,
crash, pause, leave and change subscriptions, with the safety invariants checked after every
tick. No broker, no threads.

Why it ships in the wheel: an application that writes its own assignor can run it through the
same schedules groupkit's own tests and benches use. Why it is not in :mod:`groupkit.protocol`:
the core holds only what a member runs; this package sits a layer above it (it imports the
protocol and the assignors, never the runtime), and nothing of the product imports it.
"""
