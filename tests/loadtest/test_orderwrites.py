"""``python -m loadtest.bench.orderwrites`` runs every variant (a small smoke run)."""

from __future__ import annotations

from loadtest.bench import orderwrites


def test_every_variant_writes_and_is_reported(capsys):
    orderwrites.main(["--orders", "200", "--batch", "10", "--rounds", "1", "--others", "50",
                      "--connections", "2"])
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1 + len(orderwrites.VARIANTS)
    for name, line in zip(orderwrites.VARIANTS, lines[1:], strict=True):
        assert line.startswith(name) and "cpu" in line
