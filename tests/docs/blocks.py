"""The fenced code blocks of the README and docs/*.md, and what the README test does with
each (docs/contributing.md, "Blocks that run"). Pure: text in, blocks out.

Every fence must say what it holds:

- ``bash`` / ``sh`` / ``shell``: run by bash (``set -euo pipefail``), in document order;
- ``python`` / ``py``: run by the tests' Python, each block in a fresh process;
- ``text``, ``ini``, ``properties``, ``json``, ``yaml``, ``toml``, ``output``: data shown to
  the reader (file contents, program output, diagrams), never run;

and a marker on the line right before a shell or Python fence changes what happens to it:

- ``<!-- norun: REASON -->``: not run; the reason is required (why, and what tests it
  instead);
- ``<!-- background: TEXT -->``: started in the background (a long-running command such as
  ``raftlog up``); the next blocks run once TEXT appears in its output, and it is stopped
  with SIGINT after the last block and must then exit 0.

A fence without a language, with another language, a marker before a data fence, a marker
followed by no fence, or a fence never closed is a :class:`BlockError` naming file and
line, so no block can be added without saying whether it runs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

SHELL_LANGS = frozenset({"bash", "sh", "shell"})
PYTHON_LANGS = frozenset({"python", "py"})
DATA_LANGS = frozenset({"text", "ini", "properties", "json", "yaml", "toml", "output"})
MARKERS = ("norun", "background")
BLOCK_LINES_MAX = 400  # a block longer than this is surely an unclosed fence

_FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,})\s*(?P<info>[^`]*?)\s*$")
_MARKER = re.compile(r"^\s*<!--\s*(?P<kind>[a-z-]+)\s*:\s*(?P<arg>.*?)\s*-->\s*$")
_MARKER_LIKE = re.compile(r"^\s*<!--\s*(norun|background|run|skip)\b")


class BlockError(ValueError):
    """A fence or marker the README test cannot classify; the message names file:line."""


@dataclass(frozen=True)
class Block:
    """One fenced block. ``line`` is the 1-based line of its opening fence."""

    path: str
    line: int
    lang: str  # "shell", "python" or "data"
    info: str  # the fence's info string as written
    text: str
    action: str  # "run", "background", "norun" or "data"
    arg: str = ""  # norun: the reason; background: the text to wait for

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"


def _lang(info: str, where: str) -> str:
    word = info.split()[0].lower() if info.split() else ""
    if word in SHELL_LANGS:
        return "shell"
    if word in PYTHON_LANGS:
        return "python"
    if word in DATA_LANGS:
        return "data"
    if not word:
        raise BlockError(f"{where}: a fence without a language: write ```bash or ```python "
                         f"(run by the README test unless marked <!-- norun: reason -->), or "
                         f"```text for output, diagrams and other data")
    raise BlockError(f"{where}: fence language {word!r} is not one the README test knows: "
                     f"use one of {sorted(SHELL_LANGS | PYTHON_LANGS | DATA_LANGS)}")


def _marker(line: str, where: str) -> tuple[str, str] | None:
    m = _MARKER.match(line)
    if m is None:
        if _MARKER_LIKE.match(line):
            raise BlockError(f"{where}: a malformed marker {line.strip()!r}: write "
                             f"<!-- norun: reason --> or <!-- background: text to wait for -->")
        return None
    kind, arg = m["kind"], m["arg"]
    if kind not in MARKERS:
        return None  # another HTML comment
    if not arg:
        raise BlockError(f"{where}: <!-- {kind}: ... --> needs its "
                         f"{'reason' if kind == 'norun' else 'text to wait for'}")
    return kind, arg


def extract(path: str, text: str) -> list[Block]:
    """The blocks of one markdown file, in order.

    Raises:
        BlockError: see the module docstring.
    """
    lines = text.splitlines()
    blocks: list[Block] = []
    pending: tuple[str, str, int] | None = None  # a marker waiting for its fence
    i = 0
    while i < len(lines):
        where = f"{path}:{i + 1}"
        fence = _FENCE.match(lines[i])
        marker = None if fence else _marker(lines[i], where)
        if marker is not None:
            pending = (*marker, i + 1)
            i += 1
            continue
        if pending is not None and fence is None:
            raise BlockError(f"{path}:{pending[2]}: <!-- {pending[0]}: ... --> must be on the "
                             f"line right before the fence it marks")
        if fence is None:
            i += 1
            continue
        lang = _lang(fence["info"], where)
        end = _closing(lines, i, fence["fence"], where)
        body = "\n".join(line[len(fence["indent"]):] if line.startswith(fence["indent"])
                         else line for line in lines[i + 1:end])
        action, arg = ("data", "") if lang == "data" else ("run", "")
        if pending is not None:
            if lang == "data":
                raise BlockError(f"{path}:{pending[2]}: <!-- {pending[0]}: ... --> marks a "
                                 f"```{fence['info']} block, which never runs: remove it")
            action, arg = pending[0], pending[1]
            pending = None
        blocks.append(Block(path, i + 1, lang, fence["info"], body + "\n", action, arg))
        i = end + 1
    if pending is not None:
        raise BlockError(f"{path}:{pending[2]}: <!-- {pending[0]}: ... --> is followed by no "
                         f"fence")
    return blocks


def _closing(lines: list[str], start: int, fence: str, where: str) -> int:
    """Index of the line closing the fence opened at ``start``."""
    for j in range(start + 1, min(len(lines), start + 1 + BLOCK_LINES_MAX)):
        m = _FENCE.match(lines[j])
        if m and m["fence"][0] == fence[0] and len(m["fence"]) >= len(fence) and not m["info"]:
            return j
    raise BlockError(f"{where}: the fence opened here is not closed within "
                     f"{BLOCK_LINES_MAX} lines")


def ports_named(blocks: list[Block]) -> set[int]:
    """TCP ports the runnable blocks use on this machine: ``127.0.0.1:P``, ``--port P``
    (with ``--nodes N``: P..P+N-1 and the Raft ports P+100..) and ``--kafka-port P``."""
    ports: set[int] = set()
    for b in blocks:
        if b.action not in ("run", "background"):
            continue
        for line in b.text.splitlines():
            if b.lang == "shell":
                line = re.sub(r"(^|\s)#.*", "", line)  # a comment names no port in use
            ports.update(int(p) for p in re.findall(r"(?:127\.0\.0\.1|localhost):(\d+)", line))
            nodes = int(m[1]) if (m := re.search(r"--nodes[ =](\d+)", line)) else 1
            for flag, extra in (("--port", 100), ("--kafka-port", None)):
                if m := re.search(rf"{flag}[ =](\d+)", line):
                    base = int(m[1])
                    ports.update(range(base, base + nodes))
                    if extra and nodes > 1:
                        ports.update(range(base + extra, base + extra + nodes))
    return ports
