"""GPU and RDMA tool parsers on verbatim outputs (tests/fixtures/smi/, each with its source)."""

from __future__ import annotations

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


def test_ibv_devinfo_infiniband_and_roce() -> None:
    ib = smi.parse_ibv_devinfo((FIX / "ibv_devinfo-mlx4-infiniband.txt").read_text())
    assert [d.name for d in ib] == ["mlx4_1", "mlx4_0"]
    assert [p.state for p in ib[0].ports] == ["PORT_ACTIVE", "PORT_DOWN"]
    assert not ib[0].roce
    (roce,) = smi.parse_ibv_devinfo((FIX / "ibv_devinfo-mlx5-roce.txt").read_text())
    assert roce.roce and roce.fw_ver == "22.38.1900" and roce.ports[0].active_mtu == 1024


@pytest.mark.parametrize(
    "fn", [smi.parse_nvidia_smi_q, smi.parse_amd_smi_static, smi.parse_rocm_smi, smi.parse_ibv_devinfo]
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
