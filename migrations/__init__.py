"""Alembic migrations for the web app's schema (``webapp.db.upgrade`` runs them).

A package so that the installed wheel carries them: ``webapp.db`` points Alembic's
``script_location`` here with ``importlib.resources``, no ``alembic.ini`` needed.
"""
