"""Options several ``gpucloud`` commands share: ``--json``, and the paging of listings."""

from __future__ import annotations

from typing import Annotated

import typer

from clients.cli.context import int32

JsonFlag = Annotated[bool, typer.Option("--json", help="Print JSON instead of tables and text.")]
PageSize = Annotated[int, typer.Option(parser=int32, help="Items per page (0: server default).")]
PageToken = Annotated[str, typer.Option(help="Continue from a previous page's next_page_token.")]
AllPages = Annotated[
    bool, typer.Option("--all", help="Follow next_page_token to the end (from --page-token's page, if given).")
]
