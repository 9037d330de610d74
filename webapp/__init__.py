"""The flash-sale web app (placeholder until the app factory lands)."""
