"""Following a listing's page tokens: its pages one after another, never round in a loop."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

from clients.errors import InternalError
from clients.models import Page

T = TypeVar("T")


def next_page_token(page: Page[Any], token: str) -> str:
    """The token of the page after ``page``, fetched with ``token``; "" after the last page.
    InternalError when the server hands ``token`` back, which would make a listing loop forever."""
    if page.next_page_token and page.next_page_token == token:
        raise InternalError("the server returned the same page token twice; stopping the listing")
    return page.next_page_token


async def pages(fetch: Callable[[str], Awaitable[Page[T]]], token: str) -> AsyncIterator[Page[T]]:
    """Every page of a listing, from ``token``'s on ("" for the first)."""
    while True:
        page = await fetch(token)
        yield page
        token = next_page_token(page, token)
        if not token:
            return
