// Every visible text on the page whose rendered contrast is under 4.5:1 (WCAG AA),
// with the colours the browser computed: the text's colour and every opacity above it
// blended over the backgrounds it is drawn on. Returns "tag.class "text" ratio" lines.
() => {
  const parse = (s) => {
    const parts = s.match(/rgba?\(([^)]+)\)/)[1].split(/[\s,/]+/).filter(Boolean).map(Number);
    return [parts[0], parts[1], parts[2], parts.length > 3 ? parts[3] : 1];
  };
  const blend = (fg, bg) => [0, 1, 2].map((i) => fg[i] * fg[3] + bg[i] * (1 - fg[3])).concat([1]);
  const luminance = (rgb) => {
    const c = rgb.slice(0, 3).map((v) => {
      v /= 255;
      return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4;
    });
    return 0.2126 * c[0] + 0.7152 * c[1] + 0.0722 * c[2];
  };
  const background = (el) => {
    const layers = [];
    for (let e = el; e; e = e.parentElement) {
      const colour = parse(getComputedStyle(e).backgroundColor);
      if (colour[3] > 0) layers.push(colour);
      if (colour[3] >= 1) break;
    }
    let bg = [255, 255, 255, 1];
    for (const colour of layers.reverse()) bg = blend(colour, bg);
    return bg;
  };
  const opacity = (el) => {
    let o = 1;
    for (let e = el; e; e = e.parentElement) o *= Number(getComputedStyle(e).opacity);
    return o;
  };
  const low = [];
  for (const el of document.querySelectorAll("body *")) {
    if (!el.getClientRects().length || el.closest(".visually-hidden, [hidden]")) continue;
    if (![...el.childNodes].some((n) => n.nodeType === 3 && n.textContent.trim())) continue;
    const bg = background(el);
    const fg = parse(getComputedStyle(el).color);
    const shown = blend([fg[0], fg[1], fg[2], fg[3] * opacity(el)], bg);
    const [high, low_] = [luminance(shown), luminance(bg)].sort((a, b) => b - a);
    const ratio = (high + 0.05) / (low_ + 0.05);
    if (ratio < 4.5) {
      low.push(`${el.tagName.toLowerCase()}.${el.className} "${el.textContent.trim().slice(0, 30)}" ${ratio.toFixed(2)}`);
    }
  }
  return low;
}
