"""Listing commands: one page of a listing, or with ``--all`` every item from ``--page-token``'s
page on, shown as a table (with the token of the next page) or as JSON."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol, TypeVar

import typer
from rich.table import Table

from clients import listings, models
from clients.async_client import AsyncClient
from clients.cli import render
from clients.cli.context import call
from clients.cli.options import JsonFlag, PageSize, PageToken

T = TypeVar("T")


class Listing(Protocol[T]):
    """An ``AsyncClient`` listing that takes no filters: ``AsyncClient.list_tenants``, say."""

    def __call__(self, client: AsyncClient, /, *, page_size: int, page_token: str) -> Awaitable[models.Page[T]]:
        """One page of ``page_size`` items (0: the server's default) from ``page_token``'s on."""
        ...


def show_listing(
    ctx: typer.Context,
    listing: Callable[[AsyncClient, str], Awaitable[models.Page[T]]],
    *,
    page_token: str,
    all_pages: bool = False,
    json_out: bool,
    as_table: Callable[[Sequence[T]], Table],
) -> None:
    """Print the page ``listing`` gives for ``page_token`` (with ``all_pages``, the items of every page
    from that one on, as one page with no next page) ``as_table``, or as JSON."""

    async def fetch(client: AsyncClient) -> models.Page[T]:
        def page_of(token: str) -> Awaitable[models.Page[T]]:
            return listing(client, token)

        if not all_pages:
            return await page_of(page_token)
        return models.Page([item async for page in listings.pages(page_of, page_token) for item in page], "")

    page = call(ctx, fetch)
    render.show_page(page, json_out, as_table(page.items))


def add_list_command(
    group: typer.Typer, doc: str, listing: Listing[T], as_table: Callable[[Sequence[T]], Table]
) -> None:
    """Add ``list`` to ``group``: one page of ``listing`` with ``--page-size`` and ``--page-token``,
    shown ``as_table`` or as JSON; ``doc`` is its help."""

    def list_items(
        ctx: typer.Context, page_size: PageSize = 0, page_token: PageToken = "", json_out: JsonFlag = False
    ) -> None:
        show_listing(
            ctx,
            lambda client, token: listing(client, page_size=page_size, page_token=token),
            page_token=page_token,
            json_out=json_out,
            as_table=as_table,
        )

    list_items.__doc__ = doc
    group.command("list")(list_items)
