"""`htgrid web`: the pool seen in a browser, served by the schedd under /web.

- `app.web_routes(sources, authenticate)`: the pages (queue, a job, pool, grid
  resources, CE routes), mounted in the schedd's API app on both its listeners, each
  naming its caller with that listener's authenticator (the kernel's word on the Unix
  socket, the bearer token over TLS: `CookieBearer` lets a browser present it from the
  cookie the sign-in form sets).
- `_data.Sources`: where the pages' data comes from (the queue's reads, the collector,
  the router's configuration, the users' event logs read with their rights).
- `proxy`: `htgrid web` on the pool's host: a local proxy from 127.0.0.1 to the schedd's
  Unix socket, so the local user needs no token.

Charts are SVG drawn on the server (`_svg`); the live part of a page is fetched again
by `static/web.js` every 2 s. Users see their own jobs only, administrators everyone's.
"""

from __future__ import annotations

from htgrid.web._data import JobSource, Sources

__all__ = ["JobSource", "Sources"]
