"""Versioned schema migrations (Alembic), applied on every start of the control plane.

The script directory lives beside this file; ``upgrade_to_head`` runs inside an open
connection so the server, the tests and ``alembic`` on the command line share one path.
To add a revision after changing ``services/store/models.py``::

    uv run alembic -c services/store/migrations/alembic.ini revision --autogenerate -m "what"
"""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy.engine import Connection

SCRIPT_DIR = Path(__file__).resolve().parent


def alembic_config(connection: Connection | None = None) -> Config:
    """An Alembic config pointing at this package, optionally bound to an open connection."""
    config = Config()
    config.set_main_option("script_location", str(SCRIPT_DIR))
    if connection is not None:
        config.attributes["connection"] = connection
    return config


def upgrade_to_head(connection: Connection) -> None:
    """Bring the schema on ``connection`` to the newest revision (idempotent)."""
    command.upgrade(alembic_config(connection), "head")
