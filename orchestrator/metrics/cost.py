"""The cost of serving (docs/serving.md, "Cost"): one home for its arithmetic.

- level_cost: a level's cost from a node-hour price over its measured span (price x nodes x span).
- cost_at: the cost at a rate from a cost model, by part (models/cost.py), per hour of the nodes
  that serve, then per successful request and per 1M output tokens at that rate. The rate is a
  level's measured one or, when a capacity search found it, the capacity's.

Parts per node and hour: hardware = price / (months x 730 h); network, storage, licences and
support, staff = per month / 730 h; energy = measured watts / 1000 x price per kWh x PUE (for the
nodes together); downtime = the share of time down, u = failures per month x measured outage /
730 h, costs the known parts of the time down: u / (1 - u) x their sum (the nodes are paid while
they serve nothing). A node-hour price includes hardware, network, storage, licences and energy.
A part without its prices or its measurement is missing: named, never counted as zero.
"""

from __future__ import annotations

from orchestrator.models.cost import IN_NODE_HOUR, MONTH_HOURS, CostAtRate, CostModel, CostPart, CostPartName
from orchestrator.models.serving_results import LevelSummary, ServingCost
from orchestrator.text import figure

_MONTHLY: tuple[tuple[CostPartName, str, str], ...] = (
    ("network", "network_per_month", "network"),
    ("storage", "storage_per_month", "storage"),
    ("licences", "licences_per_month", "licences and support"),
    ("staff", "staff_per_month", "staff"),
)


def level_cost(s: LevelSummary, *, nodes: int, price_per_node_hour: float) -> ServingCost:
    """Cost of a level: price x nodes x span; per successful request and per 1M output tokens of
    successful requests (failed requests cost time and earn nothing). Raises ValueError on a
    price <= 0 or nodes < 1."""
    if price_per_node_hour <= 0 or nodes < 1:
        raise ValueError(
            f"price per node-hour must be > 0 and nodes >= 1 (got {price_per_node_hour}, {nodes})"
        )
    total = price_per_node_hour * nodes * s.duration_s / 3600.0
    return ServingCost(
        price_per_node_hour=price_per_node_hour,
        nodes=nodes,
        duration_s=s.duration_s,
        total=total,
        ok=s.ok,
        output_tokens=s.output_tokens,
        per_request=total / s.ok if s.ok else None,
        per_million_output_tokens=total / s.output_tokens * 1e6 if s.output_tokens else None,
    )


def cost_label(c: ServingCost) -> str:
    """The cost with the inputs of its calculation beside it."""
    per_req = figure(c.per_request)
    per_m = figure(c.per_million_output_tokens)
    return (
        f"cost {per_req} per successful request, {per_m} per 1M output tokens "
        f"(= {c.price_per_node_hour:g}/node-hour x {c.nodes} node(s) x {c.duration_s:.1f} s = {c.total:.4g}; "
        f"over {c.ok} successful requests, {c.output_tokens} output tokens)"
    )


def _missing(name: CostPartName, why: str) -> CostPart:
    return CostPart(name=name, status="missing", per_hour=None, basis=f"missing: {why}")


def hourly_parts(
    model: CostModel,
    *,
    nodes: int,
    watts: float | None,
    outage_s: float | None,
    watts_why: str | None = None,
) -> list[CostPart]:
    """Every part of the cost of ``nodes`` nodes for one hour (CostPartName's order). ``watts``:
    the measured mean power of those nodes together (None: not measured, ``watts_why`` says why,
    e.g. no power telemetry on a node); ``outage_s``: the
    measured outage of one failure (None: none measured). Raises ValueError for nodes < 1, negative
    figures, or a failure rate and outage that leave the nodes down all the time."""
    if nodes < 1:
        raise ValueError(f"nodes must be >= 1 (got {nodes})")
    if (watts is not None and watts < 0) or (outage_s is not None and outage_s < 0):
        raise ValueError(f"watts and outage must be >= 0 (got {watts}, {outage_s})")
    rental = model.node_hour is not None
    parts: list[CostPart] = []
    if model.node_hour is not None:
        parts.append(CostPart(name="node-hour", status="given", per_hour=model.node_hour * nodes,
                              basis=f"{model.node_hour:g}/node-hour x {nodes} node(s)"))  # fmt: skip

    def included(name: CostPartName) -> CostPart:
        return CostPart(name=name, status="included", per_hour=None, basis="in the node-hour price")

    if rental:
        parts.append(included("hardware"))
    elif model.hardware is not None and model.amortisation_months is not None:
        per = model.hardware / (model.amortisation_months * MONTH_HOURS)
        parts.append(CostPart(name="hardware", status="given", per_hour=per * nodes,
                              basis=f"{model.hardware:g} / ({model.amortisation_months:g} months x "
                                    f"{MONTH_HOURS:g} h) x {nodes} node(s)"))  # fmt: skip
    else:
        parts.append(_missing("hardware", "no hardware price and amortisation_months"))
    for name, field, words in _MONTHLY:
        monthly: float | None = getattr(model, field)
        if rental and name in IN_NODE_HOUR:
            parts.append(included(name))
        elif monthly is None:
            parts.append(_missing(name, f"no {field} ({words})"))
        else:
            basis = f"{monthly:g}/month / {MONTH_HOURS:g} h x {nodes} node(s)"
            parts.append(
                CostPart(name=name, status="given", per_hour=monthly / MONTH_HOURS * nodes, basis=basis)
            )
    parts.append(_energy(model, watts, rental, watts_why))
    parts.append(_downtime(model, outage_s, sum(p.per_hour or 0.0 for p in parts)))
    return parts


def _energy(model: CostModel, watts: float | None, rental: bool, why: str | None) -> CostPart:
    if rental:
        return CostPart(name="energy", status="included", per_hour=None, basis="in the node-hour price")
    if watts is None:
        return _missing("energy", why or "no power telemetry for the step (measured watts)")
    if model.energy_per_kwh is None or model.pue is None:
        return _missing("energy", f"measured {watts:.4g} W, but no energy_per_kwh and pue")
    per = watts / 1000.0 * model.energy_per_kwh * model.pue
    basis = f"{watts:.4g} W measured / 1000 x {model.energy_per_kwh:g}/kWh x PUE {model.pue:g}"
    return CostPart(name="energy", status="measured", per_hour=per, basis=basis)


def _downtime(model: CostModel, outage_s: float | None, known_per_hour: float) -> CostPart:
    if model.failures_per_month is None:
        return _missing("downtime", "no failures_per_month (expected failure rate)")
    if outage_s is None:
        return _missing("downtime", "no outage measured in the step (a fault during serving measures it)")
    down = model.failures_per_month * outage_s / 3600.0 / MONTH_HOURS
    if down >= 1:
        raise ValueError(
            f"{model.failures_per_month:g} failures/month x {outage_s:g} s outage: the nodes are "
            "down all the time"
        )
    per = down / (1 - down) * known_per_hour
    basis = (
        f"down {down:.3g} of the time (= {model.failures_per_month:g} failures/month x {outage_s:.4g} s "
        f"measured outage / {MONTH_HOURS:g} h); {down:.3g} / (1 - {down:.3g}) x {known_per_hour:.4g}/h "
        "of the known parts"
    )
    return CostPart(name="downtime", status="measured", per_hour=per, basis=basis)


def cost_at(
    *,
    requests_per_s: float | None,
    output_tokens_per_s: float | None,
    model: CostModel,
    nodes: int,
    watts: float | None,
    outage_s: float | None,
    rate: str,
    watts_why: str | None = None,
) -> CostAtRate:
    """The cost of serving at one rate: every part for one hour of the nodes (hourly_parts), their
    known sum, then per successful request (sum / (3600 x requests/s)) and per 1M output tokens
    (sum / (3600 x tokens/s) x 10^6). ``rate`` says which rate it is (a level's, the capacity's);
    ``watts`` is the nodes' measured power (energy = W / 1000 x h x price per kWh x PUE), or None
    with ``watts_why`` naming why energy is missing.
    When a part is missing the figures are partial and ``missing`` names the parts. Raises
    ValueError as hourly_parts, and for a negative rate."""
    if (requests_per_s or 0) < 0 or (output_tokens_per_s or 0) < 0:
        raise ValueError(f"rates must be >= 0 (got {requests_per_s}, {output_tokens_per_s})")
    parts = hourly_parts(model, nodes=nodes, watts=watts, outage_s=outage_s, watts_why=watts_why)
    total = sum(p.per_hour or 0.0 for p in parts)
    known = any(p.per_hour is not None for p in parts)  # none known: no figure, rather than a cost of 0
    return CostAtRate(
        nodes=nodes,
        rate=rate,
        requests_per_s=requests_per_s,
        output_tokens_per_s=output_tokens_per_s,
        parts=parts,
        per_hour=total,
        missing=[p.name for p in parts if p.status == "missing"],
        per_request=total / (3600.0 * requests_per_s) if requests_per_s and known else None,
        per_million_output_tokens=(
            total / (3600.0 * output_tokens_per_s) * 1e6 if output_tokens_per_s and known else None
        ),
    )


def total_label(c: CostAtRate) -> str:
    """The total with its completeness: 'partial (missing: energy, downtime)' or 'complete'."""
    return f"partial (missing: {', '.join(c.missing)})" if c.missing else "complete"


def cost_at_lines(c: CostAtRate) -> list[str]:
    """The cost at a rate as text: the figures with their completeness, then every part."""
    per_req = figure(c.per_request)
    per_m = figure(c.per_million_output_tokens)
    lines = [
        f"cost at {c.rate}: {per_req} per successful request, {per_m} per 1M output tokens, "
        f"{c.per_hour:.4g}/hour for {c.nodes} node(s); total {total_label(c)}"
    ]
    for p in c.parts:
        hourly = "-" if p.per_hour is None else f"{p.per_hour:.4g}/h"
        lines.append(f"  {p.name}: {hourly} ({p.basis})")
    return lines
