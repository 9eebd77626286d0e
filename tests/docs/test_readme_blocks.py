"""The README runs, as Rust's doc tests: every shell and Python block of README.md and
docs/*.md that a reader is meant to paste runs, in document order, against the node the
README tells them to start (docs/contributing.md, "Blocks that run").

The blocks use the README's literal addresses (127.0.0.1:9092, ...), so this test starts
``raftlog up --kafka-port 19092`` on exactly those ports, in a temporary directory (its
``./raftlog-data``; links to the clone's examples/, bench/, deploy/ and tools/ folders,
as in a fresh clone), and skips, naming them, when any of the ports is taken. Each block
is its own test case named by file and line: a failure shows the block and its output.
Later blocks build on earlier ones (the Python quickstart reads what the CLI quickstart
wrote), so run the module whole.
"""

from __future__ import annotations

import collections
import glob
import os
import signal
import socket
import subprocess
import sys
import threading

import pytest

from .blocks import Block, BlockError, extract, ports_named

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LINKED_FOLDERS = ("examples", "bench", "deploy", "tools")
UP_COMMAND = "raftlog up --kafka-port 19092"
UP_TEXT = "raftlog is up"
UP_PORTS = (9092, 19092)
START_TIMEOUT_S = 120.0  # generous: the machine may be busy
BLOCK_TIMEOUT_S = 600.0  # the Spark blocks start a JVM
STOP_TIMEOUT_S = 60.0
OUTPUT_LINES_MAX = 2000  # kept per background process (a node logs a lot)
SHOWN_LINES = 80


def doc_files() -> list[str]:
    return ["README.md"] + sorted(os.path.relpath(p, REPO)
                                  for p in glob.glob(os.path.join(REPO, "docs", "*.md")))


def all_blocks() -> list[Block]:
    """Every block of the README and docs/, in the order they run."""
    out = []
    for rel in doc_files():
        with open(os.path.join(REPO, rel), encoding="utf-8") as f:
            out += extract(rel, f.read())
    return out


def _params():
    try:
        blocks = all_blocks()
    except BlockError as e:  # reported by the one case, and by test_doc_blocks.py
        return [pytest.param(None, str(e), id="extract")]
    return [pytest.param(b, "", id=b.where) for b in blocks
            if b.action in ("run", "background")]


def _free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


class Background:
    """A shell command in its own process group, its output collected by a thread."""

    def __init__(self, command: str, cwd: str, env: dict, where: str):
        self.where, self.command = where, command
        self.lines: collections.deque[str] = collections.deque(maxlen=OUTPUT_LINES_MAX)
        self._wanted = ""
        self._found = False
        self._seen = threading.Event()
        self.proc = subprocess.Popen(["bash", "-c", command], cwd=cwd, env=env,
                                     stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, start_new_session=True,
                                     text=True, errors="replace")
        self._reader = threading.Thread(target=self._read, daemon=True)

    def wait_for_text(self, text: str, timeout_s: float) -> None:
        self._wanted = text
        self._reader.start()
        if not (self._seen.wait(timeout_s) and self._found):
            self.proc.poll()
            state = (f"exited with status {self.proc.returncode}"
                     if self.proc.poll() is not None else f"no {text!r} after {timeout_s:g} s")
            pytest.fail(f"{self.where}: `{self.command.strip()}` {state}\n{self.output()}")

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.append(line)
            if self._wanted in line:
                self._found = True
                self._seen.set()
        self._seen.set()  # ended: wait_for_text sees _found is False

    def output(self) -> str:
        return "".join(list(self.lines)[-SHOWN_LINES:])

    def stop(self) -> str | None:
        """SIGINT (Ctrl-C) to the group; what went wrong, or None when it exited 0."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGINT)
        try:
            rc = self.proc.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            return f"{self.where}: `{self.command.strip()}` did not stop within " \
                   f"{STOP_TIMEOUT_S:g} s of Ctrl-C\n{self.output()}"
        self._reader.join(10)
        if rc != 0:
            return f"{self.where}: `{self.command.strip()}` exited with {rc} on Ctrl-C\n" \
                   f"{self.output()}"
        return None


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    """The working directory and environment the blocks run in, with the README's node."""
    try:
        ports = ports_named(all_blocks()) | set(UP_PORTS)
    except BlockError:
        ports = set(UP_PORTS)
    busy = sorted(p for p in ports if not _free(p))
    if busy:
        pytest.skip(f"port(s) {busy} of 127.0.0.1 are in use: the README's blocks use these "
                    f"literal ports; stop what holds them (a `raftlog up`?) to run them")
    work = str(tmp_path_factory.mktemp("readme"))
    for name in LINKED_FOLDERS:
        os.symlink(os.path.join(REPO, name), os.path.join(work, name))
    os.makedirs(os.path.join(work, ".blocks"))
    os.makedirs(os.path.join(work, "home"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAFTLOG_")}
    env.update(PATH=os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", ""),
               HOME=os.path.join(work, "home"), PYTHONUNBUFFERED="1")
    state = {"work": work, "env": env, "background": []}
    up = Background(UP_COMMAND, work, env, "the README test's node")
    state["background"].append(up)
    try:
        up.wait_for_text(UP_TEXT, START_TIMEOUT_S)
        yield state
    finally:
        problems = [p for bg in reversed(state["background"]) if (p := bg.stop())]
    assert not problems, "\n".join(problems)


def _run(block: Block, state: dict) -> None:
    name = os.path.join(state["work"], ".blocks",
                        f"{block.path.replace('/', '_')}_{block.line}"
                        f"{'.py' if block.lang == 'python' else '.sh'}")
    with open(name, "w", encoding="utf-8") as f:
        f.write(block.text)
    argv = ([sys.executable, name] if block.lang == "python"
            else ["bash", "-e", "-u", "-o", "pipefail", name])
    try:
        r = subprocess.run(argv, cwd=state["work"], env=state["env"], stdin=subprocess.DEVNULL,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           errors="replace", timeout=BLOCK_TIMEOUT_S)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"{block.where}: the ```{block.info} block did not end within "
                    f"{BLOCK_TIMEOUT_S:g} s\n--- block ---\n{block.text}--- output ---\n"
                    f"{(e.output or '')[-8000:]}")
    if r.returncode != 0:
        shown = "\n".join(r.stdout.splitlines()[-SHOWN_LINES:])
        pytest.fail(f"{block.where}: the ```{block.info} block failed (exit status "
                    f"{r.returncode})\n--- block ---\n{block.text}--- output (end) ---\n{shown}")


@pytest.mark.slow
@pytest.mark.timeout(BLOCK_TIMEOUT_S + 300)
@pytest.mark.parametrize(("block", "error"), _params())
def test_block(session, block: Block | None, error: str):
    if block is None:
        pytest.fail(error)
    if block.action == "background":
        bg = Background(block.text, session["work"], session["env"], block.where)
        session["background"].append(bg)
        bg.wait_for_text(block.arg, START_TIMEOUT_S)
    else:
        _run(block, session)
