"""HTML made safe by construction: text is escaped unless it is `Html` already.

    el("td", {"class": "num"}, count)          # <td class="num">3</td>
    el("a", {"href": url}, name)               # both escaped
    Html("<br>")                               # markup this module's callers wrote

Everything that comes from a job ad, a route, a slot or a request passes through `esc`
(by way of `el`), so a job's `<script>` in an attribute shows as text, never as markup.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Mapping
from urllib.parse import urlencode

__all__ = ["Html", "el", "esc", "join", "link"]


class Html(str):
    """Markup that is safe as it is (made by `el`, `esc` or this package's own text)."""

    __slots__ = ()


def esc(value: object) -> Html:
    """`value` as HTML text (quotes escaped too, for attribute values)."""
    if isinstance(value, Html):
        return value
    if value is None:
        return Html("")
    return Html(html.escape(str(value), quote=True))


def join(children: Iterable[object]) -> Html:
    """The children, each escaped unless `Html`, in order (nested iterables flattened)."""
    parts: list[str] = []
    for child in children:
        if child is None:
            continue
        if isinstance(child, str | int | float):
            parts.append(esc(child))
        else:
            parts.append(join(child))  # type: ignore[arg-type]
    return Html("".join(parts))


_VOID = frozenset({"br", "hr", "img", "input", "meta", "link"})


def el(tag: str, attrs: Mapping[str, object] | None = None, *children: object) -> Html:
    """An element: `attrs` with a None or False value are left out, True is the bare
    name; attribute values and text children are escaped."""
    parts = [f"<{tag}"]
    for name, value in (attrs or {}).items():
        if value is None or value is False:
            continue
        if value is True:
            parts.append(f" {name}")
        else:
            parts.append(f' {name}="{esc(value)}"')
    parts.append(">")
    if tag in _VOID:
        return Html("".join(parts))
    return Html("".join(parts) + join(children) + f"</{tag}>")


def link(path: str, text: object, query: Mapping[str, object] | None = None) -> Html:
    """An `<a>` to `path` (this site's) with an encoded query."""
    href = path
    if query:
        pairs = {k: str(v) for k, v in query.items() if v not in (None, "")}
        if pairs:
            href += "?" + urlencode(pairs)
    return el("a", {"href": href}, text)
