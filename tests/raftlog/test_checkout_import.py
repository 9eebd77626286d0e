"""A source checkout imports as the installed package does (raftlog/__init__.py).

In a checkout the server and client packages are top-level directories (``node/``,
``client/``, ``metadata/``, ``jepsen/``) that pyproject maps into ``raftlog``; Python
run inside the checkout finds its ``raftlog/`` first (the working directory leads
sys.path). A user who ran the README's ``pip install '.[server]'`` (not editable) and
then ``raftlog up`` or ``python`` there got ``No module named raftlog.node``: the
checkout's partial package hid the installed one. Here the editable install's finder
(which maps those names in development) is taken away, as a plain install has none."""

from __future__ import annotations

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

PRELUDE = ("import sys; "
           "sys.meta_path[:] = [f for f in sys.meta_path if 'editable' not in repr(f).lower()]; ")


def test_python_in_a_checkout_finds_the_server_and_client_packages():
    code = PRELUDE + ("import raftlog, raftlog.node.__main__, raftlog.client, raftlog.metadata, "
                      "raftlog.jepsen, raftlog.node.kafka, raftlog.kafka; "
                      "print(raftlog.__file__); print(raftlog.node.__file__); "
                      "print(raftlog.kafka.__file__)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [os.path.join(ROOT, "raftlog", "__init__.py"),
                                  os.path.join(ROOT, "node", "__init__.py"),
                                  os.path.join(ROOT, "raftlog", "kafka", "__init__.py")]


def test_the_node_starts_from_a_checkout_as_raftlog_up_starts_it():
    """``raftlog up`` runs ``python -m raftlog.node`` in the user's directory."""
    code = PRELUDE + ("import runpy, sys; sys.argv = ['raftlog.node', '--help']; "
                      "runpy.run_module('raftlog.node', run_name='__main__')")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "--config" in out.stdout
