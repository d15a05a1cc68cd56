"""A kept-open SSH connection per node with one long-lived shell fed commands on stdin.

A fresh SSH exec costs ~200 ms on lab nodes (sshd runs the command through root's login shell);
one ``/bin/sh`` kept running on a paramiko channel answers in a few ms. Each command is written
as one block followed by a sentinel line carrying its exit status on stdout and a second sentinel
on stderr; the reader takes everything up to them. Host keys are checked against the node's
known_hosts file (RejectPolicy); connect and every command have timeouts; argv lists cross the
shell through shlex.join only.
"""

from __future__ import annotations

import base64
import re
import secrets
import select
import shlex
import threading
import time
from pathlib import Path

import paramiko

from orchestrator.errors import RemoteError
from orchestrator.models.cluster import Node
from orchestrator.remote.base import CmdResult

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def env_prefix(env: dict[str, str] | None) -> list[str]:
    """``env K=V …`` as argv words; raises RemoteError on a name that is not a variable name."""
    if not env:
        return []
    for name in env:
        if not _ENV_NAME.fullmatch(name):
            raise RemoteError(f"environment variable name {name!r} is not valid")
    return ["env", *(f"{k}={v}" for k, v in env.items())]


class SshShell:
    """One node: a paramiko client, and one ``/bin/sh`` on one channel, serialised by a lock."""

    def __init__(
        self,
        node: Node,
        *,
        connect_timeout: float = 10.0,
        known_hosts: Path | None = None,
    ) -> None:
        self.node = node
        self.connect_timeout = connect_timeout
        self.known_hosts = known_hosts or node.known_hosts_file
        self._client: paramiko.SSHClient | None = None
        self._chan: paramiko.Channel | None = None
        self._lock = threading.Lock()
        self._token = "__ORCH_" + secrets.token_hex(8)
        self._ssh_iface: str | None = None
        self._server_address: str | None = None

    # --- connection -------------------------------------------------------------------------
    def connect(self) -> None:
        """Open the connection and the shell; raises RemoteError (unreachable, host key, auth)."""
        if self._chan is not None and not self._chan.closed:
            return
        if self._client is None or not self._transport_alive():
            self._client = self._open_client()
        try:
            chan = self._client.get_transport().open_session(timeout=self.connect_timeout)  # type: ignore[union-attr]
            chan.exec_command("exec env LC_ALL=C /bin/sh")
        except (paramiko.SSHException, OSError) as e:
            raise RemoteError(f"{self.node.name}: cannot start a shell: {e}") from e
        self._chan = chan
        # The shell answers once it is ready; this also measures nothing heavy later.
        res = self._exchange('printf %s "$SSH_CONNECTION"', timeout=self.connect_timeout)
        parts = res.stdout.split()
        self._server_address = parts[2] if len(parts) >= 3 else None

    def _transport_alive(self) -> bool:
        t = self._client.get_transport() if self._client else None
        return bool(t and t.is_active())

    def _open_client(self) -> paramiko.SSHClient:
        if self.known_hosts is None:
            raise RemoteError(
                f"{self.node.name}: no known_hosts file",
                hint="set -o UserKnownHostsFile=... in ansible_ssh_common_args; host keys are always checked",
            )
        client = paramiko.SSHClient()
        try:
            client.load_host_keys(str(self.known_hosts))
        except OSError as e:
            raise RemoteError(f"{self.node.name}: cannot read known_hosts {self.known_hosts}: {e}") from e
        client.set_missing_host_key_policy(paramiko.RejectPolicy())
        key = str(self.node.ssh_private_key_file) if self.node.ssh_private_key_file else None
        try:
            client.connect(
                hostname=self.node.address,
                port=self.node.port,
                username=self.node.user or "root",
                key_filename=key,
                timeout=self.connect_timeout,
                banner_timeout=self.connect_timeout,
                auth_timeout=self.connect_timeout,
                allow_agent=False,
                look_for_keys=key is None,
            )
        except paramiko.BadHostKeyException as e:
            raise RemoteError(f"{self.node.name}: host key does not match {self.known_hosts}") from e
        except paramiko.SSHException as e:
            raise RemoteError(
                f"{self.node.name}: SSH refused: {e}", hint=f"is the host key in {self.known_hosts}?"
            ) from e
        except OSError as e:
            where = f"{self.node.address}:{self.node.port}"
            raise RemoteError(f"{self.node.name}: cannot connect to {where}: {e}") from e
        transport = client.get_transport()
        if transport is not None:
            transport.set_keepalive(5)
        return client

    def close(self) -> None:
        """Close the shell and the connection; never raises."""
        if self._chan is not None:
            self._chan.close()
        if self._client is not None:
            self._client.close()
        self._chan = None
        self._client = None

    # --- commands ---------------------------------------------------------------------------
    def run(
        self,
        argv: list[str],
        *,
        timeout: float,
        env: dict[str, str] | None = None,
        input_text: str | None = None,
    ) -> CmdResult:
        """Run argv (quoted with shlex.join) in the node's shell; never raises on non-zero exit.

        Raises:
            RemoteError: no connection, or no answer within ``timeout`` (the shell is then replaced).
        """
        line = shlex.join([*env_prefix(env), *argv])
        if input_text is not None:
            data = base64.b64encode(input_text.encode()).decode()
            line = f"printf %s {data} | base64 -d | {line}"
        res = self.run_script(line, timeout=timeout)
        return res.model_copy(update={"argv": list(argv)})

    def run_script(self, script: str, *, timeout: float) -> CmdResult:
        """Run a shell line that the caller built from shlex-quoted parts only.

        Raises:
            RemoteError: as for run().
        """
        with self._lock:
            self.connect()
            return self._exchange(script, timeout=timeout)

    def _exchange(self, script: str, *, timeout: float) -> CmdResult:
        chan = self._chan
        assert chan is not None
        tok = self._token
        block = (
            f"{{ {script}\n}} </dev/null; __orch_rc=$?; printf '\\n{tok} %d\\n' \"$__orch_rc\"; "
            f"printf '\\n{tok}\\n' >&2\n"
        )
        start = time.monotonic()
        deadline = start + timeout
        out = bytearray()
        err = bytearray()
        out_end = re.compile(rb"\n" + tok.encode() + rb" (\d+)\n")
        err_end = b"\n" + tok.encode() + b"\n"
        try:
            chan.sendall(block.encode())
            m = None
            while True:
                while chan.recv_ready():
                    out += chan.recv(65536)
                while chan.recv_stderr_ready():
                    err += chan.recv_stderr(65536)
                if m is None:
                    m = out_end.search(out)
                if m is not None and err.endswith(err_end):
                    break
                if chan.exit_status_ready() and not chan.recv_ready():
                    raise RemoteError(f"{self.node.name}: the remote shell exited")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError
                select.select([chan], [], [], min(left, 0.5))
        except TimeoutError:
            self._reset()
            raise RemoteError(
                f"{self.node.name}: no answer within {timeout:g} s to `{script[:120]}`"
            ) from None
        except (paramiko.SSHException, OSError, EOFError) as e:
            self._reset()
            raise RemoteError(f"{self.node.name}: connection lost: {e}") from e
        except RemoteError:
            self._reset()
            raise
        elapsed = time.monotonic() - start
        stdout = bytes(out[: m.start()])
        stderr = bytes(err[: -len(err_end)])
        return CmdResult(
            argv=["sh", "-c", script],
            rc=int(m.group(1)),
            stdout=stdout.decode(errors="replace"),
            stderr=stderr.decode(errors="replace"),
            elapsed_s=elapsed,
        )

    def _reset(self) -> None:
        # A command that timed out leaves the shell busy: drop it, the next call opens a new one.
        if self._chan is not None:
            self._chan.close()
        self._chan = None

    # --- facts ------------------------------------------------------------------------------
    def ssh_iface(self) -> str | None:
        """The node's interface that carries this SSH connection (never a fault target).

        Raises RemoteError when the node cannot be asked.
        """
        if self._ssh_iface is None:
            self.connect()
            if not self._server_address:
                return None
            res = self.run(["ip", "-o", "addr", "show"], timeout=10)
            self._ssh_iface = iface_of_address(res.stdout, self._server_address)
        return self._ssh_iface


def iface_of_address(ip_o_addr: str, address: str) -> str | None:
    """The interface that holds ``address`` in ``ip -o addr show`` output, or None."""
    for line in ip_o_addr.splitlines():
        fields = line.split()
        if len(fields) >= 4 and fields[2] in ("inet", "inet6") and fields[3].split("/")[0] == address:
            return fields[1].split("@")[0]
    return None
