"""One self-contained report.html: the tables and the PNG figures embedded as base64, no external assets."""

from __future__ import annotations

import base64
import html
from collections.abc import Sequence
from datetime import UTC, datetime

from harness.results.render.report_tables import SMALL_SAMPLE_MARK, Table

_STYLE = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,sans-serif;margin:24px auto;max-width:1600px;padding:0 20px;color:#222}
h1{font-size:22px}h2{font-size:17px;margin-top:28px;border-bottom:1px solid #ddd}
table{border-collapse:collapse;margin:8px 0 18px;font:11.5px ui-monospace,Menlo,monospace}
th,td{border:1px solid #ddd;padding:3px 6px;text-align:right}th{background:#f4f4f4;vertical-align:bottom}
td{white-space:nowrap}div.w{white-space:normal;min-width:14ch;max-width:30ch}
.wide{overflow-x:auto}
td.l,th.l{text-align:left}.note{color:#555;font-size:13px}img{max-width:100%;border:1px solid #eee;margin:6px 0}
caption{text-align:left;font-weight:600;padding:4px 0;white-space:pre-line}
td.small{color:#999}figure{margin:14px 0 22px}figcaption{color:#444;font-size:13px;max-width:1000px}
.ending{padding:8px 12px;margin:10px 0;border-left:5px solid #2a7;background:#f2faf5;font-weight:600}
.ending.cut{border-color:#c33;background:#fdf1f1}
.verdicts{padding:6px 12px;margin:10px 0;border-left:5px solid #2a7;background:#f2faf5}
.verdicts.crossed{border-color:#c33;background:#fdf1f1}.verdicts p{font-weight:600;margin:4px 0}
"""


FIT_CHARACTERS = 175
"""How many monospace characters of cells (with ~2 per column for padding and borders) a table may take before
it is split: a 1400 px window shows about 190 at the tables' 11.5 px font, less the page's margins."""
WRAPPED_CHARACTERS = 30
"""A left-aligned text column after the first (failures by kind, by phase) wraps at about this width."""


def column_widths(table: Table) -> list[int]:
    """Characters each column takes as rendered: headers wrap at spaces (their longest word), cells do not,
    except the wrapping text columns."""
    widths = []
    for i, head in enumerate(table.header):
        cells = max((len(row[i]) for row in table.rows if i < len(row)), default=0)
        if i in table.left and i > 0:
            cells = min(cells, WRAPPED_CHARACTERS)
        widths.append(max(cells, *(len(word) for word in head.split() or [""])) + 2)
    return widths


def split_to_fit(table: Table, limit: int = FIT_CHARACTERS) -> list[Table]:
    """A table too wide for a 1400 px window as several, each repeating the first column (the stage or run):
    the columns are cut, in order, where the next one would pass `limit`."""
    widths = column_widths(table)
    if sum(widths) <= limit or len(widths) < 3:
        return [table]
    parts: list[list[int]] = [[]]
    used = widths[0]
    for i in range(1, len(widths)):
        if parts[-1] and used + widths[i] > limit:
            parts.append([])
            used = widths[0]
        parts[-1].append(i)
        used += widths[i]
    tables = []
    for n, columns in enumerate(parts):
        keep = [0, *columns]
        title = table.title if n == 0 else f"{table.title.splitlines()[0] if table.title else ''} (continued)".strip()
        tables.append(
            Table(
                title,
                [table.header[i] for i in keep],
                [[row[i] for i in keep] for row in table.rows],
                frozenset(j for j, i in enumerate(keep) if i in table.left),
            )
        )
    return tables


def table_html(table: Table) -> str:
    """The table, split (first column repeated) where it would not fit a 1400 px window."""
    return "".join(_one_table_html(part) for part in split_to_fit(table))


def _one_table_html(table: Table) -> str:
    def cell(tag: str, index: int, text: str) -> str:
        classes = ["l"] if index in table.left else []
        if tag == "td" and text.endswith(SMALL_SAMPLE_MARK):
            classes.append("small")  # a quantile from too few samples (quantiles.supported): greyed, `~` kept
        cls = f' class="{" ".join(classes)}"' if classes else ""
        content = html.escape(text)
        if tag == "td" and index in table.left and index > 0:  # a text column (failures by kind) wraps
            content = f"<div class='w'>{content}</div>"
        return f"<{tag}{cls}>{content}</{tag}>"

    head = "".join(cell("th", i, h) for i, h in enumerate(table.header))
    body = "".join("<tr>" + "".join(cell("td", i, c) for i, c in enumerate(row)) + "</tr>" for row in table.rows)
    caption = f"<caption>{html.escape(table.title)}</caption>" if table.title else ""
    return f"<div class='wide'><table>{caption}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>"


def image_html(png: bytes, alt: str) -> str:
    """The figure embedded, its caption (what it shows and how to read it) printed under it."""
    data = base64.b64encode(png).decode("ascii")
    text = html.escape(alt)
    return f'<figure><img alt="{text}" src="data:image/png;base64,{data}"><figcaption>{text}</figcaption></figure>'


def render(
    title: str,
    notes: Sequence[str],
    sections: Sequence[tuple[str, Sequence[Table], Sequence[tuple[str, bytes]]]],
    footnotes: Sequence[str] = (),
    endings: Sequence[tuple[str, bool]] = (),
    thresholds: tuple[str, Table, bool] | None = None,
) -> str:
    """Sections are (heading, tables, figures as (alt, png)); notes go under the title, footnotes at the end.

    `thresholds`: (headline, every threshold and its verdict, crossed?), the first thing under the title (red when
    one is crossed: the exit status is 99 whatever the run's own ending); then `endings`: how each run ended, as
    (line, cut short), red when cut short.
    """
    verdicts = []
    if thresholds is not None:
        headline, table, crossed = thresholds
        verdicts = [
            f"<div class='verdicts{' crossed' if crossed else ''}'><p>{html.escape(headline)}</p>"
            f"{table_html(table)}</div>"
        ]
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        f"<title>{html.escape(title)}</title><style>{_STYLE}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
        *verdicts,
        *(f"<p class='ending{' cut' if cut else ''}'>{html.escape(line)}</p>" for line, cut in endings),
        f"<p class='note'>generated {datetime.now(UTC).strftime('%Y-%m-%d %H:%M:%SZ')}</p>",
    ]
    parts += [f"<p class='note'>{html.escape(note)}</p>" for note in notes]
    for heading, tables, figures in sections:
        parts.append(f"<h2>{html.escape(heading)}</h2>")
        parts += [table_html(t) for t in tables]
        parts += [image_html(png, alt) for alt, png in figures]
    if footnotes:
        parts.append("<h2>How to read this</h2><ul class='note'>")
        parts += [f"<li>{html.escape(f)}</li>" for f in footnotes]
        parts.append("</ul>")
    parts.append("</body></html>")
    return "\n".join(parts)
