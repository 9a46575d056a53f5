// htgrid web: the page's live part (<main data-live>) is fetched again every few
// seconds and replaced, without reloading. The server escapes everything it sends;
// this script adds no markup of its own from data.
"use strict";
(function () {
  const main = document.getElementById("live");
  if (!main || !main.dataset.live) return;
  const every = 2000;
  let last = null;
  let busy = false;
  const stamp = document.createElement("p");
  stamp.className = "stamp";
  stamp.id = "updated";
  main.before(stamp);

  function liveUrl() {
    const url = new URL(window.location.href);
    url.searchParams.set("live", "1");
    return url.toString();
  }

  async function refresh() {
    if (busy || document.hidden) return;
    busy = true;
    try {
      const answer = await fetch(liveUrl(), {
        credentials: "same-origin",
        cache: "no-store",
        headers: { Accept: "text/html" },
      });
      if (answer.status === 401 || answer.status === 403) {
        window.location.reload(); // signed out, or the token expired: the sign-in form
        return;
      }
      if (!answer.ok) {
        stamp.textContent = "The pool did not answer the last update (" + answer.status + ").";
        stamp.classList.add("stale");
        return;
      }
      const text = await answer.text();
      if (text !== last) {
        last = text;
        main.innerHTML = text;
      }
      stamp.textContent = "Updated " + new Date().toLocaleTimeString();
      stamp.classList.remove("stale");
    } catch (err) {
      stamp.textContent = "Cannot reach the pool: " + err;
      stamp.classList.add("stale");
    } finally {
      busy = false;
    }
  }

  stamp.textContent = "Live: updated every " + every / 1000 + " s";
  window.setInterval(refresh, every);
  document.addEventListener("visibilitychange", refresh);
})();
