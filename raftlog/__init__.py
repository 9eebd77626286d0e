"""raftlog: a partitioned, replicated commit log (Kafka's design) in Python.

The core package: record batch format, segments and the partition log, the
sans-IO wire codec, errors and configs. It imports nothing from the server
packages (``raftlog.node``, ``raftlog.metadata``).
"""

__version__ = "0.1.0"
