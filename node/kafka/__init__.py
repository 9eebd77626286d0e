"""The Kafka listener: its server (server.py: connections, framing, parking) and the
handlers that turn each Kafka request into the native one of the route table
(handlers.py, admin_handlers.py, txn_handlers.py, txn_admin_handlers.py), with the
topic configs (configs.py) and topic ids (topic_ids.py) they share. The codec is
raftlog.kafka."""
