"""The data directory: made private to its owner, and refused when others may use it.

It holds the SQLite database (token digests, the page-token signing key, every tenant's data),
the operator token and the metrics store, so it is 0700 whatever the umask. A directory that
does not exist yet is made so; an empty one the server owns is narrowed to it (nothing in it
can have been read yet). One that holds something and lets group or others in is refused
rather than narrowed: its mode is the operator's to change (the path may be shared with other
things), and what it holds may already have been read, which the operator needs to know (a
token file there is a credential to rotate).

Files the server keeps (in the data directory or, for a SQLite URL, anywhere) are created
``PRIVATE_FILE`` whatever the umask, and an existing one that group or others may use is
narrowed to its owner when the server opens it, with a warning: a directory made 0700 by hand
keeps the modes of the files in it, and a database named by its URL may sit in a directory
others can enter.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

import structlog

log = structlog.get_logger(__name__)

# The modes of everything the server keeps: its owner's alone.
PRIVATE_DIRECTORY = 0o700
PRIVATE_FILE = 0o600
# Any permission for the group or for others.
_OPEN_TO_OTHERS = 0o077


class OpenDataDirectory(Exception):
    """The data directory lets other users in and is not empty; the message says how to fix it."""


def make_private(path: Path) -> None:
    """Create ``path`` (and its parents) with mode 0700, or check the one there: an empty
    directory this process owns is narrowed to 0700, any other one that group or others may
    use raises OpenDataDirectory. OSError when it cannot be made or read."""
    try:
        path.mkdir(mode=PRIVATE_DIRECTORY, parents=True)
    except FileExistsError:
        if not path.is_dir():
            raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(path)) from None
    else:
        # mkdir's mode passes through the umask, which may take more than group and others.
        path.chmod(PRIVATE_DIRECTORY)
        return
    status = path.stat()
    mode = stat.S_IMODE(status.st_mode)
    if not mode & _OPEN_TO_OTHERS:
        return
    if status.st_uid == os.geteuid() and not any(path.iterdir()):
        path.chmod(mode & ~_OPEN_TO_OTHERS)
        return
    raise OpenDataDirectory(
        f"{path} is open to other users (mode 0{mode:o}); a data directory holds the database, the operator"
        f" token and every tenant's data, and must be its owner's alone: run `chmod -R go= {path}` and start"
        " again (and rotate the operator token if others may have read it)"
    )


def narrow_to_owner(path: Path) -> None:
    """Take every permission of group and others off the file at ``path``, if it exists,
    keeping its owner's, and log a warning saying which file and the mode it had (its contents
    may have been read). A file whose mode this process may not change is left as it is, with
    a warning of its own: the server still serves from it, which its owner may have meant."""
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        return
    if not mode & _OPEN_TO_OTHERS:
        return
    try:
        path.chmod(mode & ~_OPEN_TO_OTHERS)
    except PermissionError as error:
        log.warning("data_file_open_to_others", path=str(path), mode=f"0{mode:o}", error=error.strerror)
    else:
        log.warning("data_file_narrowed", path=str(path), mode=f"0{mode:o}")
