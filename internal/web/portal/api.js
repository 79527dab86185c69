// What the portal and the console share: their client of usher's REST
// API (one request with the site's cookies, its answer as JSON, and an
// APIError carrying the API's error document: code, message, the field at
// fault) and the URL of a resource's icon.

export class APIError extends Error {
  constructor(status, code, message, { field = "", retryAfter = null } = {}) {
    super(message);
    this.status = status;
    this.code = code;
    // field is the request's field at fault, when the API names one.
    this.field = field;
    this.retryAfter = retryAfter;
  }
}

// request sends method path with body: a Blob (a file) as it is, its
// Content-Type in headers, anything else as JSON. It returns the answer's
// JSON document, null for none, and throws an APIError (status 0 when the
// site cannot be reached).
export async function request(method, path, body, headers = {}) {
  const init = { method, credentials: "same-origin", headers: { ...headers } };
  if (body instanceof Blob) {
    init.body = body;
  } else if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  let resp;
  try {
    resp = await fetch(path, init);
  } catch (e) {
    throw new APIError(0, "network", "The site cannot be reached. Check your connection and try again.");
  }
  if (resp.status === 204) return null;
  const text = await resp.text();
  let doc = null;
  try { doc = JSON.parse(text); } catch (e) { /* not JSON */ }
  if (!resp.ok) {
    const err = (doc && doc.error) || {};
    throw new APIError(resp.status, err.code || "", err.message || resp.statusText,
      { field: err.field || "", retryAfter: resp.headers.get("Retry-After") });
  }
  return doc;
}

// iconURL is the image of a resource's icon: its data URI, or the builtin
// icon it names, else the default of its kind ("application" or
// "desktop"), drawn by the server under /portal/icons/.
export function iconURL(icon, kind) {
  if (icon && icon.startsWith("data:image/")) return icon;
  const name = icon && icon.startsWith("builtin:") ? icon.slice(8) : kind;
  return /^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$/.test(name) ? "/portal/icons/" + name + ".png" : "/portal/icons/app.png";
}
