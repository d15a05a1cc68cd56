"""The kept-open shell's framing, against a local /bin/sh standing in for the paramiko channel."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from orchestrator.errors import RemoteError
from orchestrator.models.cluster import Node
from orchestrator.remote.ssh import SshShell, env_prefix, iface_of_address


class PipeChannel:
    """The parts of paramiko.Channel that SshShell uses, over a local sh."""

    def __init__(self) -> None:
        self.p = subprocess.Popen(["/bin/sh"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE)
        self.closed = False
        import os
        os.set_blocking(self.p.stdout.fileno(), False)  # type: ignore[union-attr]
        os.set_blocking(self.p.stderr.fileno(), False)  # type: ignore[union-attr]
        self._out = b""
        self._err = b""

    def _pull(self) -> None:
        for name in ("stdout", "stderr"):
            data = getattr(self.p, name).read()
            if data:
                if name == "stdout":
                    self._out += data
                else:
                    self._err += data

    def sendall(self, data: bytes) -> None:
        assert self.p.stdin is not None
        self.p.stdin.write(data)
        self.p.stdin.flush()

    def recv_ready(self) -> bool:
        self._pull()
        return bool(self._out)

    def recv_stderr_ready(self) -> bool:
        self._pull()
        return bool(self._err)

    def recv(self, n: int) -> bytes:
        out, self._out = self._out, b""
        return out

    def recv_stderr(self, n: int) -> bytes:
        err, self._err = self._err, b""
        return err

    def exit_status_ready(self) -> bool:
        return self.p.poll() is not None

    def fileno(self) -> int:
        assert self.p.stdout is not None
        return self.p.stdout.fileno()

    def close(self) -> None:
        self.closed = True
        self.p.kill()
        self.p.wait()


@pytest.fixture
def shell() -> SshShell:
    s = SshShell(Node(name="n1", address="10.0.0.1"), known_hosts=Path("/nonexistent"))
    s._chan = PipeChannel()  # type: ignore[assignment]
    s.connect = lambda: None  # type: ignore[method-assign]
    return s


def test_stdout_stderr_rc_are_framed(shell: SshShell) -> None:
    r = shell.run(["sh", "-c", "printf 'a\\nb'; echo err >&2; exit 3"], timeout=5)
    assert (r.rc, r.stdout, r.stderr) == (3, "a\nb", "err\n")
    assert shell.run(["true"], timeout=5).rc == 0


def test_argv_is_quoted_not_pasted(shell: SshShell) -> None:
    r = shell.run(["echo", "$(id)", "a;b", "'q'"], timeout=5)
    assert r.stdout == "$(id) a;b 'q'\n"


def test_input_and_env(shell: SshShell) -> None:
    assert shell.run(["cat"], timeout=5, input_text="x y\n").stdout == "x y\n"
    assert shell.run(["sh", "-c", "echo $A"], timeout=5, env={"A": "1 2"}).stdout == "1 2\n"
    with pytest.raises(RemoteError):
        env_prefix({"A;B": "x"})


def test_timeout_raises_and_drops_the_shell(shell: SshShell) -> None:
    with pytest.raises(RemoteError, match="no answer"):
        shell.run(["sleep", "5"], timeout=0.3)
    assert shell._chan is None


def test_missing_known_hosts_is_refused() -> None:
    with pytest.raises(RemoteError, match="known_hosts"):
        SshShell(Node(name="n1", address="10.0.0.1")).connect()


def test_iface_of_address() -> None:
    text = "1: lo    inet 127.0.0.1/8 scope host lo\n2: mgmt0@if5    inet 198.18.0.12/24 brd x\n"
    assert iface_of_address(text, "198.18.0.12") == "mgmt0"
    assert iface_of_address(text, "1.2.3.4") is None
