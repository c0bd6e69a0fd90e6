"""Following a listing's page tokens: its pages one after another, or its items.

``every_page`` and ``every_item`` make a client's ``iter_*`` methods of its ``list_*`` ones, so an
iterator takes its listing's arguments, declared once, on the listing.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import AsyncIterator, Awaitable, Callable
from types import GenericAlias
from typing import Any, Concatenate, ParamSpec, TypeVar

from clients.errors import InternalError
from clients.models import Page

S = TypeVar("S")
P = ParamSpec("P")
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


def every_page(
    listing: Callable[Concatenate[S, P], Awaitable[Page[T]]],
) -> Callable[Concatenate[S, P], AsyncIterator[Page[T]]]:
    """A method taking ``listing``'s arguments, which must include ``page_token``, that yields every page
    from that token's on (from the first when it is left out)."""

    async def every(owner: S, /, *args: P.args, **kwargs: P.kwargs) -> AsyncIterator[Page[T]]:
        def fetch(token: str) -> Awaitable[Page[T]]:
            kwargs["page_token"] = token
            return listing(owner, *args, **kwargs)

        async for page in pages(fetch, typing.cast(str, kwargs.get("page_token", ""))):
            yield page

    signature = inspect.signature(listing, eval_str=True)
    returns = GenericAlias(AsyncIterator, signature.return_annotation)
    _describe(every, like=listing, name=f"{listing.__name__}_pages", doc=None, signature=signature, returns=returns)
    return every


def every_item(
    paged: Callable[Concatenate[S, P], AsyncIterator[Page[T]]], *, name: str, doc: str
) -> Callable[Concatenate[S, P], AsyncIterator[T]]:
    """The method ``name``, with the docstring ``doc``, that takes ``paged``'s arguments and yields the items of
    every page it yields."""

    async def every(owner: S, /, *args: P.args, **kwargs: P.kwargs) -> AsyncIterator[T]:
        async for page in paged(owner, *args, **kwargs):
            for item in page:
                yield item

    signature = inspect.signature(paged, eval_str=True)
    # The item type of AsyncIterator[Page[T]], for the return annotation help() shows.
    (item,) = typing.get_args(typing.get_args(signature.return_annotation)[0])
    _describe(every, like=paged, name=name, doc=doc, signature=signature, returns=GenericAlias(AsyncIterator, item))
    return every


def _describe(
    function: Callable[..., Any],
    *,
    like: Callable[..., Any],
    name: str,
    doc: str | None,
    signature: inspect.Signature,
    returns: object,
) -> None:
    """Name and document ``function`` as the method ``name`` of ``like``'s class, with ``like``'s parameters
    and the return annotation ``returns``, as ``help`` and ``inspect.signature`` show it."""
    owner = like.__qualname__.rpartition(".")[0]
    function.__name__ = name
    function.__qualname__ = f"{owner}.{name}" if owner else name
    function.__doc__ = doc
    vars(function)["__signature__"] = signature.replace(return_annotation=returns)
