"""Property tests of the interface-name and host-name validators in orchestrator.models.cluster."""

from __future__ import annotations

import re
import shlex
import string

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from orchestrator.inventory import RawHost, build_node
from orchestrator.models.cluster import IFNAME_MAX, Node, host_name_problem, interface_name_problem

IFNAME_SAFE = string.ascii_letters + string.digits + "_-."
valid_ifnames = st.text(alphabet=IFNAME_SAFE, min_size=1, max_size=IFNAME_MAX).filter(
    lambda s: s not in (".", "..") and not s.startswith("-")
)
host_names = st.from_regex(r"[A-Za-z0-9_][A-Za-z0-9._:%-]{0,62}", fullmatch=True)


@given(valid_ifnames)
def test_linux_valid_interface_names_accepted(name: str) -> None:
    assert interface_name_problem(name) is None


@given(st.text(min_size=IFNAME_MAX + 1))
def test_long_interface_names_refused(name: str) -> None:
    assert interface_name_problem(name) is not None


@given(st.text(max_size=7), st.sampled_from(["/", ":", " ", "\t", "\n"]), st.text(max_size=7))
def test_interface_names_with_slash_colon_or_space_refused(head: str, bad: str, tail: str) -> None:
    assert interface_name_problem(head + bad + tail) is not None


@given(st.text(max_size=20))
def test_interface_verdict_is_the_allow_list(name: str) -> None:
    """issue 25: an allow-list, [A-Za-z0-9_.-]{1,15}, not '.'/'..', no leading '-'; the kernel's
    own rule (dev_valid_name) admitted `$(id)`."""
    ok = (
        re.fullmatch(r"[A-Za-z0-9_.-]{1,15}", name) is not None
        and name not in (".", "..")
        and not name.startswith("-")
    )
    assert (interface_name_problem(name) is None) == ok


@pytest.mark.parametrize(
    "name", ["$(id)", "`id`", "eth0;id", "a$b", "eth(0)", "eth0\n", "\uff45\uff54\uff480", "-eth0"]
)
def test_rdma_ifaces_with_shell_characters_are_refused(name: str) -> None:
    problems: list[str] = []
    assert build_node(RawHost(name="n1", groups=[], vars={"rdma_ifaces": [name]}), problems) is None
    assert problems and "rdma_ifaces" in problems[0]


@given(host_names)
def test_safe_host_names_accepted_and_need_no_shell_quoting(name: str) -> None:
    assert host_name_problem(name) is None
    assert shlex.quote(name) == name


@given(st.text(max_size=30))
def test_accepted_host_names_never_need_quoting_nor_look_like_options(name: str) -> None:
    if host_name_problem(name) is None:
        assert shlex.quote(name) == name
        assert not name.startswith("-")


@given(st.text(max_size=10), st.sampled_from(list(";|&$`'\"<>()*?[]{}~!#\\ \n")), st.text(max_size=10))
def test_shell_metacharacters_refused(head: str, bad: str, tail: str) -> None:
    assert host_name_problem(head + bad + tail) is not None


@given(st.text(max_size=20))
def test_leading_dash_refused(rest: str) -> None:
    assert host_name_problem("-" + rest) is not None


@given(st.text(max_size=20).filter(lambda s: interface_name_problem(s) is not None))
def test_bad_rdma_iface_reported_with_host_and_variable(name: str) -> None:
    problems: list[str] = []
    assert build_node(RawHost(name="n1", groups=[], vars={"rdma_ifaces": [name]}), problems) is None
    assert problems and all("host n1" in p and "rdma_ifaces" in p for p in problems)


def test_node_model_repeats_the_checks() -> None:
    with pytest.raises(ValidationError):
        Node(name="n1", address="a;b")
    with pytest.raises(ValidationError):
        Node(name="n1", address="n1", mgmt_iface="eth/0")
    with pytest.raises(ValidationError):
        Node(name="n1", address="n1", gpus_per_node=0)
    assert Node(name="n1", address="n1", groups=["b", "a"]).groups == ["a", "b"]
