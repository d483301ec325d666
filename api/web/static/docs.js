// /docs: the API reference. It reads the served OpenAPI document, makes
// the scheme and host that serve this page the defaults of the document's
// server variables (the document itself says localhost:8080, right for a
// client generated from a saved copy, wrong for "try it" on any other
// port or host), and hands the document to Stoplight Elements.
(async function () {
  "use strict";
  const elements = document.querySelector("elements-api");
  const resp = await fetch("/openapi.json", { credentials: "same-origin" });
  if (!resp.ok) {
    elements.replaceWith(document.createTextNode("The OpenAPI document could not be loaded: HTTP " + resp.status));
    return;
  }
  const doc = await resp.json();
  const scheme = location.protocol.replace(/:$/, "");
  for (const server of doc.servers || []) {
    const vars = server.variables || {};
    if (vars.host) vars.host.default = location.host;
    if (vars.scheme && (!vars.scheme.enum || vars.scheme.enum.includes(scheme))) vars.scheme.default = scheme;
  }
  elements.apiDescriptionDocument = doc;
})();
