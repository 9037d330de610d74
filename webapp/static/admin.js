// Admin page: reset a sale with the bearer token, and watch its audit live.
"use strict";

const $ = (id) => document.getElementById(id);
const FIELDS = ["strategy", "initial_stock", "units_sold", "remaining", "orders",
                "in_checkout", "oversold", "duplicate_buyers", "consistent"];

$("token").value = sessionStorage.getItem("seckill-token") || "";

// A header carries bytes, and a browser sends each character of a header value as one
// Latin-1 byte (and refuses one past U+00FF): a non-ASCII token went as Latin-1 and
// never matched, or never went. The shop compares the token's UTF-8 bytes (as curl
// sends them): send those, one character per byte.
function asHeader(text) {
  return Array.from(new TextEncoder().encode(text), (byte) => String.fromCharCode(byte)).join("");
}

// a detail that ends its own sentence (werkzeug's 404: "... and try again.") gets no
// second full stop (it got one: "try again.."; a browser audit)
function sentence(text) {
  return /[.!?]$/.test(text) ? text : `${text}.`;
}

// A sku of dots only is a path segment the browser resolves before sending ("..":
// /api/sales/../audit went to /api/audit, and the page showed werkzeug's "URL not
// found"); the shop never makes one (validation.plausible_sku): said here instead.
const DOTS_ONLY = "No product has a sku of dots only.";

function dotsOnly(sku) {
  return sku !== "" && sku.replace(/\./g, "") === "";
}

// The sku as typed: trimmed, the product " pg space " (buyable from the storefront)
// could not be reset or audited here ("unknown_sku"; a text audit). Spaces only is none.
function typedSku() {
  const sku = $("sku").value;
  return sku.trim() ? sku : "";
}

// What the page shows of a sku: a 3,000-character one was printed in full twice (a text
// audit). No product's is past 64 characters (code points, as the shop counts them).
function shown(sku) {
  const chars = [...sku];
  return chars.length > 64 ? chars.slice(0, 64).join("") + "…" : sku;
}

function say(id, text, kind) {
  // a live region rewritten with the same text (every 500 ms) may be read out again
  if ($(id).textContent !== text) $(id).textContent = text;
  $(id).className = "message " + kind;
}

// the last reset's answer is about the form as it was: once the form changes, it goes
$("reset-form").addEventListener("input", () => {
  if ($("reset-message").className !== "message pending") say("reset-message", "", "");
});

// The form starts as the sale is: a reset from a form that always said token, 100
// units and no limit switched a sql sale with a limit of 3 to token with no limit
// (a browser audit). Filled when the page loads and when the sku changes, except the
// fields the admin has changed since; a reset sent meanwhile waits for it.
const NO_LIMIT = Number($("limit").max);
const SALE = { strategy: "strategy", stock: "initial_stock", "work-ms": "work_ms",
               limit: "limit" };
let edited = new Set();
let filling = Promise.resolve();

Object.keys(SALE).forEach((id) => $(id).addEventListener("input", () => edited.add(id)));

function fillFromSale() {
  const sku = typedSku();
  edited = new Set();
  filling = (async () => {
    if (!sku || dotsOnly(sku)) return;  // not a product: nothing to fill from
    try {
      const response = await fetch(`/api/products/${encodeURIComponent(sku)}`,
                                   { cache: "no-store" });
      // no such product (the reset will say so), or the shop down: the form stays
      if (!response.ok || typedSku() !== sku) return;
      const sale = await response.json();
      for (const [id, field] of Object.entries(SALE)) {
        if (edited.has(id) || sale[field] === undefined) continue;
        const value = id === "limit" && sale.limit >= NO_LIMIT ? "" : String(sale[field]);
        $(id).value = value;
      }
    } catch (err) {
      // not answering, or not the shop's JSON: the audit below says so
    }
  })();
}
$("sku").addEventListener("input", fillFromSale);
fillFromSale();

$("reset-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  const token = $("token").value.trim();
  sessionStorage.setItem("seckill-token", token);
  const sku = typedSku();
  const message = $("reset-message");
  const button = event.submitter || $("reset-form").querySelector("button");
  const focused = document.activeElement === button;
  if (button) button.disabled = true;  // a reset deletes orders: never send it twice
  message.className = "message pending";
  message.textContent = "Resetting…";
  try {
    if (!sku || dotsOnly(sku)) {  // spaces only sent PUT /api/admin/sales/: werkzeug's
      message.className = "message error";  // "URL not found" text (a UI audit)
      message.textContent = sku ? DOTS_ONLY : "Enter a product's sku first.";
      return;
    }
    await filling;  // the sale's own values, for the fields not changed here
    const sale = { stock: Number($("stock").value), strategy: $("strategy").value,
                   work_ms: Number($("work-ms").value || 0) };
    if ($("limit").value) sale.limit = Number($("limit").value);  // none: no limit
    const response = await fetch(`/api/admin/sales/${encodeURIComponent(sku)}`, {
      method: "PUT",
      headers: { "Content-Type": "application/json", Authorization: `Bearer ${asHeader(token)}` },
      body: JSON.stringify(sale),
    });
    const body = await response.json();
    const limit = body.limit >= NO_LIMIT ? "no limit" : `${body.limit} per buyer`;
    message.className = "message " + (response.ok ? "ok" : "error");
    message.textContent = response.ok
      ? `Reset ${body.sku}: ${body.stock} units, strategy ${body.strategy}, ` +
        `work ${body.work_ms} ms, ${limit}.`
      // the API's 401 tells curl users which header to send; this page sends it, and
      // the token typed above is what was wrong (a storefront audit)
      : response.status === 401
        ? `Wrong admin token (${body.error}): use the one seckill serve printed.`
        : `${body.error}: ${body.detail}`;
  } catch (err) {
    message.className = "message error";
    message.textContent = "Network error (or not the shop's answer).";
  } finally {
    if (button) button.disabled = false;
    // disabling it dropped the keyboard's focus to <body>: back to the button
    if (button && focused && document.activeElement === document.body) button.focus();
  }
});

// The audit was asked with no time limit: a shop that took the connection and never
// answered (frozen, a paused machine) left the last numbers up as if live, and a frozen
// Redis for the shop's 10 s Redis timeout (a browser audit). Past AUDIT_LATE_MS the page
// says they may be old; an answer that comes later is still shown, and past
// AUDIT_GIVE_UP_MS the audit is given up and asked again.
const AUDIT_LATE_MS = 3000;
const AUDIT_GIVE_UP_MS = 15000;
// the audit's question has no answer: the shop may answer others (a frozen Redis holds
// the audit, not /healthz; "The shop is not answering" blamed the whole shop there)
const NOT_ANSWERING = "The shop is not answering the audit: the numbers shown may be out " +
  "of date.";

// the audit has no answer: its last numbers stay, their verdict no longer green (it was
// "true" in green through a Redis outage; a browser audit)
function auditLate() {
  say("audit-message", NOT_ANSWERING, "error");
  const verdict = $("a-consistent");
  if (verdict.classList.contains("good")) {
    verdict.classList.remove("good");
    verdict.classList.add("pending");
  }
}

// how long the same units may stay "in checkout" before the page calls them lost: a
// purchase's longest (the lock wait, the longest simulated work, the order write: the
// storefront's "no answer" wait); 10 s called a healthy sale with work_ms 10000 wrong
const SETTLE_MS =
  1000 * (Number(document.querySelector(".audit").dataset.purchaseTimeoutS) || 36);
const STUCK = "false (units stuck in checkout: the shop reloads the sale shortly)";
const NOT_SEEN = { figures: "", since: 0 };
let checkout = NOT_SEEN;

// Whether the same units have been in checkout for SETTLE_MS: the same sale's figures
// (a new sale's first buyer with the same figures starts again), seen since without a
// break (an audit that is anything but "in checkout" starts the count again)
function stuckInCheckout(sku, audit, inCheckout) {
  if (!inCheckout) {
    checkout = NOT_SEEN;
    return false;
  }
  const figures = JSON.stringify([sku, audit.initial_stock, audit.remaining,
                                  audit.database_remaining, audit.units_sold,
                                  audit.orders, audit.in_checkout]);
  if (figures !== checkout.figures) checkout = { figures, since: Date.now() };
  return Date.now() - checkout.since >= SETTLE_MS;
}

function clearAudit() {
  checkout = NOT_SEEN;  // no audit: a break in what was seen
  for (const field of FIELDS) {
    $("a-" + field).textContent = "-";
    $("a-" + field).classList.remove("good", "bad", "pending");  // a dash is neither
  }
}

// Twice a second while someone watches; a hidden tab every 5 s, as the storefront's
// polls (it asked twice a second in a tab nobody looked at: a browser audit).
const AUDIT_POLL_MS = 500;
const HIDDEN_POLL_MS = 5000;
let nextAudit = null;

function auditLater() {
  nextAudit = setTimeout(refresh, document.hidden ? HIDDEN_POLL_MS : AUDIT_POLL_MS);
}

document.addEventListener("visibilitychange", () => {
  if (document.hidden || nextAudit === null) return;  // none pending: one is in flight
  clearTimeout(nextAudit);
  refresh();  // back in view: now, not up to 5 s later
});

async function refresh() {
  nextAudit = null;  // in flight
  const sku = typedSku();
  $("audit-sku").textContent = shown(sku);
  if (!sku) {  // it asked for the audit of "" ("No audit of : The requested URL ...")
    clearAudit();
    say("audit-message", "Enter a product's sku to see its audit.", "warn");
    auditLater();
    return;
  }
  if (dotsOnly(sku)) {
    clearAudit();
    say("audit-message", DOTS_ONLY, "warn");
    auditLater();
    return;
  }
  const abort = new AbortController();
  const late = setTimeout(auditLate, AUDIT_LATE_MS);
  const giveUp = setTimeout(() => abort.abort(), AUDIT_GIVE_UP_MS);
  try {
    const response = await fetch(`/api/sales/${encodeURIComponent(sku)}/audit`,
                                 { cache: "no-store", signal: abort.signal });
    if (response.ok) {
      const audit = await response.json();
      for (const field of FIELDS) $("a-" + field).textContent = String(audit[field]);
      $("a-oversold").classList.toggle("bad", audit.oversold > 0);
      $("a-duplicate_buyers").classList.toggle("bad", audit.duplicate_buyers > 0);
      // amid a sale Redis runs ahead of the orders written by the units in checkout:
      // not consistent yet, but not wrong either until they are written or given back;
      // the same units "in checkout" for SETTLE_MS are units lost (a review)
      const inCheckout = !audit.consistent && audit.in_checkout > 0 && audit.oversold === 0
                         && audit.duplicate_buyers === 0
                         && audit.remaining + audit.units_sold + audit.in_checkout
                            === audit.initial_stock;
      const stuck = stuckInCheckout(sku, audit, inCheckout);  // also when not: it resets
      const settling = inCheckout && !stuck;
      if (settling) $("a-consistent").textContent = "not yet (units in checkout)";
      // a purchase that never finished (a worker killed): the shop reloads the sale from
      // the database once they have stayed a little longer (webapp/checkoutwatch.py)
      if (inCheckout && stuck) $("a-consistent").textContent = STUCK;
      $("a-consistent").classList.toggle("bad", !audit.consistent && !settling);
      $("a-consistent").classList.toggle("pending", settling);
      $("a-consistent").classList.toggle("good", audit.consistent);
      say("audit-message", "", "");
    } else {  // no such sale (yet), or a backend down: no numbers, and why
      clearAudit();
      let why = `HTTP ${response.status}`;
      try {
        const body = await response.json();
        why = body.detail || body.error || why;
      } catch (err) {
        // not the shop's JSON: the status says enough
      }
      say("audit-message", sentence(`No audit of ${shown(sku)}: ${why}`),
          response.status === 404 ? "warn" : "error");
    }
  } catch (err) {
    // the server is away, or gave no answer in time: keep the last numbers, and say
    // they may be old
    auditLate();
  } finally {
    clearTimeout(late);
    clearTimeout(giveUp);
  }
  auditLater();
}
refresh();
