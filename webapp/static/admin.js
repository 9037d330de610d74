// Admin page: reset a sale with the bearer token, and watch its audit live.
"use strict";

const $ = (id) => document.getElementById(id);
const FIELDS = ["strategy", "initial_stock", "units_sold", "remaining", "orders",
                "oversold", "duplicate_buyers", "consistent"];

$("token").value = sessionStorage.getItem("seckill-token") || "";

// A header carries bytes, and a browser sends each character of a header value as one
// Latin-1 byte (and refuses one past U+00FF): a non-ASCII token went as Latin-1 and
// never matched, or never went. The shop compares the token's UTF-8 bytes (as curl
// sends them): send those, one character per byte.
function asHeader(text) {
  return Array.from(new TextEncoder().encode(text), (byte) => String.fromCharCode(byte)).join("");
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

$("reset-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  const token = $("token").value.trim();
  sessionStorage.setItem("seckill-token", token);
  const sku = $("sku").value.trim();
  const message = $("reset-message");
  const button = event.submitter || $("reset-form").querySelector("button");
  const focused = document.activeElement === button;
  if (button) button.disabled = true;  // a reset deletes orders: never send it twice
  message.className = "message pending";
  message.textContent = "Resetting…";
  try {
    const response = await fetch(`/api/admin/sales/${encodeURIComponent(sku)}`, {
      method: "PUT",
      headers: { "Content-Type": "application/json", Authorization: `Bearer ${asHeader(token)}` },
      body: JSON.stringify({ stock: Number($("stock").value), strategy: $("strategy").value,
                             work_ms: Number($("work-ms").value || 0) }),
    });
    const body = await response.json();
    message.className = "message " + (response.ok ? "ok" : "error");
    message.textContent = response.ok
      ? `Reset ${body.sku}: ${body.stock} units, strategy ${body.strategy}, work ${body.work_ms} ms.`
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

async function refresh() {
  const sku = $("sku").value.trim();
  $("audit-sku").textContent = sku;
  try {
    const response = await fetch(`/api/sales/${encodeURIComponent(sku)}/audit`, { cache: "no-store" });
    if (response.ok) {
      const audit = await response.json();
      for (const field of FIELDS) $("a-" + field).textContent = String(audit[field]);
      $("a-oversold").classList.toggle("bad", audit.oversold > 0);
      $("a-duplicate_buyers").classList.toggle("bad", audit.duplicate_buyers > 0);
      $("a-consistent").classList.toggle("bad", !audit.consistent);
      $("a-consistent").classList.toggle("good", audit.consistent);
      say("audit-message", "", "");
    } else {  // no such sale (yet), or a backend down: no numbers, and why
      for (const field of FIELDS) {
        $("a-" + field).textContent = "-";
        $("a-" + field).classList.remove("good", "bad");  // a dash is neither
      }
      let why = `HTTP ${response.status}`;
      try {
        const body = await response.json();
        why = body.detail || body.error || why;
      } catch (err) {
        // not the shop's JSON: the status says enough
      }
      say("audit-message", `No audit of ${sku}: ${why}.`,
          response.status === 404 ? "warn" : "error");
    }
  } catch (err) {
    // the server is away: keep the last numbers, and say they may be old
    say("audit-message", "The shop is not answering: the numbers shown may be out of date.",
        "error");
  }
  setTimeout(refresh, 500);
}
refresh();
