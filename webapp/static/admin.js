// Admin page: reset a sale with the bearer token, and watch its audit live.
"use strict";

const $ = (id) => document.getElementById(id);
const FIELDS = ["strategy", "initial_stock", "units_sold", "remaining", "orders",
                "oversold", "duplicate_buyers", "consistent"];

$("token").value = sessionStorage.getItem("seckill-token") || "";

$("reset-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  const token = $("token").value.trim();
  sessionStorage.setItem("seckill-token", token);
  const sku = $("sku").value.trim();
  const message = $("reset-message");
  const button = event.submitter || $("reset-form").querySelector("button");
  if (button) button.disabled = true;  // a reset deletes orders: never send it twice
  message.className = "message pending";
  message.textContent = "Resetting…";
  try {
    const response = await fetch(`/api/admin/sales/${encodeURIComponent(sku)}`, {
      method: "PUT",
      headers: { "Content-Type": "application/json", Authorization: `Bearer ${token}` },
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
    } else {  // no such sale (yet): no numbers, not the previous sale's
      for (const field of FIELDS) $("a-" + field).textContent = "-";
    }
  } catch (err) {
    // the server is away: keep the last numbers
  }
  setTimeout(refresh, 500);
}
refresh();
