"""Certificates made in the test: a CA, server and client certificates, an expired one and
one for the wrong host, as PEM files -- raftlog.certs (what `raftlog tls init` uses) with
the tests' organisation name and a 30-day CA."""

from __future__ import annotations

from raftlog.certs import LocalCA

Certs = LocalCA


def make_certs(directory: str) -> LocalCA:
    """A fresh CA in ``directory`` (ca.pem); ``issue(name, cn, hosts=..., expired=...,
    client=...)`` gives (certfile, keyfile)."""
    return LocalCA.create(directory, cn="raftlog test CA", org="raftlog-test", days=30)
