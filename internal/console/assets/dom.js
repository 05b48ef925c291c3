// Small DOM helpers for the console: h builds elements (attributes set as attributes, on* as listeners, false and
// null left out; children flattened, strings as text, so nothing is ever parsed as HTML).

export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on") && typeof v === "function") el.addEventListener(k.slice(2), v);
    else if (v === true) el.setAttribute(k, "");
    else el.setAttribute(k, String(v));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    if (Array.isArray(c)) append(el, c);
    else el.append(c instanceof Node ? c : String(c));
  }
}


// age says how long ago a time was, as kubectl does (s, m, h, d).
export function age(t) {
  const s = Math.max(0, Math.floor((Date.now() - new Date(t).getTime()) / 1000));
  if (s < 120) return s + "s";
  if (s < 7200) return Math.floor(s / 60) + "m";
  if (s < 172800) return Math.floor(s / 3600) + "h";
  return Math.floor(s / 86400) + "d";
}

// stateClass colours a state word: good, bad, warn or nothing.
export function stateClass(state) {
  const s = String(state || "").toLowerCase();
  if (/(fail|error|crash|backoff|unhealthy|terminat)/.test(s)) return "bad";
  if (/(ready|running|succeeded|complete|healthy|scheduled)/.test(s)) return "good";
  if (/(pending|new|initializ|suspend|waiting|pulling|containercreating)/.test(s)) return "warn";
  return "";
}
