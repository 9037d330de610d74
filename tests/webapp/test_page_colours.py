"""The storefront's text colours are readable: WCAG AA asks 4.5:1 for normal text."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

STYLE = Path(__file__).resolve().parents[2] / "webapp" / "static" / "style.css"


def luminance(hex_colour: str) -> float:
    channels = [int(hex_colour[i:i + 2], 16) / 255 for i in (1, 3, 5)]
    linear = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
    return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]


def contrast(a: str, b: str) -> float:
    high, low = sorted((luminance(a), luminance(b)), reverse=True)
    return (high + 0.05) / (low + 0.05)


def variables() -> dict[str, str]:
    return dict(re.findall(r"--([a-z]+):\s*(#[0-9a-fA-F]{6})", STYLE.read_text()))


def test_the_reference_colours_compute_as_published():
    assert contrast("#000000", "#ffffff") == pytest.approx(21)
    assert contrast("#e8452c", "#ffffff") == pytest.approx(3.95, abs=0.01)  # the old red


@pytest.mark.parametrize("name, background", [
    ("accent", "#ffffff"),  # white button text on the accent; sold-out and error messages
    ("ok", "#ffffff"), ("warn", "#ffffff"), ("muted", "#ffffff"),  # messages on a card
    ("accent", "bg"), ("muted", "bg"),  # the offline banner, hints on the page
])
def test_text_reads_at_4_5_to_1(name, background):
    colours = variables()
    back = colours["bg"] if background == "bg" else background
    assert contrast(colours[name], back) >= 4.5, (name, background)


def test_a_disabled_button_still_reads():
    disabled = re.search(r"button:disabled \{ background: (#[0-9a-fA-F]{6})", STYLE.read_text())
    assert disabled and contrast(disabled.group(1), "#ffffff") >= 4.5
