"""`packcli show --html` and `packcli stats --html`: one self-contained page (inline CSS, a
few lines of inline JS, inline SVG charts; nothing fetched from the network).

Each row is a block; each segment a line of tokens in one of two alternating colours,
opened by a marker with its index, length and (in a mixture) source; learned tokens are
highlighted, the others grey; each token's tooltip gives its id, position and label. The
DOM carries what scripts/check_html.py checks: `.seg` elements with
data-row/-seg/-start/-end/-real-end (and data-source in a mixture) and `.learn` spans
(data-start/-end) whose text is the learned tokens' text.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from packcli.core.errors import PackcliError
from packcli.inspect.show import Decoder, Segment, View

STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 24px; color: #1d232a; background: #fbfbfa; }
h1 { font-size: 20px; margin: 0 0 12px; } h2 { font-size: 16px; margin: 24px 0 8px; }
table.figures { border-collapse: collapse; margin-bottom: 12px; }
table.figures td { padding: 2px 14px 2px 0; } table.figures td.v { text-align: right; font-variant-numeric: tabular-nums; }
.charts { display: flex; gap: 24px; flex-wrap: wrap; }
.chart text { font: 11px system-ui, sans-serif; fill: #444; } .chart rect.bar { fill: #2b7bb9; }
.row { background: #fff; border: 1px solid #ddd; border-radius: 6px; padding: 10px 12px; margin: 14px 0; }
.head { font-weight: 600; margin-bottom: 6px; } .head .where { color: #777; font-weight: 400; }
.note { color: #b3261e; margin: 2px 0 6px; }
.seg { display: block; font: 13px/1.6 ui-monospace, SFMono-Regular, Menlo, monospace; white-space: pre-wrap;
       word-break: break-all; padding: 2px 6px; margin: 3px 0; border-left: 4px solid; }
.s0 { border-color: #1f8a9e; background: #f1fafb; } .s1 { border-color: #c58a00; background: #fdf8ec; }
.seg.pad { border-color: #b05fb5; background: #faf2fb; color: #8a4a8f; }
.mark { font: 600 11px system-ui, sans-serif; color: #fff; border-radius: 3px; padding: 0 5px; margin-right: 6px; }
.s0 .mark { background: #1f8a9e; } .s1 .mark { background: #c58a00; } .pad .mark { background: #b05fb5; }
.t { color: #9aa0a6; box-shadow: inset -1px 0 0 rgba(0,0,0,.06); }
.learn .t { color: #0b3d2e; background: #c9f0d6; font-weight: 600; }
.s1 .learn .t { color: #4a2c00; background: #ffe3a3; }
.t.sp { text-decoration: underline dotted; } .t:hover { outline: 1px solid #333; }
.nl::before { content: "\\21B5"; color: #c0c4c8; }
.ipad { color: #b05fb5; font: 600 11px system-ui, sans-serif; }
body.only .t:not(.L) { display: none; }
.controls { margin: 8px 0 0; color: #555; }
table.sources { border-collapse: collapse; margin: 4px 0 12px; }
table.sources th, table.sources td { padding: 2px 10px; border-bottom: 1px solid #e3e3e3; }
table.sources th { font-weight: 600; text-align: right; } table.sources th.name { text-align: left; }
table.sources td { text-align: right; font-variant-numeric: tabular-nums; } table.sources td.name { text-align: left; }
"""

SCRIPT = """
document.getElementById('only').addEventListener('change', function (e) {
  document.body.classList.toggle('only', e.target.checked);
});
"""


def _e(text: Any) -> str:
    return html.escape(str(text), quote=True)


def _token(view: View, i: int, decoder: Decoder | None, pieces: list[str] | None) -> str:
    token = int(view.input_ids[i])
    label = int(view.labels[i])
    title = f"id {token} · position {int(view.position_ids[i])} · label {label}"
    piece = pieces[i] if pieces is not None else f"{token} "
    classes = ["t"]
    if label != -100:
        classes.append("L")
    if decoder is not None and token in decoder.special:
        classes.append("sp")
    body = _e(piece).replace("\n", '<span class="nl"></span>\n')
    return f'<span class="{" ".join(classes)}" title="{_e(title)}">{body}</span>'


def _segment(view: View, number: int, segment: Segment, decoder: Decoder | None, pieces: list[str] | None) -> str:
    attrs = (
        f'data-row="{number}" data-seg="{segment.index}" data-start="{segment.start}" '
        f'data-end="{segment.end}" data-real-end="{segment.real_end}"'
    )
    if segment.padding:
        pad = int(view.input_ids[segment.start]) if segment.length else 0
        return (
            f'<div class="seg pad" {attrs} data-padding="1">'
            f'<span class="mark">pad × {segment.length:,} (id {pad})</span></div>'
        )
    from packcli.cli.show_render import segment_mark

    if segment.source is not None:
        attrs += f' data-source="{_e(segment.source)}"'
    if segment.pair is not None:
        attrs += f' data-pair="{segment.pair}" data-side="{segment.side}"'
    parts = [
        f'<div class="seg s{segment.index % 2}" {attrs}>',
        f'<span class="mark">{_e(segment_mark(segment))}</span>',
    ]
    runs = dict(view.learned_runs(segment))
    i = segment.start
    while i < segment.real_end:
        if i in runs:
            end = runs[i]
            inner = "".join(_token(view, j, decoder, pieces) for j in range(i, end))
            parts.append(f'<span class="learn" data-start="{i}" data-end="{end}">{inner}</span>')
            i = end
        else:
            parts.append(_token(view, i, decoder, pieces))
            i += 1
    if segment.end > segment.real_end:
        parts.append(f'<span class="ipad">pad × {segment.end - segment.real_end}</span>')
    parts.append("</div>")
    return "".join(parts)


def _head(view: View) -> str:
    from packcli.cli.show_render import header_line

    line = header_line(view).plain
    first, _, rest = line.partition("  ")
    where, _, figures = rest.partition("  ")
    return f'<div class="head">{_e(first)} <span class="where">{_e(where)}</span> · {_e(figures)}</div>'


def view_block(view: View, decoder: Decoder | None) -> str:
    number = view.header.get("row", view.header.get("record", 0))
    parts = [f'<div class="row" data-kind="{view.kind}" data-row="{number}" id="{view.kind}-{number}">', _head(view)]
    parts += [f'<div class="note">{_e(note)}</div>' for note in view.notes]
    pieces = decoder.pieces(view.input_ids) if decoder is not None else None
    parts += [_segment(view, number, segment, decoder, pieces) for segment in view.segments]
    parts.append("</div>")
    return "\n".join(parts)


# ----------------------------------------------------------------------------- stats


def _figures(report: Mapping[str, Any]) -> str:
    from packcli.cli.render import packing_lines

    lines = packing_lines(report)
    if report.get("mode"):
        lines.insert(
            0, ("mode", f"{report['mode']}" + (f" ({report['algorithm']})" if report.get("algorithm") else ""))
        )
    rows = "".join(f'<tr><td>{_e(name)}</td><td class="v">{_e(value)}</td></tr>' for name, value in lines)
    return f'<table class="figures">{rows}</table>'


def svg_histogram(title: str, bins: Sequence[Mapping[str, int]], width: int = 360, height: int = 170) -> str:
    """A bar chart of binned counts as inline SVG: bars, the title, the range at both ends."""
    left, bottom, top = 8, 28, 22
    plot_w, plot_h = width - 2 * left, height - bottom - top
    peak = max((b["count"] for b in bins), default=0) or 1
    bar_w = plot_w / max(len(bins), 1)
    bars = []
    for i, b in enumerate(bins):
        h = plot_h * b["count"] / peak
        x, y = left + i * bar_w, top + plot_h - h
        label = f"{b['from']:,}" if b["from"] == b["to"] else f"{b['from']:,}-{b['to']:,}"
        bars.append(
            f'<rect class="bar" x="{x:.1f}" y="{y:.1f}" width="{max(bar_w - 1, 1):.1f}" height="{h:.1f}">'
            f"<title>{_e(label)}: {b['count']:,}</title></rect>"
        )
    lo = f"{bins[0]['from']:,}" if bins else ""
    hi = f"{bins[-1]['to']:,}" if bins else ""
    return (
        f'<svg class="chart" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="{_e(title)}">'
        f'<text x="{left}" y="14">{_e(title)}</text>{"".join(bars)}'
        f'<line x1="{left}" y1="{top + plot_h}" x2="{left + plot_w}" y2="{top + plot_h}" stroke="#999"/>'
        f'<text x="{left}" y="{height - 10}">{lo}</text>'
        f'<text x="{left + plot_w}" y="{height - 10}" text-anchor="end">{hi}</text></svg>'
    )


def sources_table(sources: Sequence[Mapping[str, Any]]) -> str:
    """A mixture's sources, a row each: weights, shares, documents and tokens."""
    from packcli.cli.render import SOURCE_DOCUMENT_COLUMNS, SOURCE_MIX_COLUMNS, SOURCE_TOKEN_COLUMNS, source_cells

    columns = (*SOURCE_MIX_COLUMNS, *SOURCE_DOCUMENT_COLUMNS, *SOURCE_TOKEN_COLUMNS)
    headings = {column: f"documents {column}" if column in SOURCE_DOCUMENT_COLUMNS else column for column in columns}

    def cell(tag: str, column: str, text: str) -> str:
        kind = ' class="name"' if column == "source" else ""
        return f"<{tag}{kind}>{_e(text)}</{tag}>"

    head = "".join(cell("th", column, headings[column]) for column in columns)
    rows = "".join(
        "<tr>" + "".join(cell("td", column, cells[column]) for column in columns) + "</tr>"
        for cells in map(source_cells, sources)
    )
    return f'<table class="sources"><tr>{head}</tr>{rows}</table>'


def stats_section(report: Mapping[str, Any]) -> str:
    from packcli.cli.render import CHART_TITLES

    charts = "".join(
        svg_histogram(CHART_TITLES.get(name, name), bins) for name, bins in report["distributions"].items() if bins
    )
    sources = f"<h2>sources</h2>{sources_table(report['sources'])}" if report.get("sources") else ""
    return f'<section id="stats"><h2>stats</h2>{_figures(report)}{sources}<div class="charts">{charts}</div></section>'


# ----------------------------------------------------------------------------- pages


def page(title: str, body: str, controls: bool = False) -> str:
    toggle = (
        '<div class="controls"><label><input type="checkbox" id="only"> learned tokens only</label> · '
        "learned tokens highlighted, the others grey; hover a token for its id, position and label</div>"
        if controls
        else ""
    )
    script = f"<script>{SCRIPT}</script>" if controls else ""
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta name="viewport" content="width=device-width, initial-scale=1"><title>{_e(title)}</title>'
        f"<style>{STYLE}</style></head>\n<body><h1>{_e(title)}</h1>{toggle}\n{body}\n{script}</body></html>\n"
    )


def write_page(
    file: str,
    title: str,
    views: Sequence[View],
    decoder: Decoder | None,
    report: Mapping[str, Any] | None,
    bad: Sequence[Mapping[str, str]] = (),
) -> None:
    """The rows (or raw records) of `show`, with the output's stats on top when given."""
    parts = [stats_section(report)] if report is not None else []
    blocks = [view_block(view, decoder) for view in views]
    bad_lines = "".join(
        f'<div class="note">{_e(entry["location"])}: {_e(entry["problem"])} ({_e(entry["pack"])})</div>'
        for entry in bad
    )
    heading = "rows" if not views or views[0].kind == "row" else "records"
    parts.append(f'<section id="rows"><h2>{heading}</h2>{"".join(blocks)}{bad_lines}</section>')
    _write(file, page(title, "\n".join(parts), controls=True))


def write_stats_page(file: str, paths: Sequence[str], reports: Sequence[Mapping[str, Any]]) -> None:
    """`packcli stats --html`: the figures and charts of each output, one section each."""
    if len(reports) == 1:
        _write(file, page(f"packcli stats {paths[0]}", stats_section(reports[0])))
        return
    sections = [f"<h2>{_e(path)}</h2>{stats_section(report)}" for path, report in zip(paths, reports)]
    _write(file, page("packcli stats " + " ".join(paths), "\n".join(sections)))


def _write(file: str, text: str) -> None:
    try:
        Path(file).write_text(text, encoding="utf-8")
    except OSError as exc:
        raise PackcliError(f"--html {file}: cannot write the page ({exc.strerror or exc})") from exc
