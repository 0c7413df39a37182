"""The pieces of a self-contained HTML page: escaped text, tables from DataFrames, matplotlib
figures embedded as base64 PNG, one small inline style sheet; no script, no external file."""
from __future__ import annotations

import base64
import html
import io

import numpy as np
import pandas as pd

CSS = """
body { font: 15px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: #1b1b1b;
       max-width: 1100px; margin: 1.5em auto; padding: 0 1em; }
h1 { font-size: 1.6em; margin-bottom: 0.2em; } h2 { border-bottom: 2px solid #ddd;
     padding-bottom: 0.2em; margin-top: 1.8em; } h3 { margin-bottom: 0.3em; }
p.meta, p.note { color: #555; } p.note { font-style: italic; }
nav ul { columns: 2; } code { background: #f3f3f3; padding: 0 0.25em; }
table.data { border-collapse: collapse; margin: 0.6em 0; font-size: 0.88em; }
table.data th, table.data td { border: 1px solid #ccc; padding: 0.2em 0.55em; text-align: right; }
table.data td { white-space: nowrap; } table.data th { background: #f0f2f5; } table.data td:first-child,
table.data th:first-child { text-align: left; }
.figs { display: flex; flex-wrap: wrap; gap: 1em; } figure { margin: 0.4em 0; }
figcaption { color: #555; font-size: 0.85em; max-width: 520px; }
img { max-width: 100%; height: auto; border: 1px solid #eee; }
"""


def esc(text) -> str:
    """``text`` escaped for HTML (quotes included)."""
    return html.escape(str(text), quote=True)


def number(value) -> str:
    """A table cell: floats to 4 significant digits, missing values as an en dash."""
    if isinstance(value, (bool, np.bool_)):
        return "yes" if value else "no"
    if isinstance(value, (float, np.floating)):
        return "–" if np.isnan(value) else f"{value:.4g}"
    return str(value)


def table(df: pd.DataFrame, index: bool = True) -> str:
    """``df`` as an HTML table (cells escaped, numbers formatted by :func:`number`)."""
    shown = df.copy()
    for col in shown.columns:
        shown[col] = [number(v) for v in shown[col]]
    return shown.to_html(index=index, border=0, classes="data", escape=True, na_rep="–")


def key_values(pairs, header=("quantity", "value")) -> str:
    """A two-column table of ``(key, value)`` pairs."""
    return table(pd.DataFrame(list(pairs), columns=list(header)), index=False)


def figure(fig, caption: str, alt: str) -> str:
    """The matplotlib figure ``fig`` (a :class:`~matplotlib.figure.Figure` outside pyplot,
    :func:`approxcv.report.plot.figure_axes`) as an embedded PNG with a caption."""
    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png", dpi=100)
    data = base64.b64encode(buf.getvalue()).decode("ascii")
    return (f'<figure><img src="data:image/png;base64,{data}" alt="{esc(alt)}">'
            f"<figcaption>{esc(caption)}</figcaption></figure>")


def note(text: str) -> str:
    """A paragraph of explanation."""
    return f'<p class="note">{esc(text)}</p>'


def section(anchor: str, title: str, body: str) -> str:
    """A ``<section>`` with the id ``anchor`` and a heading."""
    return f'<section id="{esc(anchor)}"><h2>{esc(title)}</h2>\n{body}\n</section>'


def page(title: str, meta: str, sections: list[tuple[str, str, str]]) -> str:
    """The whole document: a title, a line of ``meta``, a table of contents, the
    ``(anchor, title, body)`` sections."""
    toc = "".join(f'<li><a href="#{esc(a)}">{esc(t)}</a></li>' for a, t, _ in sections)
    body = "\n".join(section(a, t, b) for a, t, b in sections)
    return (f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            f"<title>{esc(title)}</title>\n<style>{CSS}</style>\n</head>\n<body>\n"
            f"<h1>{esc(title)}</h1>\n<p class=\"meta\">{meta}</p>\n"
            f"<nav><ul>{toc}</ul></nav>\n{body}\n</body>\n</html>\n")
