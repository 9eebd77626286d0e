"""raftlog: a partitioned, replicated commit log (Kafka's design) in Python.

The core package: record batch format, segments and the partition log, the
sans-IO wire codec, errors and configs. It imports nothing from the server
packages (``raftlog.node``, ``raftlog.metadata``).
"""

__version__ = "0.1.0"


def _checkout_root() -> str | None:
    """The source checkout this package was imported from, when it was: there the
    server and client packages are the checkout's top-level ``node/``, ``client/``,
    ``metadata/`` and ``jepsen/`` (pyproject's package-dir), not subdirectories of
    ``raftlog/`` as in an installed copy. Python run inside a checkout finds this
    ``raftlog/`` first (the working directory leads sys.path), so without this a user
    who ran ``pip install '.[server]'`` and then ``raftlog up`` or ``python`` in the
    checkout got ``No module named raftlog.node``."""
    import os

    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(here)
    if (not os.path.isdir(os.path.join(here, "node"))
            and os.path.isfile(os.path.join(root, "node", "__init__.py"))
            and os.path.isfile(os.path.join(root, "pyproject.toml"))):
        return root
    return None


if (_root := _checkout_root()) is not None:
    __path__.append(_root)  # raftlog.node -> <checkout>/node, as package-dir maps it
del _root
