"""The cost by part (metrics/cost.py): amortisation, energy from measured watts, downtime from the
measured outage x the failure rate, a node-hour price alone, and every missing part named."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError
from test_serving_plan import serving_plan

from orchestrator.errors import InventoryError
from orchestrator.inventory import load_inventory
from orchestrator.metrics.cost import cost_at, cost_at_lines, hourly_parts, total_label
from orchestrator.models.cost import MONTH_HOURS, CostModel, CostPart
from orchestrator.plan import load_plan
from orchestrator.runs.serving import cost_model_of

ALL_PARTS = ["hardware", "network", "storage", "licences", "staff", "energy", "downtime"]


def parts(model: CostModel, **kw: Any) -> dict[str, CostPart]:
    args: dict[str, Any] = {"nodes": 1, "watts": None, "outage_s": None, **kw}
    return {p.name: p for p in hourly_parts(model, **args)}


def full(**over: Any) -> CostModel:
    prices: dict[str, Any] = {
        "hardware": 250_000.0, "amortisation_months": 36, "network_per_month": 400.0,
        "storage_per_month": 150.0, "licences_per_month": 900.0, "staff_per_month": 1200.0,
        "energy_per_kwh": 0.21, "pue": 1.4, "failures_per_month": 0.5,
    }  # fmt: skip
    return CostModel(**{**prices, **over})


def test_an_empty_model_names_every_part_missing_and_gives_no_figure() -> None:
    c = cost_at(requests_per_s=4.0, output_tokens_per_s=800.0, model=CostModel(), nodes=2,
                watts=None, outage_s=None, rate="c8")  # fmt: skip
    assert c.missing == ALL_PARTS and all(p.per_hour is None for p in c.parts)
    assert all(p.basis.startswith("missing: ") for p in c.parts)
    # nothing known is not a cost of 0
    assert c.per_request is None and c.per_million_output_tokens is None
    assert total_label(c) == f"partial (missing: {', '.join(ALL_PARTS)})"


def test_hardware_is_amortised_over_its_months_per_node() -> None:
    got = parts(CostModel(hardware=73_000, amortisation_months=100), nodes=3)["hardware"]
    assert got.status == "given" and got.per_hour == pytest.approx(73_000 / (100 * MONTH_HOURS) * 3)
    assert "73000 / (100 months x 730 h) x 3 node(s)" in got.basis
    with pytest.raises(ValidationError, match="hardware and amortisation_months go together"):
        CostModel(hardware=73_000)


def test_monthly_parts_are_per_node_over_the_hours_of_a_month() -> None:
    got = parts(full(), nodes=2)
    for name, monthly in (("network", 400.0), ("storage", 150.0), ("licences", 900.0), ("staff", 1200.0)):
        assert got[name].per_hour == pytest.approx(monthly / MONTH_HOURS * 2), name


def test_energy_is_measured_watts_times_the_kwh_price_times_pue() -> None:
    got = parts(full(), watts=2_500.0)["energy"]
    assert got.status == "measured" and got.per_hour == pytest.approx(2.5 * 0.21 * 1.4)
    unmeasured = parts(full())["energy"]
    assert unmeasured.status == "missing" and "no power telemetry" in unmeasured.basis
    unpriced = parts(full(energy_per_kwh=None), watts=2_500.0)["energy"]
    assert unpriced.per_hour is None and "measured 2500 W" in unpriced.basis


def test_downtime_is_the_measured_outage_times_the_failure_rate_over_the_known_parts() -> None:
    model = full(failures_per_month=3.0)
    got = parts(model, watts=1_000.0, outage_s=600.0)
    down = 3.0 * 600.0 / 3600.0 / MONTH_HOURS
    others = sum(p.per_hour or 0.0 for n, p in got.items() if n != "downtime")
    assert got["downtime"].status == "measured"
    assert got["downtime"].per_hour == pytest.approx(down / (1 - down) * others)
    # more failures or a longer outage cost more
    worse = parts(model, watts=1_000.0, outage_s=1_200.0)["downtime"].per_hour
    assert worse is not None and worse > (got["downtime"].per_hour or 0)
    assert "no outage measured" in parts(model, watts=1_000.0)["downtime"].basis
    assert "no failures_per_month" in parts(full(failures_per_month=None), outage_s=60.0)["downtime"].basis
    with pytest.raises(ValueError, match="down all the time"):
        parts(full(failures_per_month=1.0), outage_s=MONTH_HOURS * 3600.0)


def test_a_node_hour_price_alone_still_works_and_says_what_it_includes() -> None:
    c = cost_at(requests_per_s=2.0, output_tokens_per_s=500.0, model=CostModel(node_hour=3.6), nodes=2,
                watts=None, outage_s=None, rate="c4's measured rate")  # fmt: skip
    by = {p.name: p for p in c.parts}
    assert by["node-hour"].per_hour == pytest.approx(7.2)
    assert {n for n, p in by.items() if p.status == "included"} == {
        "hardware", "network", "storage", "licences", "energy"
    }  # fmt: skip
    assert c.missing == ["staff", "downtime"] and c.per_hour == pytest.approx(7.2)
    assert c.per_request == pytest.approx(7.2 / (3600 * 2.0))
    assert c.per_million_output_tokens == pytest.approx(7.2 / (3600 * 500.0) * 1e6)
    with pytest.raises(ValidationError, match="node_hour includes"):
        CostModel(node_hour=3.6, energy_per_kwh=0.2)


def test_a_complete_model_at_a_rate_and_its_lines() -> None:
    c = cost_at(requests_per_s=10.0, output_tokens_per_s=2_000.0, model=full(), nodes=1,
                watts=800.0, outage_s=120.0, rate="capacity 10 req/s")  # fmt: skip
    assert c.complete and c.missing == [] and total_label(c) == "complete"
    assert c.per_hour == pytest.approx(sum(p.per_hour or 0.0 for p in c.parts))
    assert c.per_request == pytest.approx(c.per_hour / 36_000)
    lines = cost_at_lines(c)
    assert lines[0].startswith("cost at capacity 10 req/s: ") and lines[0].endswith("total complete")
    assert [x.split(":")[0].strip() for x in lines[1:]] == ALL_PARTS  # every part shown, in order
    with pytest.raises(ValueError, match="rates must be >= 0"):
        cost_at(requests_per_s=-1.0, output_tokens_per_s=None, model=full(), nodes=1,
                watts=None, outage_s=None, rate="x")  # fmt: skip


def test_a_plan_carries_a_cost_model(tmp_path: Path) -> None:
    plan = load_plan(serving_plan(tmp_path, cost={"hardware": 1000, "amortisation_months": 12, "pue": 1.2}))
    cost = plan.serving[0].cost
    assert cost is not None and cost.hardware == 1000 and cost.pue == 1.2


def test_an_inventory_carries_a_cost_model_in_orch_cost_variables(tmp_path: Path) -> None:
    ini = tmp_path / "hosts.ini"
    ini.write_text(
        "[g]\na\nb\n[all:vars]\norch_cost_hardware=120000\norch_cost_amortisation_months=48\n"
        "orch_cost_network_per_month=0\norch_cost_energy_per_kwh=0.3\norch_cost_pue=1.3\n"
    )
    cost = load_inventory(ini).vars.orch_cost
    assert cost == CostModel(hardware=120_000, amortisation_months=48, network_per_month=0,
                             energy_per_kwh=0.3, pue=1.3)  # fmt: skip
    assert parts(cost)["network"].per_hour == 0.0  # given as 0 is a price, not a missing part
    assert load_inventory(_ini(tmp_path, "")).vars.orch_cost is None
    with pytest.raises(InventoryError, match="hardware and amortisation_months go together"):
        load_inventory(_ini(tmp_path, "orch_cost_hardware=120000\n"))
    with pytest.raises(InventoryError, match="orch_cost_pue='high'"):
        load_inventory(_ini(tmp_path, "orch_cost_pue=high\n"))


def _ini(tmp_path: Path, extra: str) -> Path:
    path = tmp_path / "other.ini"
    path.write_text(f"[g]\na\n[all:vars]\n{extra}")
    return path


def test_the_step_s_cost_model_plan_first_then_inventory_then_a_node_hour_price(tmp_path: Path) -> None:
    plan = load_plan(serving_plan(tmp_path))
    w = plan.serving[0]
    inv = load_inventory(_ini(tmp_path, "orch_cost_staff_per_month=900\n"))
    price = (2.0, 1, "plan price_per_node_hour 2")
    assert cost_model_of(w, inv, None) == CostModel(staff_per_month=900)
    priced = w.model_copy(update={"price_per_node_hour": 2.0})
    assert cost_model_of(priced, inv, price) == CostModel(node_hour=2.0)
    own = CostModel(node_hour=5.0)
    assert cost_model_of(w.model_copy(update={"cost": own}), inv, price) == own
    assert cost_model_of(w, load_inventory(_ini(tmp_path, "")), None) is None
