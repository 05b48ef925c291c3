// Manta's console: one module, no framework, no build step (docs/architecture.md, "The console"). Pages are
// picked by the location's hash; each open page holds at most one EventSource stream from the API server, which
// keeps the Kubernetes watches behind it. The signed-in token lives in an HttpOnly cookie this script never sees;
// writes carry the X-Manta-Console header, which the server asks for before it accepts that cookie on them.

import { h, age, stateClass } from "./dom.js";

const KINDS = [
  { kind: "RayCluster", plural: "rayclusters", title: "Ray clusters", suspend: true },
  { kind: "RayJob", plural: "rayjobs", title: "Ray jobs", suspend: true },
  { kind: "RayService", plural: "rayservices", title: "Ray services", suspend: false },
  { kind: "RayCronJob", plural: "raycronjobs", title: "Ray cron jobs", suspend: true },
  { kind: "ImagePullJob", plural: "imagepulljobs", title: "Image pull jobs", suspend: false },
];
const byKind = Object.fromEntries(KINDS.map((k) => [k.kind, k]));
const byPlural = Object.fromEntries(KINDS.map((k) => [k.plural, k]));

const main = document.getElementById("main");
let stream = null; // the page's one EventSource
let logAbort = null; // the log being followed, if any
// view counts the pages shown: a page that awaited something opens its stream only if it is still the one shown,
// or a quick change of page would leave an EventSource nobody closes.
let view = 0;

function closeStreams() {
  view++;
  if (stream) stream.close();
  stream = null;
  if (logAbort) logAbort.abort();
  logAbort = null;
}

// openStream opens the stream of the page shown as view v, unless another page has been shown since.
function openStream(v, url) {
  if (v !== view) return null;
  stream = new EventSource(url);
  return stream;
}

// api calls the API server as the signed-in browser; writes carry the console's header.
async function api(method, path, body, headers = {}) {
  const init = { method, headers: { Accept: "application/json", "X-Manta-Console": "1", ...headers }, credentials: "same-origin" };
  if (body !== undefined) {
    init.body = typeof body === "string" ? body : JSON.stringify(body);
    if (!init.headers["Content-Type"]) init.headers["Content-Type"] = "application/json";
  }
  const res = await fetch(path, init);
  let data = null;
  const text = await res.text();
  try { data = text ? JSON.parse(text) : null; } catch { data = { message: text }; }
  if (res.status === 401) {
    showSignIn("Your session has ended or the token is not valid: sign in again.");
    throw new Error("unauthenticated");
  }
  return { ok: res.ok, status: res.status, data };
}

function message(data) {
  return (data && (data.message || data.error)) || "request failed";
}

// violations reads field errors from the REST API's google.rpc.Status (details[].fieldViolations).
function violations(data) {
  const out = [];
  for (const d of (data && data.details) || []) for (const v of d.fieldViolations || []) out.push(v);
  return out;
}

let session = null;

async function start() {
  document.getElementById("signout").addEventListener("click", signOut);
  window.addEventListener("hashchange", route);
  // A page left for another is kept by the browser in its back/forward cache, open connections and all: Chromium
  // held the stream, and the API server its Kubernetes watches, for about a minute after the page was left. So the
  // streams close when the page is hidden, and the page opens them again if the browser brings it back.
  window.addEventListener("pagehide", closeStreams);
  window.addEventListener("pageshow", (ev) => { if (ev.persisted) route(); });
  let r;
  try {
    r = await api("GET", "/console/api/session");
  } catch {
    return;
  }
  if (!r.ok) {
    main.replaceChildren(h("p", { class: "errors" }, message(r.data)));
    return;
  }
  signedIn(r.data);
}

function signedIn(s) {
  session = s;
  document.getElementById("who").textContent = s.auth === "none" ? "authentication off (auth none)" : "Signed in as " + s.user;
  document.getElementById("signout").hidden = s.auth === "none";
  route();
}

function showSignIn(note) {
  closeStreams();
  session = null;
  document.getElementById("who").textContent = "";
  document.getElementById("signout").hidden = true;
  const token = h("textarea", { id: "token", rows: 5, required: true, autocomplete: "off", spellcheck: "false", "aria-describedby": "token-hint" });
  const err = h("p", { class: "errors", role: "alert", id: "signin-error" });
  const form = h("form", { class: "signin", "aria-labelledby": "signin-title" },
    h("h1", { id: "signin-title" }, "Sign in"),
    note ? h("p", {}, note) : null,
    h("p", {}, h("label", { for: "token" }, "Kubernetes bearer token")),
    token,
    h("p", { id: "token-hint", class: "status-line" },
      "The console acts with this token's rights, as kubectl would. For a ServiceAccount: kubectl create token <name> -n <namespace>."),
    err,
    h("button", { type: "submit", class: "primary", id: "signin" }, "Sign in"));
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    err.textContent = "";
    const res = await fetch("/console/api/session", {
      method: "POST", credentials: "same-origin",
      headers: { Authorization: "Bearer " + token.value.trim(), "X-Manta-Console": "1", Accept: "application/json" },
    });
    const data = await res.json().catch(() => ({}));
    if (!res.ok) {
      err.textContent = message(data);
      token.focus();
      return;
    }
    token.value = "";
    signedIn(data);
  });
  main.replaceChildren(form);
  token.focus();
}

async function signOut() {
  closeStreams();
  await api("DELETE", "/console/api/session").catch(() => {});
  location.hash = "#/";
  showSignIn("Signed out.");
}

// route shows the page the hash names: #/ (all namespaces), #/ns/<ns>, #/ns/<ns>/<plural>/<name>, #/new-rayjob?ns=.
function route() {
  if (!session) return;
  closeStreams();
  const [path, query] = location.hash.replace(/^#/, "").split("?");
  const params = new URLSearchParams(query || "");
  const parts = path.split("/").filter(Boolean).map(decodeURIComponent);
  if (parts[0] === "new-rayjob") return jobForm(params.get("ns") || "");
  if (parts[0] === "ns" && parts.length === 4) return detailPage(parts[1], parts[2], parts[3]);
  if (parts[0] === "ns" && parts.length === 2) return listPage(parts[1]);
  return listPage("");
}

function nsLink(ns) {
  return ns ? "#/ns/" + encodeURIComponent(ns) : "#/";
}

function objectLink(it) {
  return "#/ns/" + encodeURIComponent(it.namespace) + "/" + byKind[it.kind].plural + "/" + encodeURIComponent(it.name);
}

// namespaceSwitcher is a select of the namespaces the caller may list; with navigate, choosing one opens its list.
async function namespaceSwitcher(current, navigate) {
  const sel = h("select", { id: "namespace" }, h("option", { value: "" }, "All namespaces"));
  const r = await api("GET", "/console/api/namespaces");
  const names = r.ok ? r.data.namespaces.map((n) => n.name) : [];
  if (current && !names.includes(current)) names.push(current);
  for (const n of names.sort()) sel.append(h("option", { value: n, selected: n === current }, n));
  sel.value = current;
  if (navigate) sel.addEventListener("change", () => { location.hash = nsLink(sel.value); });
  return { sel, names };
}

async function listPage(ns) {
  const v = view;
  const { sel } = await namespaceSwitcher(ns, true);
  if (v !== view) return;
  const status = h("p", { class: "status-line", role: "status", id: "stream-status" }, "Connecting…");
  const errors = h("ul", { class: "errors", id: "stream-errors", "aria-live": "polite" });
  const tables = h("div", { id: "lists" });
  main.replaceChildren(
    h("h1", {}, ns ? "Namespace " + ns : "All namespaces"),
    h("div", { class: "toolbar" },
      h("label", { for: "namespace" }, "Namespace"), sel,
      h("a", { href: "#/new-rayjob?ns=" + encodeURIComponent(ns), id: "new-rayjob" }, "New RayJob")),
    status, errors, tables);

  // items: key kind/namespace/name → item; scopes: which (kind, namespace) lists have answered.
  const items = new Map();
  let pending = false;
  const render = () => {
    pending = false;
    const sections = KINDS.map((k) => {
      const rows = [...items.values()].filter((it) => it.kind === k.kind)
        .sort((a, b) => a.namespace.localeCompare(b.namespace) || a.name.localeCompare(b.name));
      return h("table", { "data-kind": k.kind },
        h("caption", {}, `${k.title} (${rows.length})`),
        h("thead", {}, h("tr", {}, ["Name", "Namespace", "State", "Status", "Age"].map((c) => h("th", { scope: "col" }, c)))),
        h("tbody", {}, rows.length === 0
          ? h("tr", {}, h("td", { colspan: 5, class: "empty" }, "none"))
          : rows.map((it) => h("tr", { "data-name": it.name, "data-namespace": it.namespace },
            h("td", {}, h("a", { href: objectLink(it) }, it.name)),
            h("td", {}, it.namespace),
            h("td", { class: "state " + stateClass(it.state) }, it.state),
            h("td", {}, it.summary),
            h("td", { class: "num" }, age(it.created))))));
    });
    tables.replaceChildren(...sections);
  };
  const later = () => { if (!pending) { pending = true; requestAnimationFrame(render); } };
  render();

  const key = (it) => it.kind + "/" + it.namespace + "/" + it.name;
  const url = "/console/api/stream" + (ns ? "?namespace=" + encodeURIComponent(ns) : "");
  if (!openStream(v, url)) return;
  let answered = 0, targets = 0;
  stream.addEventListener("targets", (e) => { targets = JSON.parse(e.data); answered = 0; errors.replaceChildren(); });
  stream.addEventListener("snapshot", (e) => {
    const s = JSON.parse(e.data);
    for (const [k, it] of items) if (it.kind === s.kind && (!s.namespace || it.namespace === s.namespace)) items.delete(k);
    for (const it of s.items) items.set(key(it), it);
    answered++;
    status.textContent = answered >= targets ? "Live: changes appear as they happen." : `Loading (${answered} of ${targets} lists)…`;
    later();
  });
  stream.addEventListener("change", (e) => {
    const c = JSON.parse(e.data);
    if (c.type === "DELETED") items.delete(key(c.item)); else items.set(key(c.item), c.item);
    later();
  });
  stream.addEventListener("error", (e) => {
    if (e.data) {
      const se = JSON.parse(e.data);
      errors.append(h("li", {}, `${se.kind}${se.namespace ? " in " + se.namespace : ""}: ${se.forbidden ? "not permitted: " : ""}${se.message}`));
    } else {
      status.textContent = "Disconnected; reconnecting…";
    }
  });
}

async function detailPage(ns, plural, name) {
  const v = view;
  const k = byPlural[plural];
  if (!k) {
    main.replaceChildren(h("p", { class: "errors" }, "Unknown kind " + plural));
    return;
  }
  const head = h("div", { id: "summary" });
  const podsBox = h("div", { id: "pods" });
  const eventsBox = h("div", { id: "events" });
  const logBox = h("section", { id: "logs", "aria-labelledby": "logs-title", hidden: true });
  const objectBox = h("pre", { class: "object", id: "object-json" });
  const errors = h("ul", { class: "errors", "aria-live": "polite" });
  const actionError = h("p", { class: "errors", role: "alert", id: "action-error" });
  main.replaceChildren(
    h("p", {}, h("a", { href: nsLink(ns) }, "← " + (ns ? "Namespace " + ns : "All namespaces"))),
    h("h1", {}, `${k.kind} ${name}`),
    errors, actionError, head,
    h("h2", { id: "pods-title" }, "Pods"), podsBox,
    logBox,
    h("h2", { id: "events-title" }, "Events"), eventsBox,
    h("details", {}, h("summary", {}, "The object as Kubernetes stores it"), objectBox));

  const renderItem = (it) => {
    if (!it) {
      head.replaceChildren(h("p", { class: "empty" }, "This object does not exist (any more), or you may not read it."));
      return;
    }
    const actions = h("div", { class: "toolbar" });
    if (it.suspend !== undefined && it.suspend !== null) {
      const next = !it.suspend;
      actions.append(h("button", { type: "button", id: next ? "suspend" : "resume", onclick: () => setSuspend(ns, k, name, next, actionError) }, next ? "Suspend" : "Resume"));
    }
    actions.append(h("button", { type: "button", class: "danger", id: "delete", onclick: () => remove(ns, k, name, actionError) }, "Delete"));
    if (it.dashboard) actions.append(h("a", { href: it.dashboard, target: "_blank", rel: "noopener", id: "ray-dashboard" }, "Ray dashboard ↗"));
    const facts = h("dl", { class: "facts" },
      h("dt", {}, "Namespace"), h("dd", {}, it.namespace),
      h("dt", {}, "State"), h("dd", { class: "state " + stateClass(it.state), id: "state" }, it.state),
      h("dt", {}, "Status"), h("dd", {}, it.summary || "—"),
      h("dt", {}, "Created"), h("dd", {}, new Date(it.created).toLocaleString() + " (" + age(it.created) + " ago)"),
      it.kind !== "RayCluster" && it.clusters && it.clusters.length ? [h("dt", {}, "Ray clusters"), h("dd", {}, it.clusters.map((c, i) => [i ? ", " : "", h("a", { href: "#/ns/" + encodeURIComponent(ns) + "/rayclusters/" + encodeURIComponent(c) }, c)]))] : null);
    const parts = [actions, h("div", { class: "card" }, facts)];
    if (it.conditions && it.conditions.length) {
      parts.push(h("table", {}, h("caption", {}, "Conditions"),
        h("thead", {}, h("tr", {}, ["Type", "Status", "Reason", "Message", "Since"].map((c) => h("th", { scope: "col" }, c)))),
        h("tbody", {}, it.conditions.map((c) => h("tr", {}, h("td", {}, c.type), h("td", {}, c.status), h("td", {}, c.reason || ""), h("td", {}, c.message || ""), h("td", {}, age(c.since) + " ago"))))));
    }
    if (it.phases && it.phases.length) {
      parts.push(h("table", {}, h("caption", {}, "Phases"),
        h("thead", {}, h("tr", {}, h("th", { scope: "col" }, "State"), h("th", { scope: "col" }, "Entered"))),
        h("tbody", {}, it.phases.map((p) => h("tr", {}, h("td", {}, p.state), h("td", {}, new Date(p.at).toLocaleString()))))));
    }
    head.replaceChildren(...parts);
  };

  const renderPods = (pods) => {
    if (!pods.length) {
      podsBox.replaceChildren(h("p", { class: "empty" }, "No pods."));
      return;
    }
    podsBox.replaceChildren(h("table", { "aria-labelledby": "pods-title" },
      h("thead", {}, h("tr", {}, ["Name", "Role", "Group", "Phase", "Ready", "Restarts", "Node", "Logs"].map((c) => h("th", { scope: "col" }, c)))),
      h("tbody", {}, pods.map((p) => h("tr", { "data-pod": p.name },
        h("td", {}, p.name), h("td", {}, p.role), h("td", {}, p.group || ""),
        h("td", { class: "state " + stateClass(p.phase) }, p.phase), h("td", { class: "num" }, p.ready),
        h("td", { class: "num" }, String(p.restarts)), h("td", {}, p.node || "—"),
        h("td", {}, p.containers.map((c) => h("button", { type: "button", "aria-label": `Logs of ${p.name}, container ${c}`, onclick: () => followLog(ns, p.name, c, logBox) }, c))))))));
  };

  const renderEvents = (evs) => {
    if (!evs.length) {
      eventsBox.replaceChildren(h("p", { class: "empty" }, "No events."));
      return;
    }
    eventsBox.replaceChildren(h("table", { "aria-labelledby": "events-title" },
      h("thead", {}, h("tr", {}, ["Type", "Reason", "Object", "Message", "Count", "Last seen"].map((c) => h("th", { scope: "col" }, c)))),
      h("tbody", {}, evs.map((e) => h("tr", {},
        h("td", { class: "state " + (e.type === "Warning" ? "bad" : "") }, e.type), h("td", {}, e.reason), h("td", {}, e.object),
        h("td", {}, e.message), h("td", { class: "num" }, String(e.count)), h("td", {}, age(e.last) + " ago"))))));
  };

  if (!openStream(v, `/console/api/namespaces/${encodeURIComponent(ns)}/${plural}/${encodeURIComponent(name)}/stream`)) return;
  stream.addEventListener("object", (e) => {
    const d = JSON.parse(e.data);
    renderItem(d.item);
    objectBox.textContent = d.object ? JSON.stringify(d.object, null, 2) : "";
  });
  stream.addEventListener("pods", (e) => renderPods(JSON.parse(e.data)));
  stream.addEventListener("events", (e) => renderEvents(JSON.parse(e.data)));
  stream.addEventListener("error", (e) => {
    if (!e.data) return;
    const se = JSON.parse(e.data);
    errors.append(h("li", {}, `${se.section}: ${se.forbidden ? "not permitted: " : ""}${se.message}`));
  });
}

// followLog streams a container's log (the last 1000 lines, then as they come) into the log panel.
async function followLog(ns, pod, container, box) {
  if (logAbort) logAbort.abort();
  logAbort = new AbortController();
  const pre = h("pre", { class: "log", id: "log-text", tabindex: "0", "aria-label": `Log of ${pod}, container ${container}` });
  const stop = h("button", { type: "button", onclick: () => { if (logAbort) logAbort.abort(); box.hidden = true; } }, "Close log");
  box.replaceChildren(h("h2", { id: "logs-title" }, `Log: ${pod} / ${container}`), stop, pre);
  box.hidden = false;
  pre.focus();
  const url = `/console/api/namespaces/${encodeURIComponent(ns)}/pods/${encodeURIComponent(pod)}/log?container=${encodeURIComponent(container)}&follow=true&tailLines=1000`;
  try {
    const res = await fetch(url, { signal: logAbort.signal, credentials: "same-origin" });
    if (!res.ok) {
      const d = await res.json().catch(() => ({}));
      pre.textContent = "Could not read the log: " + message(d);
      return;
    }
    const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      const atEnd = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
      pre.append(value);
      if (atEnd) pre.scrollTop = pre.scrollHeight;
    }
  } catch (e) {
    if (e.name !== "AbortError") pre.append("\n[log stream ended: " + e.message + "]");
  }
}

function confirmDialog(text, okLabel) {
  const dlg = document.getElementById("confirm");
  document.getElementById("confirm-text").textContent = text;
  document.getElementById("confirm-ok").textContent = okLabel;
  return new Promise((resolve) => {
    dlg.addEventListener("close", () => resolve(dlg.returnValue === "ok"), { once: true });
    dlg.returnValue = "";
    dlg.showModal();
  });
}

async function setSuspend(ns, k, name, suspend, out) {
  const verb = suspend ? "Suspend" : "Resume";
  const what = suspend ? "Suspending deletes its pods (a RayJob's cluster too) until it is resumed." : "Resuming creates its pods again.";
  if (!(await confirmDialog(`${verb} ${k.kind} ${name} in ${ns}? ${what}`, verb))) return;
  const r = await api("PATCH", `/apis/ray.io/v1/namespaces/${encodeURIComponent(ns)}/${k.plural}/${encodeURIComponent(name)}`,
    { spec: { suspend } }, { "Content-Type": "application/merge-patch+json" });
  out.textContent = r.ok ? "" : `${verb} failed: ${message(r.data)}`;
}

async function remove(ns, k, name, out) {
  if (!(await confirmDialog(`Delete ${k.kind} ${name} in ${ns}? This cannot be undone.`, "Delete"))) return;
  const path = k.kind === "ImagePullJob"
    ? `/apis/v1/namespaces/${encodeURIComponent(ns)}/image_pull_jobs/${encodeURIComponent(name)}`
    : `/apis/ray.io/v1/namespaces/${encodeURIComponent(ns)}/${k.plural}/${encodeURIComponent(name)}`;
  const r = await api("DELETE", path);
  if (!r.ok) {
    out.textContent = `Delete failed: ${message(r.data)}`;
    return;
  }
  location.hash = nsLink(ns);
}

const FORM = [
  { name: "name", label: "Name", hint: "Lower-case letters, digits and '-', as Kubernetes names." },
  { name: "entrypoint", label: "Entrypoint", hint: "The command Ray runs, e.g. python -c 'import ray; ray.init(); print(ray.cluster_resources())'", textarea: 2 },
  { name: "image", label: "Ray image", value: "rayproject/ray:2.52.0" },
  { name: "headCPU", label: "Head CPU", value: "1", hint: "A Kubernetes quantity: 500m, 1, 2." },
  { name: "headMemory", label: "Head memory", value: "2Gi", hint: "A Kubernetes quantity: 2Gi, 512Mi." },
  { name: "workers", label: "Workers", value: "1", type: "number", min: 0, max: 100 },
  { name: "workerCPU", label: "Worker CPU", value: "1" },
  { name: "workerMemory", label: "Worker memory", value: "1Gi" },
  { name: "runtimeEnv", label: "Runtime environment (YAML)", hint: "Ray's runtime_env, e.g. pip: [requests] or env_vars: {A: b}.", textarea: 4 },
];

async function jobForm(ns) {
  const shown = view;
  const { sel, names } = await namespaceSwitcher(ns, false);
  if (shown !== view) return;
  sel.id = "job-namespace";
  sel.querySelector('option[value=""]').remove();
  if (!ns && names.length) sel.value = names[0];
  const summary = h("div", { role: "alert", id: "form-errors" });
  const inputs = {};
  const errs = {};
  const rows = [h("label", { for: "job-namespace" }, "Namespace"), h("div", { class: "field" }, sel)];
  const noCPULimit = h("input", { type: "checkbox", id: "job-noCPULimit", "aria-describedby": "job-noCPULimit-hint" });
  for (const f of FORM) {
    const id = "job-" + f.name;
    const attrs = { id, name: f.name, "aria-describedby": id + "-hint " + id + "-error" };
    const input = f.textarea ? h("textarea", { ...attrs, rows: f.textarea }) : h("input", { ...attrs, type: f.type || "text", min: f.min, max: f.max });
    input.value = f.value || "";
    inputs[f.name] = input;
    errs[f.name] = h("div", { class: "field-error", id: id + "-error" });
    rows.push(h("label", { for: id }, f.label),
      h("div", { class: "field" }, input, h("div", { class: "hint", id: id + "-hint" }, f.hint || ""), errs[f.name]));
    if (f.name === "workerMemory") {
      rows.push(h("label", { for: "job-noCPULimit" }, "No CPU limit"), h("div", { class: "field" }, noCPULimit,
        h("div", { class: "hint", id: "job-noCPULimit-hint" },
          "Unchecked, each Ray container's CPU limit is its CPU above, and Ray counts that many CPUs. Checked, the containers only request that CPU and may use idle CPU beyond it; Ray counts the request, rounded up.")));
    }
  }
  // Worker resources apply only with workers: without, they are disabled and not sent.
  const workersChanged = () => {
    const none = Number(inputs.workers.value || 0) === 0;
    inputs.workerCPU.disabled = none;
    inputs.workerMemory.disabled = none;
  };
  inputs.workers.addEventListener("input", workersChanged);
  workersChanged();

  // Environment variables of the Ray containers: one row per variable, each input labelled with its number, the
  // errors of env[i] shown in row i.
  const envRows = [];
  const envList = h("div", { id: "job-env-list" });
  const envAdd = h("button", { type: "button", id: "job-env-add" }, "Add variable");
  const envErr = h("div", { class: "field-error", id: "job-env-error" });
  const renumber = () => envRows.forEach((r, i) => {
    const id = "job-env-" + i;
    r.name.id = id + "-name";
    r.name.setAttribute("aria-label", `Name of variable ${i + 1}`);
    r.name.setAttribute("aria-describedby", id + "-error");
    r.value.id = id + "-value";
    r.value.setAttribute("aria-label", `Value of variable ${i + 1}`);
    r.value.setAttribute("aria-describedby", id + "-error");
    r.remove.id = id + "-remove";
    r.remove.setAttribute("aria-label", `Remove variable ${i + 1}`);
    r.err.id = id + "-error";
  });
  const addEnv = () => {
    const r = {
      name: h("input", { type: "text", class: "env-name", autocomplete: "off", spellcheck: "false", placeholder: "NAME" }),
      value: h("input", { type: "text", autocomplete: "off", spellcheck: "false", placeholder: "value" }),
      remove: h("button", { type: "button" }, "Remove"),
      err: h("div", { class: "field-error" }),
    };
    r.el = h("div", { class: "env-item" }, h("div", { class: "env-row" }, r.name, h("span", { "aria-hidden": "true" }, "="), r.value, r.remove), r.err);
    r.remove.addEventListener("click", () => {
      const i = envRows.indexOf(r);
      envRows.splice(i, 1);
      r.el.remove();
      renumber();
      (envRows[i] || envRows[i - 1] || { name: envAdd }).name.focus();
    });
    envRows.push(r);
    envList.append(r.el);
    renumber();
    return r;
  };
  envAdd.addEventListener("click", () => addEnv().name.focus());
  rows.push(h("span", { class: "label", id: "job-env-title" }, "Environment variables"),
    h("div", { class: "field", role: "group", "aria-labelledby": "job-env-title", "aria-describedby": "job-env-hint job-env-error" },
      envList, envAdd,
      h("div", { class: "hint", id: "job-env-hint" },
        "Set in the head's and the workers' Ray containers before Ray starts, for Ray's own settings (e.g. RAY_DASHBOARD_SUBPROCESS_MODULE_WAIT_READY_TIMEOUT = 600). The job's own variables go in the runtime environment's env_vars."),
      envErr));

  const shutdown = h("input", { type: "checkbox", id: "job-shutdown", checked: true });
  rows.push(h("label", { for: "job-shutdown" }, "Delete the cluster when the job ends"), h("div", { class: "field" }, shutdown));
  const submit = h("button", { type: "submit", class: "primary", id: "create" }, "Create RayJob");
  rows.push(h("div", { class: "actions" }, submit, h("a", { href: nsLink(ns) }, "Cancel")));
  const form = h("form", { class: "job", "aria-labelledby": "form-title", novalidate: true }, ...rows);

  // target is where an error of a field shows: its error element, the input it marks invalid (none for the list
  // as a whole) and, in a variable's row, which of its two inputs the error is about.
  let sent = [];
  const target = (field) => {
    if (errs[field]) return { err: errs[field], input: inputs[field], what: "" };
    if (field === "env") return { err: envErr, input: null, what: "" };
    const m = /^env\[(\d+)\](?:\.(name|value))?$/.exec(field);
    const r = m && sent[Number(m[1])];
    if (!r) return null;
    return m[2] === "value" ? { err: r.err, input: r.value, what: "Value: " } : { err: r.err, input: r.name, what: m[2] === "name" ? "Name: " : "" };
  };
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    summary.replaceChildren();
    for (const [n, el] of Object.entries(errs)) { el.textContent = ""; inputs[n].removeAttribute("aria-invalid"); }
    envErr.textContent = "";
    for (const r of envRows) { r.err.textContent = ""; r.name.removeAttribute("aria-invalid"); r.value.removeAttribute("aria-invalid"); }
    const body = {};
    for (const f of FORM) if (!inputs[f.name].disabled) body[f.name] = f.type === "number" ? Number(inputs[f.name].value || 0) : inputs[f.name].value.trim();
    body.shutdown = shutdown.checked;
    body.noCPULimit = noCPULimit.checked;
    // A row left empty is no variable; the others are sent in order, so env[i] is sent[i].
    sent = envRows.filter((r) => r.name.value.trim() !== "" || r.value.value !== "");
    body.env = sent.map((r) => ({ name: r.name.value.trim(), value: r.value.value }));
    submit.disabled = true;
    const r = await api("POST", `/console/api/namespaces/${encodeURIComponent(sel.value)}/rayjobs`, body).finally(() => { submit.disabled = false; });
    if (r.ok) {
      location.hash = "#/ns/" + encodeURIComponent(sel.value) + "/rayjobs/" + encodeURIComponent(r.data.name);
      return;
    }
    const vs = violations(r.data);
    let first = null;
    const other = [];
    for (const v of vs) {
      const t = target(v.field);
      if (t) {
        t.err.append(h("div", {}, t.what + v.description));
        if (t.input) t.input.setAttribute("aria-invalid", "true");
        first = first || t.input || envAdd;
      } else {
        other.push(`${v.field}: ${v.description}`);
      }
    }
    summary.append(h("div", { class: "alert" },
      h("p", {}, vs.length ? `The RayJob was not created: ${vs.length} field${vs.length > 1 ? "s need" : " needs"} fixing.` : "The RayJob was not created: " + message(r.data)),
      other.length ? h("ul", {}, other.map((o) => h("li", {}, o))) : null));
    (first || summary).focus?.();
  });
  main.replaceChildren(h("h1", { id: "form-title" }, "New RayJob"), summary, form);
  inputs.name.focus();
}

start();
