"""The block extractor of the README test, without nodes: every fenced block of README.md
and docs/*.md is run or marked, and the rules of docs/contributing.md hold."""

from __future__ import annotations

import re

import pytest

from .blocks import BlockError, extract, ports_named
from .test_readme_blocks import all_blocks


def test_every_block_of_the_readme_and_docs_is_run_or_marked():
    blocks = all_blocks()  # raises BlockError naming file:line for an unmarked fence
    assert {b.action for b in blocks} <= {"run", "background", "norun", "data"}
    for b in blocks:
        assert b.lang in ("shell", "python", "data"), b
        assert (b.lang == "data") == (b.action == "data"), b
        if b.action == "norun":
            assert len(b.arg) >= 10, f"{b.where}: say why it does not run"
    run = [b for b in blocks if b.action == "run"]
    assert any(b.lang == "shell" for b in run) and any(b.lang == "python" for b in run)


def test_runnable_blocks_end_by_themselves():
    """A block the test runs in the foreground must terminate: no endless loop, and no
    `raftlog up` (which runs until Ctrl-C) unless it is a background block."""
    for b in all_blocks():
        if b.action != "run":
            continue
        code = "\n".join(re.sub(r"#.*", "", line) for line in b.text.splitlines())
        assert not re.search(r"while\s+True\s*:", code), \
            f"{b.where}: `while True:` never ends: bound the loop or mark the block"
        assert not re.search(r"(^|[;&|]\s*)raftlog\s+(up|node)\b", code, re.M), \
            f"{b.where}: `raftlog up/node` runs until Ctrl-C: mark it <!-- background: ... -->"
        assert not re.search(r"-m\s+pytest|\bpytest\b", code), \
            f"{b.where}: the test suite would run itself: mark it <!-- norun: ... -->"


def test_the_python_quickstart_runs_after_the_cli_quickstart():
    run = [b for b in all_blocks() if b.path == "README.md" and b.action == "run"]
    cli = next(i for i, b in enumerate(run) if "raftlog topics create events" in b.text)
    py = next(i for i, b in enumerate(run) if "from raftlog.client import Admin, Consumer" in b.text)
    assert run[cli].lang == "shell" and run[py].lang == "python"
    assert cli < py


def test_the_security_section_makes_certificates_and_starts_a_sasl_ssl_node():
    blocks = [b for b in all_blocks() if b.path == "README.md"]
    tls = next(b for b in blocks if "raftlog tls init" in b.text)
    up = next(b for b in blocks if "raftlog up --security" in b.text)
    assert tls.action == "run" and up.action == "background" and up.arg == "raftlog is up"
    after = blocks[blocks.index(up) + 1:]
    assert any(b.action == "run" and "--command-config" in b.text for b in after)


# ---------------------------------------------------------------------- the extractor


def test_blocks_carry_their_line_language_and_marker():
    md = "\n".join([
        "# T",  # 1
        "```bash",  # 2
        "echo hi",
        "```",
        "<!-- norun: needs a cluster of five -->",  # 5
        "```python",  # 6
        "import x",
        "```",
        "<!-- background: raftlog is up -->",
        "```sh",  # 10
        "raftlog up",
        "```",
        "```text",  # 13
        "$ output",
        "```",
        "  ```py",  # 16: indented (in a list item)
        "  print(1)",
        "  ```",
    ])
    got = [(b.line, b.lang, b.action, b.arg, b.text) for b in extract("X.md", md)]
    assert got == [
        (2, "shell", "run", "", "echo hi\n"),
        (6, "python", "norun", "needs a cluster of five", "import x\n"),
        (10, "shell", "background", "raftlog is up", "raftlog up\n"),
        (13, "data", "data", "", "$ output\n"),
        (16, "python", "run", "", "print(1)\n"),
    ]
    assert extract("X.md", md)[0].where == "X.md:2"


def test_longer_fences_hold_shorter_ones():
    md = "````text\n```bash\nnot a block\n```\n````\n"
    [b] = extract("X.md", md)
    assert (b.lang, b.text) == ("data", "```bash\nnot a block\n```\n")


@pytest.mark.parametrize(("md", "where", "says"), [
    ("a\n```\nx\n```\n", "X.md:2", "a fence without a language"),
    ("```rust\nfn main() {}\n```\n", "X.md:1", "'rust' is not one"),
    ("<!-- norun: -->\n```bash\nx\n```\n", "X.md:1", "needs its reason"),
    ("<!-- norun -->\n```bash\nx\n```\n", "X.md:1", "malformed marker"),
    ("<!-- norun: why -->\n\n```bash\nx\n```\n", "X.md:1", "right before the fence"),
    ("<!-- norun: why -->\n```text\nx\n```\n", "X.md:1", "never runs"),
    ("text\n<!-- background: up -->\n", "X.md:2", "followed by no fence"),
    ("```bash\nx\n", "X.md:1", "not closed"),
])
def test_unclassifiable_blocks_are_errors_naming_file_and_line(md, where, says):
    with pytest.raises(BlockError) as e:
        extract("X.md", md)
    assert str(e.value).startswith(where + ":") and says in str(e.value), str(e.value)


def test_other_html_comments_are_not_markers():
    [b] = extract("X.md", "<!-- a note: not a marker -->\n```bash\necho\n```\n")
    assert b.action == "run"


def test_ports_named_by_runnable_blocks():
    md = "\n".join([
        "```bash",
        "raftlog topics list --bootstrap-server 127.0.0.1:9192   # not 127.0.0.1:1",
        "```",
        "<!-- background: up -->",
        "```bash",
        "raftlog up --nodes 3 --port 9300 --kafka-port 19300",
        "```",
        "<!-- norun: elsewhere -->",
        "```bash",
        "raftlog up --port 5555",
        "```",
        "```python",
        'Producer("localhost:9500")',
        "```",
    ])
    assert ports_named(extract("X.md", md)) == {
        9192, 9300, 9301, 9302, 9400, 9401, 9402, 19300, 19301, 19302, 9500}
