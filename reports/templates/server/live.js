// Live refresh: the server sends an event (/events) when a submission is added or moves a phase; the page's
// #live part is then fetched again and swapped in, so the rest of the page (and anything typed) stays.
(() => {
  const live = document.getElementById("live");
  if (!live || !window.EventSource) return;
  let last = null;
  let busy = false;
  const source = new EventSource("/events");
  source.onmessage = async (event) => {
    const changed = last !== null && event.data !== last;
    last = event.data;
    if (!changed || busy) return;
    busy = true;
    try {
      const response = await fetch(location.href, { credentials: "same-origin", cache: "no-store" });
      if (response.ok) {
        const fresh = new DOMParser().parseFromString(await response.text(), "text/html").getElementById("live");
        if (fresh) live.innerHTML = fresh.innerHTML;
        document.body.dataset.refreshed = String(Number(document.body.dataset.refreshed || 0) + 1);
      }
    } finally {
      busy = false;
    }
  };
})();
