"""The suite's own scheduling: the serial group (tests/conftest.py) must reach xdist."""

from __future__ import annotations

from ..conftest import ungrouped


def test_serial_ids_without_a_group_suffix_are_found():
    ids = ["tests/docs/test_readme_blocks.py::test_block[README.md:214]",
           "tests/docs/test_readme_blocks.py::test_block[README.md:128]@serial",
           "tests/jepsen/test_x.py::test_y",
           "tests/raftlog/test_acl.py::test_z",  # not serial: no group needed
           "tests/docs/test_doc_blocks.py::test_a[user@host]",  # an "@" inside the id only
           "tests/docs/test_doc_blocks.py::test_a[user@host]@serial"]
    assert ungrouped(ids) == ["tests/docs/test_readme_blocks.py::test_block[README.md:214]",
                              "tests/jepsen/test_x.py::test_y",
                              "tests/docs/test_doc_blocks.py::test_a[user@host]"]

