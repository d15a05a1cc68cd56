"""Which environment variables orch may record or hand on: one allow-list for every place.

An environment holds secrets next to settings (HF_TOKEN, AWS_SECRET_ACCESS_KEY, a registry
password, NCCL_SOME_TOKEN). Wherever orch writes an environment down (heartbeat files, run
records, the journal, ansible-runner's artifacts), it records the value of a variable only when
the variable is on this allow-list, and the name alone for the rest. Names are kept: they are
enough to debug "was it set?", and a name is not a secret.

The allow-list is a set of prefixes of transport and runtime settings (NCCL_*, GLOO_*, TORCH_* …)
plus a few exact names, minus every name that looks like it holds a credential (see
looks_secret): NCCL_SOME_TOKEN is recorded by name only. Pure functions, no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from urllib.parse import urlsplit

MASK = "********"

# Settings whose values describe how a job runs: what a reader needs to reproduce a number.
RECORDABLE_PREFIXES = (
    "NCCL_",
    "RCCL_",
    "GLOO_",
    "TORCH_",
    "TORCHELASTIC_",
    "OMP_",
    "CUDA_",
    "HIP_",
    "HSA_",
    "ROCR_",
    "UCX_",
    "FI_",
    "SLURM_",
)
RECORDABLE_NAMES = frozenset(
    {"MASTER_ADDR", "MASTER_PORT", "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "ORCH_NODE"}
)

# THE list of secret-name patterns (docs/reliability.md names it): a name holds (or may hold) a
# credential, whatever its prefix, when it contains one of the strong words anywhere (GITHUBTOKEN,
# DB_PASSPHRASE), or one of the weak words as a whole _-separated part (HF_API_KEY, API_JWT,
# AZURE_SAS, but not MONKEY). Names that end in a word for a path or a switch (…_FILE, …_DIR,
# SSH_AUTH_SOCK, ANSIBLE_HOST_KEY_CHECKING) name no credential themselves.
SECRET_STRONG_WORDS = (
    "TOKEN",
    "SECRET",
    "PASSW",
    "PASSPHRASE",
    "CRED",
    "COOKIE",
    "APIKEY",
    "PRIVATE",
    "BEARER",
)
SECRET_WEAK_WORDS = frozenset(
    {"KEY", "PASS", "PWD", "AUTH", "SESSION", "CERT", "SIGNATURE", "SIG", "PIN", "JWT", "SAS", "DSN"}
)
_STRONG = re.compile("|".join(SECRET_STRONG_WORDS), re.IGNORECASE)
_NOT_A_VALUE = frozenset({"FILE", "PATH", "DIR", "SOCK", "CHECKING"})


def looks_secret(name: str) -> bool:
    """True when a variable's name suggests its value is a credential (paths to one excepted)."""
    parts = name.upper().split("_")
    if parts[-1] in _NOT_A_VALUE:
        return False
    return bool(_STRONG.search(name)) or any(p in SECRET_WEAK_WORDS for p in parts)


def value_is_secret(value: str) -> bool:
    """True when a value is a credential whatever its name: a URL that carries a password
    (postgres://u:pw@h/db, https://u:pw@host). Raises nothing."""
    if "://" not in value or "@" not in value:
        return False
    try:
        return urlsplit(value.strip()).password is not None
    except ValueError:  # a malformed URL with user info: treated as one
        return True


def recordable(name: str) -> bool:
    """True when orch may write this variable's value down (the allow-list)."""
    if looks_secret(name):
        return False
    return name in RECORDABLE_NAMES or name.startswith(RECORDABLE_PREFIXES)


def record_env(env: Mapping[str, str], prefixes: Iterable[str] | None = None) -> dict[str, str]:
    """`env` as orch records it: allow-listed values, MASK for every other value (names stay).

    With `prefixes`, only variables whose name starts with one of them are taken.
    """
    wanted = tuple(prefixes) if prefixes is not None else None
    return {
        k: (v if recordable(k) and not value_is_secret(v) else MASK)
        for k, v in sorted(env.items())
        if wanted is None or k.startswith(wanted)
    }


# What Ansible (ansible-playbook and the ssh it starts) needs from orch's own environment. Every
# other variable of orch's process stays out of Ansible's environment, and so out of the
# `command` file ansible-runner writes when it starts.
TOOL_NAMES = frozenset(
    {
        "PATH",
        "HOME",
        "USER",
        "LOGNAME",
        "SHELL",
        "TERM",
        "TZ",
        "TMPDIR",
        "LANG",
        "LANGUAGE",
        "SSH_AUTH_SOCK",
        "SSH_AGENT_PID",
        "KRB5CCNAME",
        "VIRTUAL_ENV",
        "XDG_RUNTIME_DIR",
    }
)
TOOL_PREFIXES = ("LC_", "ANSIBLE_")


def tool_env(env: Mapping[str, str]) -> dict[str, str]:
    """The part of `env` that may be handed to Ansible: TOOL_NAMES, LC_*, ANSIBLE_* (no secrets).

    An ANSIBLE_* variable whose name looks like a credential (ANSIBLE_NET_PASSWORD …) is left
    out too: Ansible's secrets come from vault files and prompts, which orch passes in memory.
    """
    return {
        k: v
        for k, v in env.items()
        if (k in TOOL_NAMES or k.startswith(TOOL_PREFIXES)) and not looks_secret(k) and not value_is_secret(v)
    }
