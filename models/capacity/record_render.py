"""The generic document behind the capacity plan's decision record and plan comparison
(models/capacity/record.py holds what they say): blocks (tables, name: value fields,
paragraphs, bullet lists, blanks for a person to fill in) grouped in titled sections, and
their Markdown and HTML renderers. The HTML is one self-contained page (one <style>, no script,
every value escaped) that prints on A4 or Letter; the Markdown escapes pipes and raw HTML.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

# ---------------------------------------------------------------------------- document model


class Blank:
    """A field left for a person to fill in on the printed record."""

    def __init__(self, hint: str = "") -> None:
        self.hint = hint


Cell = str | Blank


@dataclass
class Table:
    head: list[str]
    rows: list[list[Cell]]
    #: columns that hold numbers (right-aligned)
    numeric: frozenset[int] = frozenset()


@dataclass
class Fields:
    """A list of name: value lines."""

    pairs: list[tuple[str, Cell]]


@dataclass
class Para:
    text: str


@dataclass
class Bullets:
    items: list[str]


Block = Table | Fields | Para | Bullets


@dataclass
class Section:
    title: str
    blocks: list[Block] = field(default_factory=list)
    #: 2: a section; 3: a pool inside "Results"
    level: int = 2


# ---------------------------------------------------------------------------- Markdown


def _md(text: str) -> str:
    """Text safe inside a Markdown table cell or line: no pipes, no newlines, no raw HTML."""
    return (
        " ".join(text.split())
        .replace("\\", "\\\\")
        .replace("|", "\\|")
        .replace("<", "&lt;")
        .replace(">", "&gt;")
    )


def _md_cell(cell: Cell) -> str:
    if isinstance(cell, Blank):
        return "\\_" * 12 + (f" ({_md(cell.hint)})" if cell.hint else "")
    return _md(cell)


def markdown_table(table: Table) -> list[str]:
    aligns = ["---:" if i in table.numeric else "---" for i in range(len(table.head))]
    lines = [
        "| " + " | ".join(_md(h) for h in table.head) + " |",
        "| " + " | ".join(aligns) + " |",
    ]
    lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in table.rows]
    return lines


def _md_blocks(blocks: Iterable[Block]) -> list[str]:
    out: list[str] = []
    for b in blocks:
        if isinstance(b, Table):
            out += markdown_table(b)
        elif isinstance(b, Fields):
            out += [f"- **{_md(k)}:** {_md_cell(v)}" for k, v in b.pairs]
        elif isinstance(b, Bullets):
            out += [f"- {_md(i)}" for i in b.items]
        else:
            out.append(_md(b.text))
        out.append("")
    return out


def markdown_document(title: str, sections: Sequence[Section]) -> str:
    """A titled document of sections as Markdown."""
    lines = [f"# {_md(title)}", ""]
    for s in sections:
        lines += ["#" * s.level + " " + _md(s.title), "", *_md_blocks(s.blocks)]
    return "\n".join(lines).rstrip() + "\n"


# ---------------------------------------------------------------------------- HTML

_STYLE = """
@page { size: auto; margin: 14mm; }
body { font: 10.5pt/1.4 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif;
       color: #111; max-width: 64rem; margin: 1.5rem auto; padding: 0 1rem; }
h1 { font-size: 1.5rem; margin: 0 0 .75rem; }
h2 { font-size: 1.15rem; margin: 1.5rem 0 .5rem; border-bottom: 1px solid #999; }
h3 { font-size: 1rem; margin: 1.1rem 0 .4rem; }
table { border-collapse: collapse; width: 100%; margin: .4rem 0 .8rem; font-size: 9pt; }
th, td { border: 1px solid #bbb; padding: .2rem .35rem; text-align: left; vertical-align: top; }
th { background: #eee; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
dl { display: grid; grid-template-columns: max-content 1fr; gap: .15rem 1rem; margin: .4rem 0; }
dt { font-weight: 600; }
dd { margin: 0; }
.blank { display: inline-block; min-width: 16rem; border-bottom: 1px solid #111;
         height: 1.1em; color: #777; font-size: 8pt; vertical-align: bottom; }
section, table, dl { break-inside: avoid; }
tr { break-inside: avoid; }
@media print { body { margin: 0; max-width: none; } h2 { break-after: avoid; } }
"""


def _h(text: str) -> str:
    return html.escape(text, quote=True)


def _html_cell(cell: Cell) -> str:
    if isinstance(cell, Blank):
        return f'<span class="blank">{_h(cell.hint)}</span>'
    return _h(cell)


def _html_blocks(blocks: Iterable[Block]) -> list[str]:
    out: list[str] = []
    for b in blocks:
        if isinstance(b, Table):
            out.append("<table>")
            out.append(
                "<thead><tr>" + "".join(f"<th>{_h(h)}</th>" for h in b.head) + "</tr></thead>"
            )
            out.append("<tbody>")
            for row in b.rows:
                cells = "".join(
                    f'<td class="num">{_html_cell(c)}</td>'
                    if i in b.numeric
                    else f"<td>{_html_cell(c)}</td>"
                    for i, c in enumerate(row)
                )
                out.append(f"<tr>{cells}</tr>")
            out.append("</tbody></table>")
        elif isinstance(b, Fields):
            out.append("<dl>")
            out += [f"<dt>{_h(k)}</dt><dd>{_html_cell(v)}</dd>" for k, v in b.pairs]
            out.append("</dl>")
        elif isinstance(b, Bullets):
            out.append("<ul>" + "".join(f"<li>{_h(i)}</li>" for i in b.items) + "</ul>")
        else:
            out.append(f"<p>{_h(b.text)}</p>")
    return out


def html_document(title: str, sections: Sequence[Section]) -> str:
    """A titled document of sections as one self-contained, print-ready HTML page."""
    body: list[str] = [f"<h1>{_h(title)}</h1>"]
    for s in sections:
        tag = f"h{s.level}"
        body.append(f"<section><{tag}>{_h(s.title)}</{tag}>")
        body += _html_blocks(s.blocks)
        body.append("</section>")
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{_h(title)}</title><style>{_STYLE}</style></head>\n<body>\n"
        + "\n".join(body)
        + "\n</body></html>\n"
    )
