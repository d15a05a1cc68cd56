"""Passive health (`orch health`): each source's parser on published outputs (tests/fixtures/health/,
each naming its source), the sample line run on planted per-node files, the drain cap through a
scripted Slurm, and the start-up discipline of `orch health --local`."""

from __future__ import annotations

from pathlib import Path

import pytest
from fakes import ScriptedRunner
from test_cli_startup import _heavy, _run

from orchestrator.errors import InventoryError
from orchestrator.health import sample
from orchestrator.health.sample import (
    aer_counts,
    aer_findings,
    gpu_findings,
    kernel_findings,
    netdev_findings,
    parse_sample,
    ras_findings,
    rdma_findings,
)
from orchestrator.inventory import load_inventory
from orchestrator.models.health import HealthReport, HealthSources, NodeHealth
from orchestrator.remote.local import LocalShell
from orchestrator.runs.health import check_here, drain_fatal, health_report, sample_node, sources_of
from orchestrator.scheduler.slurm import SlurmScheduler
from orchestrator.telemetry.smi import parse_nvidia_query

FIX = Path(__file__).resolve().parents[1] / "fixtures"
HEALTH = FIX / "health"


def _body(name: str) -> str:
    """A fixture without its source line: the text as the kernel or the tool printed it."""
    return "\n".join((HEALTH / name).read_text().splitlines()[1:]) + "\n"


def test_every_fixture_names_its_source() -> None:
    for f in HEALTH.iterdir():
        assert f.read_text().startswith("# source: https://"), f.name


def test_xids_of_a_dmesg_ctime_log_keep_their_codes_devices_and_repeats() -> None:
    found = {
        (f.kind, f.device, f.severity, f.count)
        for f in kernel_findings("n1", _body("xid-dmesg-ctime-gpud-pr46.txt"))
    }
    # three XID 13 lines (an application's exception: info), one XID 109 (context switch timeout)
    assert found == {("xid", "0000:cb:00", "info", 3), ("xid", "0000:cb:00", "warn", 1)}


def test_xid_lines_of_journalctl_k_are_read_through_their_prefix() -> None:
    found = kernel_findings("n1", _body("xid-journal-k-open-gpu-kernel-modules-1150.txt"))
    assert {f.device: f.count for f in found} == {
        "0000:dc:00": 2,
        "0000:ed:00": 2,
        "0000:ba:00": 2,
        "0000:97:00": 1,
    }
    assert {f.severity for f in found} == {"info"}  # XID 45: preemptive cleanup after another error
    assert all(f.evidence.startswith("kernel: NVRM: Xid") for f in found)


def test_a_gpu_fallen_off_the_bus_is_fatal_with_or_without_an_xid() -> None:
    found = {(f.kind, f.device): f for f in kernel_findings("n1", _body("xid79-off-bus-nvsentinel-155.txt"))}
    assert set(found) == {("gpu_off_bus", "0000:b3:00.0"), ("xid", "0000:44:00")}
    assert {f.severity for f in found.values()} == {"fatal"}
    assert "79, GPU has fallen off the bus" in found["xid", "0000:44:00"].evidence


def test_amdgpu_ras_lines_fatal_when_uncorrectable_a_warning_for_aca_events() -> None:
    found = {(f.device, f.severity) for f in kernel_findings("n1", _body("amdgpu-ras-mi300x-rocm-4021.txt"))}
    assert found == {("0000:1c:00.0", "fatal"), ("0000:42:00.0", "warn"), ("0000:55:00.0", "warn")}
    (mi50,) = kernel_findings("n1", _body("amdgpu-ras-mi50-rocm-1886.txt"))  # "ECC is active": no finding
    assert (mi50.kind, mi50.device, mi50.severity) == ("amdgpu_ras", "0000:e3:00.0", "fatal")
    assert "ERREVENT_ATHUB_INTERRUPT" in mi50.evidence


def test_amdgpu_block_counts_as_the_kernel_prints_them() -> None:
    # amdgpu_ras.c prints "%ld uncorrectable hardware errors detected in %s block" (and correctable)
    text = "amdgpu 0000:05:00.0: amdgpu: 2 correctable hardware errors detected in umc block\n"
    (f,) = kernel_findings("n1", text)
    assert (f.severity, f.count) == ("warn", 2)
    (g,) = kernel_findings("n1", text.replace("2 correctable", "1 uncorrectable"))
    assert g.severity == "fatal"


def test_aer_counters_equal_the_printed_ones() -> None:
    cor = aer_counts(_body("aer_dev_correctable-kernel-doc.txt"))
    assert cor["Receiver Error"] == 2 and cor["TOTAL_ERR_COR"] == 2 and len(cor) == 9
    fatal = aer_counts(_body("aer_dev_fatal-kernel-doc.txt"))
    assert fatal["TOTAL_ERR_FATAL"] == 0 and len(fatal) == 18
    dev = "#file /sys/bus/pci/devices/0000:00:1c.0/"
    text = (
        f"{dev}aer_dev_correctable\n{_body('aer_dev_correctable-kernel-doc.txt')}"
        f"{dev}aer_dev_fatal\n{_body('aer_dev_fatal-kernel-doc.txt')}"
    )
    (f,) = aer_findings("n1", text)  # the fatal file's total is 0: no finding
    assert (f.kind, f.severity, f.device, f.count) == ("pcie_aer_correctable", "info", "0000:00:1c.0", 2)
    assert "Receiver Error 2" in f.evidence


def test_nic_down_is_fatal_only_for_fabric_nics_and_flaps_warn() -> None:
    text = "lo unknown 0\neth0 down 1\nfab0 down 3\nfab1 up 40\n"
    found = {(f.kind, f.device, f.severity) for f in netdev_findings("n1", text, ["fab0", "fab1", "fab2"])}
    assert found == {
        ("nic_down", "fab0", "fatal"),
        ("nic_flaps", "fab1", "warn"),
        ("nic_down", "fab2", "fatal"),  # listed in rdma_ifaces, absent on the node
    }


def test_rdma_ports_down_and_amdgpu_sysfs_counters() -> None:
    up = "state ACTIVE physical_state LINK_UP netdev p1p2"
    text = _body("../smi/rdma-link-cx6dx.txt").replace(up, "state DOWN physical_state DISABLED netdev p1p2")
    (f,) = rdma_findings("n1", text, ["p1p2"])
    assert (f.device, f.severity) == ("mlx5_1/1", "fatal")
    assert rdma_findings("n1", _body("../smi/rdma-link-cx6dx.txt"), ["p1p2"]) == []
    ras = "#file /sys/class/drm/card1/device/ras/umc_err_count\nue: 0\nce: 5\n"
    (r,) = ras_findings("n1", ras)
    assert (r.device, r.severity, r.count) == ("card1", "warn", 5)
    assert ras_findings("n1", ras.replace("ue: 0", "ue: 1"))[0].severity == "fatal"


def test_a_healthy_h100_under_load_has_no_gpu_finding_and_ecc_counts_do() -> None:
    gpus = parse_nvidia_query((FIX / "smi" / "nvidia-smi-query-gpu-h100-load.csv").read_text())
    assert gpus[0].ecc_uncorrected == 0 and gpu_findings("n1", "nvidia-smi", gpus) == []
    bad = [gpus[0].model_copy(update={"ecc_uncorrected": 2, "throttle": ["hw_slowdown", "sw_power_cap"]})]
    found = {(f.kind, f.severity, f.count) for f in gpu_findings("n1", "nvidia-smi", bad)}
    assert found == {("ecc_uncorrected", "fatal", 2), ("throttle", "warn", 1), ("throttle", "info", 1)}


def _plant(root: Path, *, kernel: str = "", flaps: int = 1, aer_fatal: int = 0) -> HealthSources:
    """One node's sources under root: a kernel log, a sysfs tree (a NIC, a PCI device), a tools folder."""
    net = root / "sys" / "class" / "net" / "fab0"
    net.mkdir(parents=True)
    (net / "operstate").write_text("up\n")
    (net / "carrier_changes").write_text(f"{flaps}\n")
    dev = root / "sys" / "bus" / "pci" / "devices" / "0000:01:00.0"
    dev.mkdir(parents=True)
    fatal = _body("aer_dev_fatal-kernel-doc.txt").replace("TOTAL_ERR_FATAL 0", f"TOTAL_ERR_FATAL {aer_fatal}")
    (dev / "aer_dev_fatal").write_text(
        fatal.replace("Completion Timeout 0", f"Completion Timeout {aer_fatal}")
    )
    (root / "tools").mkdir()
    (root / "kern.log").write_text(kernel)
    return HealthSources(
        kernel_log=str(root / "kern.log"),
        sysfs=str(root / "sys"),
        tools_dir=str(root / "tools"),
        ifaces=["fab0"],
    )


def test_the_sample_line_reads_planted_files_per_node(tmp_path: Path) -> None:
    xid = _body("xid79-off-bus-nvsentinel-155.txt") + "[   9.1] unrelated line\n"
    sick = _plant(tmp_path / "node1", kernel=xid, aer_fatal=1)
    flappy = _plant(tmp_path / "node2", flaps=50)
    clean = _plant(tmp_path / "node3")
    one = sample_node("node1", LocalShell(), sick)
    assert one.fatal and one.errors == []
    assert {f.kind for f in one.findings} == {"gpu_off_bus", "xid", "pcie_aer_fatal"}
    two = sample_node("node2", LocalShell(), flappy)
    assert [(f.kind, f.count) for f in two.findings] == [("nic_flaps", 50)] and not two.fatal
    three = sample_node("node3", LocalShell(), clean)
    assert (three.findings, three.errors) == ([], [])


def test_an_unreadable_source_is_an_error_not_a_clean_bill(tmp_path: Path) -> None:
    src = _plant(tmp_path).model_copy(update={"kernel_log": str(tmp_path / "missing.log")})
    got = sample_node("node1", LocalShell(), src)
    assert any("missing.log cannot be read" in e for e in got.errors)
    _, errors = parse_sample("n1", f"{sample.MARK}kernel_log\n", [])
    assert any("ended before" in e for e in errors)  # a cut-short sample says so


def _fatal(name: str) -> NodeHealth:
    xid = kernel_findings(name, _body("xid79-off-bus-nvsentinel-155.txt"))
    return NodeHealth(node=name, findings=xid)


def test_the_drain_cap_holds_and_each_fatal_node_says_why(tmp_path: Path) -> None:
    sinfo = "node1|idle\nnode2|idle\nnode3|idle\nnode4|drained\n"
    runner = ScriptedRunner({"sinfo": (0, sinfo, ""), "scontrol": (0, "", "")})
    sched = SlurmScheduler(runner=runner)
    nodes = [_fatal("node1"), NodeHealth(node="node2"), _fatal("node3"), _fatal("node4")]
    drained = drain_fatal(nodes, ["node1", "node2", "node3", "node4"], 2, sched)
    assert drained == ["node1"]  # node4 already out of service: one more makes the cap of 2
    scontrol = [c for c in runner.calls if c[0] == "scontrol"]
    assert len(scontrol) == 1 and scontrol[0][:4] == ["scontrol", "update", "nodename=node1", "state=drain"]
    assert scontrol[0][4].startswith("reason=orch health: gpu_off_bus 0000:b3:00.0; xid 0000:44:00")
    assert nodes[0].drained and nodes[0].action is not None and nodes[0].action.startswith("drained: ")
    assert not nodes[2].drained and "orch_max_unavailable=2 reached" in (nodes[2].action or "")
    assert nodes[3].action == "already out of service (drained)"
    assert nodes[1].action is None


def test_without_drain_nothing_reaches_slurm(tmp_path: Path) -> None:
    runner = ScriptedRunner(strict=True)
    report = health_report([_fatal("node1")], local=False, drain=False, max_unavailable=5,
                           sched=SlurmScheduler(runner=runner), names=["node1"])  # fmt: skip
    assert runner.calls == [] and report.fatal_nodes == ["node1"]
    assert report.nodes[0].action == "not drained (without --drain)"


def test_inventory_variables_set_each_nodes_sources_and_the_cap(tmp_path: Path) -> None:
    inv = tmp_path / "hosts.ini"
    inv.write_text(
        "[nodes]\nnode1 ansible_connection=local orch_health_kernel_log=/srv/n1/kern.log "
        "orch_health_sysfs=/srv/n1/sys rdma_ifaces=fab0\nnode2 ansible_connection=local\n"
        "[all:vars]\norch_max_unavailable=2\n"
    )
    cluster = load_inventory(inv)
    one, two = (sources_of(n) for n in cluster.nodes)
    assert (one.kernel_log, one.sysfs, one.ifaces) == ("/srv/n1/kern.log", "/srv/n1/sys", ["fab0"])
    assert (two.kernel_log, two.sysfs, two.tools_dir) == (None, "/sys", None)
    assert cluster.vars.orch_max_unavailable == 2
    inv.write_text("[nodes]\nnode1 ansible_connection=local orch_health_sysfs=../sys\n")
    with pytest.raises(InventoryError, match="orch_health_sysfs"):
        load_inventory(inv)
    inv.write_text("[nodes]\nnode1 ansible_connection=local\n[all:vars]\norch_max_unavailable=-1\n")
    with pytest.raises(InventoryError, match=r"orch_max_unavailable=.* must be a whole number >= 0"):
        load_inventory(inv)


def test_health_local_loads_no_ssh_ansible_rich_or_plan_model(tmp_path: Path) -> None:
    hostile = "NVRM: Xid (PCI:0000:44:00): 48, name=\x1b]0;owned\x07\x1b[31mred\r\n"  # a process name is data
    src = _plant(tmp_path / "n", kernel=_body("xid79-off-bus-nvsentinel-155.txt") + hostile)
    argv = ["health", "--local", "--node", "node1", "--kernel-log", str(src.kernel_log), "--sysfs", src.sysfs,
            "--tools-dir", str(src.tools_dir), "--iface", "fab0"]  # fmt: skip
    code, modules, output = _run(tmp_path, argv)
    assert code == 1, output  # fatal: XID 79
    assert "gpu_off_bus" in output and "not drained (without --drain)" in output
    assert "\x1b" not in output and "\x07" not in output and "\\x1b" in output  # printed escaped
    assert _heavy(modules) == []
    assert "orchestrator.inventory" not in modules
    assert "orchestrator.runs.health" in modules  # the sample did run


class _Sinfo(ScriptedRunner):
    """sinfo as Slurm answers it: node names, or name|state; scontrol accepts."""

    def __init__(self, states: dict[str, str]) -> None:
        super().__init__()
        self.states = states

    def answer(self, argv: list[str]) -> tuple[int, str, str]:
        if argv[0] == "sinfo":
            fmt = next(a for a in argv if a.startswith("--format="))
            rows = self.states.items()
            return 0, "".join(f"{n}|{s}\n" if "|" in fmt else f"{n}\n" for n, s in rows), ""
        return 0, "", ""


def test_local_drains_this_node_only_under_the_cap_of_the_whole_cluster(tmp_path: Path) -> None:
    src = _plant(tmp_path / "n", kernel=_body("xid79-off-bus-nvsentinel-155.txt"))
    runner = _Sinfo({"node1": "idle", "node2": "drained", "node3": "idle"})
    report = check_here("node1", src, drain=True, max_unavailable=1, sched=SlurmScheduler(runner=runner))
    assert not report.nodes[0].drained and "max_unavailable=1 reached" in (report.nodes[0].action or "")
    assert "scontrol" not in runner.commands
    report = check_here("node1", src, drain=True, max_unavailable=2, sched=SlurmScheduler(runner=runner))
    assert report.nodes[0].drained and runner.commands.count("scontrol") == 1


def test_health_over_the_inventory_reads_each_nodes_planted_sources(tmp_path: Path) -> None:
    """`orch health -i`: per-node inventory paths, the same line through each node's shell (local
    nodes here), one report, exit 1 for the fatal node; --json is the HealthReport."""
    sick = _plant(tmp_path / "n1", kernel=_body("amdgpu-ras-mi50-rocm-1886.txt"))
    clean = _plant(tmp_path / "n2")
    inv = tmp_path / "hosts.ini"
    inv.write_text(
        "[nodes]\n"
        + "".join(
            f"{name} ansible_connection=local orch_health_kernel_log={s.kernel_log} "
            f"orch_health_sysfs={s.sysfs} orch_health_tools_dir={s.tools_dir} rdma_ifaces=fab0\n"
            for name, s in (("node1", sick), ("node2", clean))
        )
    )
    code, _, output = _run(tmp_path, ["health", "-i", str(inv), "--json"])
    assert code == 1, output
    report = HealthReport.model_validate_json(output[output.index("{") : output.rindex("}") + 1])
    assert report.fatal_nodes == ["node1"] and not report.local
    one, two = report.nodes
    assert [(f.kind, f.device) for f in one.findings] == [("amdgpu_ras", "0000:e3:00.0")]
    assert (two.findings, two.errors) == ([], [])


def test_saved_tool_outputs_in_a_nodes_tools_dir_are_read(tmp_path: Path) -> None:
    """The GPU tool and rdma link sections through the sample line: nvidia-smi's published H100
    capture with its uncorrected-ECC total planted at 3, amd-smi's published RX 6600 output as is."""
    src = _plant(tmp_path / "nv")
    csv_text = _body("../smi/nvidia-smi-query-gpu-h100-load.csv")
    header, row = csv_text.splitlines()[:2]
    cells = row.split(", ")
    cells[header.split(", ").index("ecc.errors.uncorrected.volatile.total")] = "3"
    Path(str(src.tools_dir), "nvidia-smi.csv").write_text(f"{header}\n{', '.join(cells)}\n")
    Path(str(src.tools_dir), "rdma-link.txt").write_text(_body("../smi/rdma-link-cx6dx.txt"))
    got = sample_node("node1", LocalShell(), src)
    assert got.errors == []
    (f,) = got.findings
    assert (f.kind, f.severity, f.count, f.device) == (
        "ecc_uncorrected",
        "fatal",
        3,
        "GPU 0 (00000000:00:09.0)",
    )
    amd = _plant(tmp_path / "amd")
    Path(str(amd.tools_dir), "amd-smi-metric.json").write_text(_body("../smi/amd-smi-metric-rx6600.json"))
    clean = sample_node("node2", LocalShell(), amd)
    assert (clean.findings, clean.errors) == ([], [])
    Path(str(amd.tools_dir), "amd-smi-metric.json").write_text("not json\n")
    assert any(e.startswith("gpu_tool amd-smi") for e in sample_node("node2", LocalShell(), amd).errors)


def test_cron_install_kind_health_writes_an_orch_health_entry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import orchestrator.cli.cron as cron_cli
    from orchestrator.cli import main
    from orchestrator.runs.nightly import CronManager, entries_in

    runner = ScriptedRunner()  # `scrontab -l` prints nothing: no entries yet
    monkeypatch.setattr(cron_cli, "_manager", lambda inventory, mode: CronManager(runner, None, "scrontab"))
    inv = tmp_path / "hosts.ini"
    inv.write_text("[nodes]\nnode1 ansible_connection=local\n")
    out = tmp_path / "runs"
    argv = [
        "cron",
        "install",
        "--kind",
        "health",
        "--at",
        "03:00",
        "-i",
        str(inv),
        "--out",
        str(out),
        "--",
        "--drain",
    ]
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 0, capsys.readouterr()
    (entry,) = entries_in((out / "cron" / ".health.scrontab").read_text())
    assert (entry.name, entry.kind) == ("health", "health")
    assert entry.command()[1:] == ["health", "--inventory", str(inv.resolve()), "--drain"]
    assert entry.time_limit_min == 11  # one 60 s sample round (one node) + the 10 min margin
    with pytest.raises(SystemExit) as e:
        main([*argv[:3], "scale", *argv[4:]])
    assert e.value.code == 2  # an unknown kind is refused, the known ones named
