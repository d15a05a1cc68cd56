"""The straggler sections of a run's report: one per kind of node, from its 2-node steps.

Built once as format-neutral Sections (report/sections.py) and rendered by the same renderers as
the isolation section: HTML draws each kind's node-pair matrix as a heatmap (report/heatmap.py),
Markdown writes the same matrix as the table of its pairs. Each section says the rule's numbers and
each straggler's evidence (metrics/stragglers.py judges); a kind with too few pairs for the rule
gets its matrix and why it was not judged. Pairs across kinds of node are left out and counted.
Every value (node names above all) is escaped by the renderers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from orchestrator.metrics.stragglers import StragglerReport, pair_matrix, split_by_kind, stragglers
from orchestrator.models.cluster import kind_label, same_gpu_model
from orchestrator.models.run import RunRecord
from orchestrator.report.sections import PairFigure, Section, sections_html, sections_markdown

_X = "\u00d7"  # the multiplication sign


def straggler_section(
    rep: StragglerReport,
    nodes: Sequence[str],
    matrix: Mapping[tuple[str, str], float],
    *,
    kind: str | None = None,
    ident: str = "stragglers",
) -> Section:
    """One matrix's section: the figure (stragglers flagged), each straggler's evidence, then the
    rule's numbers (kind: the kind of node the matrix holds, in the title, when a cluster
    has several)."""
    slow = [s.node for s in rep.stragglers]
    title = f"pair {rep.metric}" + (f", {kind}" if kind else "")
    rule = (
        f"straggler: median of its pairs > {rep.bound:.4g} = median {rep.centre:.4g} + "
        f"max({rep.k:g} {_X} {rep.sigma:.4g}, {rep.floor:.0%} {_X} median)"
    )
    items = [
        f"{s.node}: median {s.score:.4g} ({'-' if s.excess is None else f'{s.excess:.2f}'}{_X}), "
        f"pairs {', '.join(f'{p} {v:.4g}' for p, v in sorted(s.pairs.items()))}"
        for s in rep.stragglers
    ]
    return Section(
        "Stragglers" + (f" ({kind})" if kind else ""),
        lines=[*(items or ["no straggler"]), rule],
        figure=PairFigure(list(nodes), matrix, title, rep.metric, slow),
        list_class="stragglers",
        ident=ident,
    )


def straggler_sections(rec: RunRecord) -> list[Section]:
    """A section per kind of node (gpu_vendor, GPU model) from the run's 2-node steps; none when the
    run has none. The last one says how many pairs across kinds were left out."""
    metric, matrix = pair_matrix(rec.steps)
    if not matrix:
        return []
    nodes = rec.cluster.nodes if rec.cluster else []
    keys = {n.name: (n.gpu_vendor, same_gpu_model(n.gpu_model)) for n in nodes}
    labels: dict[tuple[str, str], str] = {}
    for n in nodes:
        labels.setdefault(keys[n.name], kind_label(n.gpu_vendor, n.gpu_model))
    kind_of = {name: labels[k] for name, k in keys.items()}
    per, across = split_by_kind(matrix, kind_of)
    order = {n.name: i for i, n in enumerate(nodes)}
    out: list[Section] = []
    for i, (kind, sub) in enumerate(sorted(per.items())):
        names = sorted({n for pair in sub for n in pair}, key=lambda n: (order.get(n, len(order)), n))
        shown = kind if len(per) > 1 else None
        ident = f"stragglers-{i + 1}"
        try:
            rep = stragglers(sub, metric=metric)
        except ValueError as e:  # too few nodes to judge: the matrix is still shown, nobody flagged
            title = f"pair {metric}" + (f", {kind}" if shown else "")
            out.append(
                Section(
                    f"Stragglers ({kind})" if shown else "Stragglers",
                    ident=ident,
                    lines=[f"not judged: {e}"],
                    figure=PairFigure(names, sub, title, metric),
                    list_class="muted",
                )
            )
            continue
        out.append(straggler_section(rep, names, sub, kind=shown, ident=ident))
    if across and out:
        out[-1].after.append(f"{len(across)} pairs across kinds of node are not compared.")
    return out


def stragglers_markdown(rec: RunRecord) -> list[str]:
    """The straggler sections as Markdown lines (each a "##" section), none without 2-node steps."""
    out: list[str] = []
    for s in straggler_sections(rec):
        out += ["", *sections_markdown([s])]
    return out[:-1] if out and out[-1] == "" else out


def stragglers_html(rec: RunRecord) -> list[str]:
    """Each straggler section as `<section id="stragglers-N" class="stragglers-section">`."""
    return [sections_html([s], ident=s.ident, cls="stragglers-section") for s in straggler_sections(rec)]
