// Storefront: live stock by short polling, and the buy buttons. No build step.
"use strict";

const POLL_MS = 500;
// a purchase that has had no answer by then is reported, and its retry is the same
// purchase (same Idempotency-Key): the server renders it past its own worst case
// (lock wait + longest work + order write; webapp/shop.py)
const PURCHASE_TIMEOUT_MS =
  1000 * (Number(document.querySelector(".cards").dataset.purchaseTimeoutS) || 35);

function newKey() {
  // randomUUID needs a secure context; 127.0.0.1 is one, a LAN address is not
  return crypto.randomUUID ? crypto.randomUUID() : `${Date.now()}-${Math.random()}`;
}

// One Idempotency-Key per purchase, kept until the shop gives a final answer: a retry
// after a lost reply (a network error, a proxy's 502) is the same purchase, and the
// shop answers it with the order it made (200) instead of "already purchased". Kept in
// the tab's sessionStorage, with the name typed: a reload mid-purchase lost both, and
// the purchase that went through was "You already have one" with no order number (a
// browser audit).
const PENDING_KEYS = "seckill.pendingKeys";
const USER_NAME = "seckill.userName";

function stored(name, fallback) {
  try {
    return JSON.parse(sessionStorage.getItem(name)) ?? fallback;
  } catch (err) {  // storage off (a privacy setting), or not ours to read
    return fallback;
  }
}

function store(name, value) {
  try {
    sessionStorage.setItem(name, JSON.stringify(value));
  } catch (err) {
    // storage off or full: the page works as before, without it across reloads
  }
}

function storedKeys() {  // [[sku + "\n" + user, key], ...], whatever else is there
  const pairs = stored(PENDING_KEYS, []);
  return Array.isArray(pairs) ? pairs.filter((pair) => Array.isArray(pair) &&
    pair.length === 2 && pair.every((part) => typeof part === "string")) : [];
}

const pendingKeys = new Map(storedKeys());

function keyFor(sku, user) {
  const id = `${sku}\n${user}`;
  if (!pendingKeys.has(id)) {
    pendingKeys.set(id, newKey());
    store(PENDING_KEYS, [...pendingKeys]);
  }
  return pendingKeys.get(id);
}

function settled(sku, user) {
  pendingKeys.delete(`${sku}\n${user}`);
  store(PENDING_KEYS, [...pendingKeys]);
}

// Each card found once, not by a selector scan per product per poll: with 1,000
// products every poll scanned every card for each (a data-at-scale audit: 90-180 ms of
// script and 70-90 ms of layout a poll, a third of the poll's interval).
const cards = new Map();

function card(sku) {
  const known = cards.get(sku);
  if (known && known.isConnected) return known;
  const el = document.querySelector(`.card[data-sku="${CSS.escape(sku)}"]`);
  if (el) cards.set(sku, el);
  return el;
}

// A card's parts, looked up once per card.
const PARTS = {stock: ".stock", initial: ".initial", sold: ".sold", inCheckout: ".in-checkout",
  checkout: ".checkout", oversold: ".oversold", strategy: ".strategy-name", fill: ".fill",
  meter: ".meter", button: ".buy", label: ".buy .label", message: ".message"};
const partsOf = new WeakMap();

function parts(el) {
  let found = partsOf.get(el);
  if (!found) {
    found = Object.fromEntries(Object.entries(PARTS).map(
      ([name, selector]) => [name, el.querySelector(selector)]));
    partsOf.set(el, found);
  }
  return found;
}

// Writes that change nothing are not made: a poll that brings the same numbers leaves
// the page as it was (no layout, nothing for a screen reader to re-read).
function setText(node, value) {
  const text = String(value);
  if (node.textContent !== text) node.textContent = text;
}

function setAttr(node, name, value) {
  const text = String(value);
  if (node.getAttribute(name) !== text) node.setAttribute(name, text);
}

function setHidden(node, hidden) {
  if (node.hidden !== hidden) node.hidden = hidden;
}

function show(el, text, kind) {
  const message = el.querySelector(".message");
  message.textContent = text;
  message.className = "message " + kind;
  delete el.dataset.busyUntil;  // news of its own now
  delete el.dataset.offlineNews;
}

// A busy answer (503: a lock not free in time, a part of the shop down, a reset under
// way) says "try again", and is news for a while, whatever the polls see meanwhile: a
// reset the page noticed just after it cleared it within half a second, and one from
// an outage stayed on after the shop was back (a browser audit). It goes after this.
const BUSY_NEWS_MS = 8000;

function showBusy(el, text) {
  show(el, text, "warn");
  const until = String(Date.now() + BUSY_NEWS_MS);
  el.dataset.busyUntil = until;
  setTimeout(() => {
    if (el.dataset.busyUntil === until) show(el, "", "");
  }, BUSY_NEWS_MS);
}

function busyNews(el) {
  return Number(el.dataset.busyUntil || 0) > Date.now();
}

// A new sale (an admin reset) has a new sale_started_at: the card's message was about
// the old sale, and goes. (Counting units sold missed a reset that sold more than the
// old sale by the next poll, or one that changed nothing visible.)
const lastSeen = new Map();

function newSale(product) {
  const before = lastSeen.get(product.sku);
  lastSeen.set(product.sku, product.sale_started_at);
  return before !== undefined && product.sale_started_at !== before;
}

function addCard(product) {
  // a product seeded after the page loaded: the same card the server renders
  const el = document.getElementById("card-template").content.firstElementChild.cloneNode(true);
  el.dataset.sku = product.sku;
  // each clamped to a few lines (style.css), the whole in its title
  el.querySelector("h2").textContent = product.name;
  el.querySelector("h2").title = product.name;
  el.querySelector(".description").textContent = product.description || "";
  el.querySelector(".description").title = product.description || "";
  el.querySelector(".price").textContent = `$${Number(product.price).toFixed(2)}`;
  el.querySelector(".meter").setAttribute("aria-label", `${product.name}: stock left`);
  // the button's name is its visible label and then the product: "Buy now – Lamp"
  el.querySelector(".buy .for-product").textContent = `– ${product.name}`;
  el.querySelector(".buy").addEventListener("click", () => buy(el));
  document.querySelector(".cards").appendChild(el);
  return el;
}

const lastStock = new Map();

function announce(text) {
  const region = document.getElementById("announce");
  if (region) region.textContent = text;
}

function render(product) {
  const el = card(product.sku) || addCard(product);
  const part = parts(el);
  setText(part.stock, product.stock);
  setText(part.initial, product.initial_stock);
  setText(part.sold, product.sold);
  // left comes from Redis, sold from the orders written: mid-sale the units taken whose
  // orders are still being written are neither, and "left + sold" fell short of the stock
  const inCheckout = product.in_checkout;
  setText(part.inCheckout, inCheckout);
  setHidden(part.checkout, !(inCheckout > 0));
  // an unsafe lock sells units the shop never had: "26 of 100 left · 1000 sold" and
  // nothing else left a watcher to find the 900 on the admin page (a storefront audit)
  const oversold = product.sold - product.initial_stock;
  setHidden(part.oversold, !(oversold > 0));
  setText(part.oversold, oversold > 0 ? `Oversold by ${oversold}: orders for ${product.sold} ` +
    `units, only ${product.initial_stock} in stock.` : "");
  setText(part.strategy, product.strategy);
  const share = product.initial_stock ? (100 * product.stock) / product.initial_stock : 0;
  const width = Math.max(0, Math.min(100, share)) + "%";
  if (part.fill.style.width !== width) part.fill.style.width = width;
  const meter = part.meter;
  setAttr(meter, "aria-valuemax", product.initial_stock);
  setAttr(meter, "aria-valuenow", product.stock);
  // read out as the card says it, not as a percentage ("97%": a browser audit)
  setAttr(meter, "aria-valuetext", `${product.stock} of ${product.initial_stock} left`);
  const soldOut = product.stock <= 0;
  // a screen reader hears the cards' purchase answers, not the numbers: say a sell-out
  if (soldOut && lastStock.get(product.sku) > 0) announce(`${product.name} is sold out.`);
  // and its return (a reset, units given back): the region kept "sold out" while the
  // button read "Buy now" again (a storefront audit)
  if (!soldOut && lastStock.get(product.sku) <= 0) {
    announce(`${product.name} is on sale again: ${product.stock} left.`);
  }
  lastStock.set(product.sku, product.stock);
  if (el.classList.contains("sold-out") !== soldOut) el.classList.toggle("sold-out", soldOut);
  const button = part.button;
  const reset = newSale(product);
  // a purchase under way when the reset shows answers itself, and says the reset came
  // (a lock path's section finishes first and answers 201; the reset then deletes it)
  if (reset && button.dataset.busy) el.dataset.resetWhileBuying = "1";
  if (!button.dataset.busy) {
    // "Network error" stayed on the card after the shop was back, until the next
    // purchase or reset (a storefront audit): a poll got through, so is the network
    if (el.dataset.offlineNews) show(el, "", "");
    const focused = document.activeElement === button;
    if (button.disabled !== soldOut) button.disabled = soldOut;
    // a disabled button loses the keyboard's focus (to <body>): on to the name field
    if (focused && soldOut) document.getElementById("user-name").focus();
    setText(part.label, soldOut ? "Sold out" : "Buy now");
    // the old sale's message goes; a confirmation is taken back in words (it was
    // heard, and the reset deleted that order), unless the order is in the new sale:
    // bought after a reset this page had not polled yet, it was called deleted (a
    // browser audit)
    const confirmed = part.message.classList.contains("ok");
    if (confirmed && orderGone(el.dataset.orderSale, product.sale_started_at, reset)) {
      show(el, TAKEN_BACK, "warn");
    } else if (reset && !confirmed && !busyNews(el)) {
      show(el, "", "");
    }
  }
}

const TAKEN_BACK = "An admin reset this sale: its orders, yours too, were deleted.";

// Whether a confirmed order is gone by the sale a poll shows: its sale is older (a
// reset came after it: the reset deleted it), whether or not this poll is the one that
// saw the reset (a page whose first polls failed saw only the newer sale, and kept
// "Confirmed!"; a review). An order that named no sale: gone if this poll saw a reset.
function orderGone(orderSale, shown, reset) {
  if (!orderSale) return reset;
  return orderSale !== shown && Date.parse(orderSale) < Date.parse(shown);
}

// Where a confirmed order stands against the newest sale this page has seen: its answer
// names the sale it was written in (sale_started_at; a 201 whose write was bound to no
// sale generation does not). "new": in a sale as new or newer (a reset the polls have
// not shown yet), "deleted": in an older one (a reset came after it and deleted it),
// "unknown": not named.
function orderStanding(sku, orderSale) {
  if (!orderSale) return "unknown";
  const seen = lastSeen.get(sku);
  return seen !== undefined && orderGone(orderSale, seen, false) ? "deleted" : "new";
}

let failedPolls = 0;
// this many failed polls in a row: the shop is not answering (the banner, slower polls)
const OFFLINE_AFTER = 3;

function offline() {
  return failedPolls >= OFFLINE_AFTER;
}

function connection(ok) {
  // after a few failed polls in a row, say the numbers are stale (they are kept)
  const wasOffline = offline();
  failedPolls = ok ? 0 : failedPolls + 1;
  const banner = document.getElementById("offline");
  if (banner) banner.hidden = !offline();
  // back: what is down is asked now, not after the slow timer of a shop away
  if (wasOffline && !offline()) checks.nudge();
}

// The shop answers even when a part of it is down: its 503 with the contract's JSON
// ("the database is unavailable") came at once, and counting it as no answer put "The
// shop is not answering" beside "Not selling: database down" (a browser audit). No
// answer is a network error, a timeout, or a proxy's: an HTML error page, or the 502
// and 504 of deploy/nginx.conf, JSON too, which say the shop is not answering.
function answered(response) {
  if (response.status === 502 || response.status === 504) return false;
  return (response.headers.get("Content-Type") || "").startsWith("application/json");
}

// A fetch that gives up after `ms`: a shop that answers late (a frozen Redis makes
// every request wait out the shop's own timeouts) counts as a shop not answering.
async function fetchWithin(url, ms) {
  const abort = new AbortController();
  const timer = setTimeout(() => abort.abort(), ms);
  try {
    return await fetch(url, { cache: "no-store", signal: abort.signal });
  } finally {
    clearTimeout(timer);
  }
}
const POLL_TIMEOUT_MS = 3000;
// a poll slower than POLL_TIMEOUT_MS counts as failed, but its answer is still shown
// when it comes (a link that slow never showed new stock, and the banner said the shop
// was not answering); past this it is given up
const POLL_GIVE_UP_MS = 15000;

// The products come from the database when Redis is down, so the page looked fine
// while every purchase failed: ask /healthz on a timer of its own (not after a poll,
// which a frozen Redis can hold for seconds), and name the part that is down (its 503
// body says which) until it is back. Every 2 s while someone watches; slower, as the
// polls are (nextPollMs), in a hidden tab or while the shop is not answering.
const HEALTH_MS = 2000;

async function health() {
  const banner = document.getElementById("degraded");
  if (!banner) return;
  try {
    const response = await fetchWithin("/healthz", POLL_TIMEOUT_MS);
    if (response.status !== 503) {
      banner.hidden = true;
      return;
    }
    const body = await response.json();
    // purchases wait for it (a lock's, Redis's own timeouts) and may still go through:
    // "are refused until it is back" was not what a buyer then saw (a browser audit)
    const text = `Not selling: ${body.detail || "a backend is down"}. Purchases wait ` +
      "for it, and fail if it is not back in time; the stock shown may be out of date.";
    // the same alert rewritten at every check may be read out again each time
    if (banner.textContent !== text) banner.textContent = text;
    banner.hidden = false;
  } catch (err) {
    banner.hidden = true;  // what was down before is old news now
    connection(false);  // not answering at all: the #offline banner's news
  }
}

async function poll() {
  const late = setTimeout(() => connection(false), POLL_TIMEOUT_MS);
  try {
    const response = await fetchWithin("/api/products", POLL_GIVE_UP_MS);
    if (response.ok) (await response.json()).forEach(render);
    // a 503 (a part down: #degraded names it) keeps the last numbers, and is an answer
    connection(answered(response));
  } catch (err) {
    connection(false);  // restarting, gone or given up: keep the last numbers
  } finally {
    clearTimeout(late);
  }
}

// Twice a second while someone watches; a hidden tab and a shop that is not answering
// (every open page would hit it together as it comes back) are asked less often, with
// a little jitter. The health checks slow down alike: they went every 2 s, hidden tab
// or shop away, all pages in step (a browser audit).
const HIDDEN_POLL_MS = 5000;
const OFFLINE_POLL_MS = 2000;

function nextPollMs(base = POLL_MS) {
  const slower = document.hidden ? HIDDEN_POLL_MS / POLL_MS
    : offline() ? OFFLINE_POLL_MS / POLL_MS : 1;
  return base * slower * (0.8 + 0.4 * Math.random());
}

// `task` again and again, nextPollMs(baseMs) after each one ends; nudge() runs it now
// instead of after the slow timer, unless it is in flight.
function repeating(task, baseMs) {
  let timer = null;
  async function run() {
    timer = null;  // in flight
    try {
      await task();
    } finally {
      timer = setTimeout(run, nextPollMs(baseMs));
    }
  }
  return {
    start: run,
    nudge() {
      if (timer === null) return;
      clearTimeout(timer);
      run();
    },
  };
}
const polls = repeating(poll, POLL_MS);
const checks = repeating(health, HEALTH_MS);

document.addEventListener("visibilitychange", () => {
  if (document.hidden) return;
  polls.nudge();  // back in view: fresh numbers now, not after the slow timer
  checks.nudge();
});

async function buy(el) {
  const sku = el.dataset.sku;
  const user = document.getElementById("user-name").value.trim();
  if (!user) {
    nameRefused(el, "Enter your name first.");
    return;
  }
  // the shop counts characters (code points), as [...user] does; the field's maxlength
  // counted UTF-16 units and cut 40 × 😀 to 32, or a family emoji to a dangling joiner,
  // and the order was made for a name the buyer did not type (a text audit)
  const most = Number(document.getElementById("user-name").dataset.maxLength) || 64;
  const length = [...user].length;
  if (length > most) {
    nameRefused(el, `Your name must be at most ${most} characters (it has ${length}).`);
    return;
  }
  const button = el.querySelector(".buy");
  const focused = document.activeElement === button;
  button.dataset.busy = "1";
  button.disabled = true;
  show(el, "Buying…", "pending");
  const key = keyFor(sku, user);
  const abort = new AbortController();
  const timer = setTimeout(() => abort.abort(), PURCHASE_TIMEOUT_MS);
  try {
    const response = await fetch(`/api/products/${encodeURIComponent(sku)}/purchase`, {
      method: "POST",
      headers: { "Content-Type": "application/json", "Idempotency-Key": key },
      body: JSON.stringify({ user_id: user, quantity: 1 }),
      signal: abort.signal,
    });
    let body;
    try {
      body = await response.json();
    } catch (err) {  // not the shop's JSON (a proxy's error page): the same key next time
      show(el, `The shop did not answer (HTTP ${response.status}) — try again.`, "error");
      return;
    }
    // a 4xx or a 2xx is final; a 5xx (the shop's 503, a proxy's 502 or 504) may come
    // from a purchase that went through: the retry keeps its key, the same purchase
    if (response.status < 500) settled(sku, user);
    const bought = response.status === 201 || response.status === 200;
    const standing = bought ? orderStanding(sku, body.sale_started_at) : "";
    delete el.dataset.orderSale;
    if (bought && standing === "deleted") {
      show(el, `Order #${body.order_id} for ${body.user_id} was confirmed, then an admin ` +
               "reset this sale: its orders, yours too, were deleted.", "warn");
    } else if (bought && standing === "unknown" && el.dataset.resetWhileBuying) {
      // which sale the order was in cannot be told from here: say both
      show(el, `Order #${body.order_id} for ${body.user_id} was confirmed, but an admin ` +
               "reset this sale meanwhile: if the reset came after it, it was deleted.", "warn");
    } else if (bought) {
      el.dataset.orderSale = body.sale_started_at || "";
      show(el, `Confirmed! Order #${body.order_id} for ${body.user_id}.`, "ok");
    } else if (body.error === "sold_out") {
      show(el, "Sold out — better luck next sale.", "sold");
      el.classList.add("sold-out");  // now, not at the next poll: the button goes with it
      button.querySelector(".label").textContent = "Sold out";
    } else if (body.error === "already_purchased") {
      show(el, "You already have one: one per person.", "warn");
    } else if (body.error === "busy") {
      const wait = response.headers.get("Retry-After") || "1";
      // the shop says why (a lock not free in time, Redis down): the lab is about that
      const why = (body.detail ? `Not sold: ${body.detail}` : "Too busy right now")
        .replace(/\.$/, "");
      // most reasons end "try again" already, and a held-off sale's says when too ("(in
      // about 10 s); try again" was followed by "(in 10s)."; a browser audit): the page
      // adds only what is missing
      const when = /\bin about \d+ ?s\b/.test(why) ? "" : ` (in ${wait}s)`;
      showBusy(el, /try again/i.test(why) ? `${why}${when}.`
        : `${why} — try again in ${wait}s.`);
    } else {
      // the shop names the field ("user_id contains characters that are not allowed"):
      // on this page it is the name the buyer typed
      const detail = (body.detail || "Something went wrong.").replace(/^user_id\b/, "Your name");
      const said = /[.!?]$/.test(detail) ? detail : `${detail}.`;
      if (detail.startsWith("Your name")) nameRefused(el, said);
      else show(el, said, "error");
    }
  } catch (err) {
    if (abort.signal.aborted) {
      show(el, `No answer in ${PURCHASE_TIMEOUT_MS / 1000}s — try again: it is the same purchase, never a second one.`, "error");
    } else {
      show(el, "Network error — try again.", "error");
      el.dataset.offlineNews = "1";  // the next poll that gets through takes it back
    }
  } finally {
    clearTimeout(timer);
    delete button.dataset.busy;
    delete el.dataset.resetWhileBuying;
    button.disabled = el.classList.contains("sold-out");
    // disabling the button while buying dropped the keyboard's focus to <body>
    if (focused && document.activeElement === document.body) {
      (button.disabled ? document.getElementById("user-name") : button).focus();
    }
  }
}

const nameField = document.getElementById("user-name");

// A name the shop cannot take: said on the card, and the field marked invalid and
// focused (only the empty name moved the focus, and neither marked the field; a
// storefront audit). Typing clears the mark.
function nameRefused(el, text) {
  show(el, text, "error");
  nameField.setAttribute("aria-invalid", "true");
  nameField.focus();
}
nameField.addEventListener("input", () => nameField.removeAttribute("aria-invalid"));
const storedName = stored(USER_NAME, "");
if (!nameField.value && typeof storedName === "string") nameField.value = storedName;
nameField.addEventListener("input", () => store(USER_NAME, nameField.value));

// Enter in the name field: on to the first Buy button that can still buy
document.getElementById("user-name").addEventListener("keydown", (event) => {
  if (event.key !== "Enter") return;
  event.preventDefault();
  const next = document.querySelector(".card .buy:not(:disabled)");
  if (next) next.focus();
  else announce("Every product is sold out.");
});

document.querySelectorAll(".card .buy").forEach((button) => {
  button.addEventListener("click", () => buy(button.closest(".card")));
});
polls.start();
checks.start();
