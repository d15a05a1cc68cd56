"""GPU and RDMA tool parsers on verbatim outputs (tests/fixtures/smi/, each with its source)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from orchestrator.errors import ParseError
from orchestrator.parse import parse_file
from orchestrator.provision import smi

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "smi"


def test_every_fixture_names_its_source() -> None:
    for f in FIX.iterdir():
        assert f.read_text().startswith("# source: "), f


def test_nvidia_smi_q() -> None:
    r = smi.parse_nvidia_smi_q((FIX / "nvidia-smi-q.txt").read_text())
    assert (r.driver, r.cuda) == ("566.36", "12.7")
    (g,) = r.gpus
    assert g.name == "NVIDIA GeForce RTX 4070 Laptop GPU"
    assert g.memory_mib == 8188
    assert g.bus_id == "00000000:01:00.0"
    assert g.uuid == "GPU-1b724e78-eef5-4163-d43c-e4da15d41176"


def test_nvidia_smi_csv_with_units_and_repeats() -> None:
    r = smi.parse_nvidia_smi_csv((FIX / "nvidia-smi-query-gpu.csv").read_text())
    assert len(r.gpus) == 1  # -l repeated index 0 thirteen times
    assert r.gpus[0].extra["pstate"] == "P3"
    assert r.gpus[0].extra["power.draw"] == "83.92 W"


def test_amd_smi_version() -> None:
    # the line: AMDSMI Tool: 26.0.2+39589fda | AMDSMI Library version: 26.0.2 | ROCm version: 7.0.2 |
    #           amdgpu version: 6.14.14 | amd_hsmp version: N/A
    r = smi.parse_amd_smi((FIX / "amd-smi-version.txt").read_text())
    assert (r.rocm, r.driver) == ("7.0.2", "6.14.14")
    assert r.versions["AMDSMI Tool"] == "26.0.2+39589fda"
    assert r.versions["AMDSMI Library version"] == "26.0.2"
    assert r.gpus == []
    with pytest.raises(ParseError, match="GPU: N"):
        smi.parse_amd_smi_static((FIX / "amd-smi-version.txt").read_text())


def test_amd_smi_list() -> None:
    r = smi.parse_amd_smi((FIX / "amd-smi-list-mi210.txt").read_text())
    assert [(g.index, g.bus_id, g.extra["KFD_ID"], g.extra["NODE_ID"]) for g in r.gpus] == [
        (0, "0000:03:00.0", "22303", "2"),
        (1, "0000:83:00.0", "31706", "3"),
    ]
    assert {g.uuid for g in r.gpus} == {"00ff740f-0000-1000-8000-000000000000"}


def test_amd_smi_static() -> None:
    r = smi.parse_amd_smi_static((FIX / "amd-smi-static.txt").read_text())
    assert r.driver == "6.18.3"
    (g,) = r.gpus
    assert (g.name, g.arch, g.bus_id) == ("AMD Instinct MI350X", "gfx950", "0000:05:00.0")


def test_rocm_smi_json_and_concise() -> None:
    j = smi.parse_rocm_smi((FIX / "rocm-smi-productname.json").read_text())
    assert j.gpus[0].arch == "gfx9010" and j.gpus[0].extra["Card Model"] == "0x7408"
    c = smi.parse_rocm_smi((FIX / "rocm-smi-concise.txt").read_text())
    assert c.gpus[0].extra["PwrCap"] == "250.0W"
    assert c.gpus[0].extra["SCLK_OD"] == "0%"


def test_rocm_smi_json_is_read_by_one_reader_for_the_fingerprint_and_the_telemetry() -> None:
    from orchestrator.telemetry.smi import parse_rocm_json

    text = (FIX / "rocm-smi-productname.json").read_text()
    _, cards = smi.rocm_json_cards(text)
    assert [g.index for g in smi.parse_rocm_smi(text).gpus] == [i for i, _ in cards]
    assert [g.index for g in parse_rocm_json(text)] == [i for i, _ in cards]
    for bad, why in (('{"card0": "x"}', "card0 is not an object"), ('{"system": {}}', "without any cardN"),
                     ("{", "not JSON")):  # fmt: skip
        for parse in (smi.parse_rocm_smi, parse_rocm_json):
            with pytest.raises(ParseError, match=why):
                parse(bad)


def test_rocm_smi_showid_gives_every_gpu() -> None:
    a = smi.parse_rocm_smi((FIX / "rocm-smi-showid-mi300a.txt").read_text())
    assert [(g.index, g.name, g.extra["GUID"]) for g in a.gpus] == [
        (0, "AMD Instinct MI300A", "39408"),
        (1, "AMD Instinct MI300A", "8689"),
        (2, "AMD Instinct MI300A", "43505"),
    ]
    assert a.gpus[0].extra["Device ID"] == "0x74a0"
    x = smi.parse_rocm_smi((FIX / "rocm-smi-showid-mi300x.txt").read_text())
    assert [g.index for g in x.gpus] == list(range(16))
    assert {g.name for g in x.gpus} == {"AMD Instinct MI300X"}
    assert x.gpus[0].extra["Device ID"] == "0x74a1"
    assert x.gpus[1].extra["Device ID"] == "N/A"
    assert x.gpus[15].extra["GUID"] == "37627"


def test_rocm_smi_concise_cells_stay_in_their_columns() -> None:
    """The MI300 table has cells with spaces and a two-value IDs column; nothing shifts."""
    r = smi.parse_rocm_smi((FIX / "rocm-smi-concise-mi300a.txt").read_text())
    assert [g.index for g in r.gpus] == [0, 1, 2]
    first, last = r.gpus[0].extra, r.gpus[2].extra
    assert (first["IDs"], first["Temp"], first["Partitions"], first["PwrCap"]) == (
        "0x74a0, 39408", "30.0°C", "NPS1, TPX, 0", "550.0W",
    )  # fmt: skip
    assert (last["Node"], last["IDs"], last["Partitions"], last["GPU%"]) == (
        "3",
        "N/A, 43505",
        "N/A, N/A, 2",
        "N/A",
    )


def test_rocm_smi_banner_without_gpus_is_refused() -> None:
    text = "========== ROCm System Management Interface ==========\n====== End of ROCm SMI Log ======\n"
    with pytest.raises(ParseError, match="without any GPU"):
        smi.parse_rocm_smi(text)


def test_nvidia_smi_default_table() -> None:
    old = smi.parse_nvidia_smi_table((FIX / "nvidia-smi-table-titanxp.txt").read_text())
    assert (old.driver, old.cuda) == ("450.57", "11.0")
    (g,) = old.gpus
    assert (g.index, g.name, g.bus_id, g.memory_mib) == (0, "TITAN Xp", "00000000:17:00.0", 12196)
    oldest = smi.parse_nvidia_smi_table((FIX / "nvidia-smi-table-331.txt").read_text())
    assert (oldest.driver, oldest.cuda) == ("331.62", None)
    assert [(g.index, g.name, g.bus_id, g.memory_mib) for g in oldest.gpus] == [
        (0, "GeForce GTX 680", "0000:03:00.0", 4095),
        (1, "GeForce GTX 680", "0000:04:00.0", 4095),
        (2, "GeForce GTX 680", "0000:83:00.0", 4095),
    ]
    new = smi.parse_nvidia_smi_table((FIX / "nvidia-smi-table-a100x2.txt").read_text())
    assert (new.driver, new.cuda) == ("580.126.09", "13.0")
    assert [(g.index, g.name, g.bus_id, g.memory_mib) for g in new.gpus] == [
        (0, "NVIDIA A100-SXM4-40GB", "00000000:10:1C.0", 40960),
        (1, "NVIDIA A100-SXM4-40GB", "00000000:10:1D.0", 40960),
    ]


def test_nvidia_smi_topo() -> None:
    t = smi.parse_nvidia_smi_topo((FIX / "nvidia-smi-topo-m.txt").read_text())
    assert t.devices == ["GPU0", "GPU1"]
    assert [(g.name, g.links["GPU0"], g.links["GPU1"]) for g in t.gpus] == [
        ("GPU0", "X", "PHB"),
        ("GPU1", "PHB", "X"),
    ]
    assert {(g.cpu_affinity, g.numa_affinity) for g in t.gpus} == {("0-63", "0")}
    nic = smi.parse_nvidia_smi_topo((FIX / "nvidia-smi-topo-m-nic.txt").read_text())
    assert nic.devices == ["GPU0", "NIC0"] and nic.nics == {"NIC0": "mlx5_0"}
    (g,) = nic.gpus
    assert (g.links, g.cpu_affinity, g.numa_affinity) == ({"GPU0": "X", "NIC0": "PHB"}, "0-251", "0")


def test_csv_without_header_needs_the_fields() -> None:
    """`--format=csv,noheader` prints no column names: the rows alone cannot be read."""
    text = (FIX / "nvidia-smi-query-gpu.csv").read_text()
    source, header, *rows = text.splitlines()
    noheader = "\n".join([source, *rows]) + "\n"  # what csv,noheader prints for the same query
    with pytest.raises(ParseError, match="without a header") as e:
        smi.parse_nvidia_smi_csv(noheader)
    assert e.value.hint and "--fields" in e.value.hint
    fields = tuple(re.sub(r"\s*\[.*\]$", "", h.strip()) for h in header.split(","))
    read = smi.parse_nvidia_smi_csv(noheader, fields)
    assert read == smi.parse_nvidia_smi_csv(text)
    assert read.gpus[0].extra["pstate"] == "P3"
    with pytest.raises(ParseError, match="disagrees"):
        smi.parse_nvidia_smi_csv(text, ("index", "name"))


def test_ibdev2netdev() -> None:
    links = smi.parse_ibdev2netdev((FIX / "ibdev2netdev-cx7-bond.txt").read_text())
    assert len(links) == 7
    assert [(ln.device, ln.netdev, ln.state) for ln in links if ln.state == "Up"] == [
        ("mlx5_1", "ens12f0np0", "Up"),
        ("mlx5_2", "ens12f1np1", "Up"),
        ("mlx5_bond_0", "bond0", "Up"),
    ]
    assert {ln.port for ln in links} == {1}


def test_rdma_link() -> None:
    links = smi.parse_rdma_link((FIX / "rdma-link-cx6dx.txt").read_text())
    assert [(ln.device, ln.port, ln.state, ln.physical_state, ln.netdev) for ln in links] == [
        ("mlx5_0", 1, "ACTIVE", "LINK_UP", "p1p1"),
        ("mlx5_1", 1, "ACTIVE", "LINK_UP", "p1p2"),
    ]


def test_ibv_devinfo_infiniband_and_roce() -> None:
    ib = smi.parse_ibv_devinfo((FIX / "ibv_devinfo-mlx4-infiniband.txt").read_text())
    assert [d.name for d in ib] == ["mlx4_1", "mlx4_0"]
    assert [p.state for p in ib[0].ports] == ["PORT_ACTIVE", "PORT_DOWN"]
    assert not ib[0].roce
    (roce,) = smi.parse_ibv_devinfo((FIX / "ibv_devinfo-mlx5-roce.txt").read_text())
    assert roce.roce and roce.fw_ver == "22.38.1900" and roce.ports[0].active_mtu == 1024


@pytest.mark.parametrize(
    "fn",
    [
        smi.parse_nvidia_smi_q,
        smi.parse_nvidia_smi_table,
        smi.parse_nvidia_smi_topo,
        smi.parse_nvidia_smi_csv,
        smi.parse_amd_smi,
        smi.parse_amd_smi_static,
        smi.parse_rocm_smi,
        smi.parse_ibv_devinfo,
        smi.parse_ibdev2netdev,
        smi.parse_rdma_link,
    ],
)
def test_wrong_tool_output_is_a_parse_error(fn: object) -> None:
    with pytest.raises(ParseError):
        fn("hello\nworld\n")  # type: ignore[operator]


@pytest.mark.parametrize(
    ("kind", "name"),
    [
        ("nvidia-smi-q", "nvidia-smi-q.txt"),
        ("nvidia-smi-csv", "nvidia-smi-query-gpu.csv"),
        ("amd-smi", "amd-smi-static.txt"),
        ("rocm-smi", "rocm-smi-productname.json"),
        ("ibv_devinfo", "ibv_devinfo-mlx5-roce.txt"),
    ],
)
def test_orch_parse_kinds(kind: str, name: str) -> None:
    assert parse_file(FIX / name, kind).data
