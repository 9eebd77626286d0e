"""Kafka's wire protocol, sans I/O: the codec (wire.py) over the message layouts
(messages.py, generated), Kafka record batches (batch.py), error codes (errors.py),
ACL codes (acl.py) and the consumer protocol's embedded layouts (consumer_protocol.py).
The node's Kafka listener is raftlog.node.kafka."""
