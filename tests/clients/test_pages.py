"""Following page tokens in the clients: to the end, and never round in a loop."""

from __future__ import annotations

import pytest

from clients import models
from clients.errors import InternalError
from clients.listings import next_page_token


def test_the_token_after_a_page_or_nothing_after_the_last() -> None:
    assert next_page_token(models.Page([1], "b"), "a") == "b"
    assert next_page_token(models.Page([1], ""), "a") == ""


def test_a_server_handing_back_the_same_token_stops_the_listing() -> None:
    with pytest.raises(InternalError, match="same page token twice"):
        next_page_token(models.Page([1], "a"), "a")
