"""What every suite shares: the implementation under test, the functions each case needs, and
the known mistakes whose hints a failing case prints.

A suite never imports the reference or the candidate itself: it calls ``under_test()`` and reads
names from it when a case runs, so a name the candidate has not written yet fails only the cases
that need it (``exercises/conftest.py`` reports those as "not implemented yet"). An interface
that is a class names its methods as ``Class.method``, and a suite wraps each object it makes
with ``guarded`` so that a method still raising NotImplementedError reads the same way.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import inspect
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest


class NotWritten(BaseException):
    """``name`` raised NotImplementedError: the case is "not implemented yet", not failed.

    A BaseException, so that hypothesis stops at once rather than shrinking an input that
    every example fails the same way."""

    def __init__(self, name: str) -> None:
        super().__init__(f"{name} is not implemented yet")
        self.name = name


class Missing(NotWritten):
    """The implementation does not define ``name`` (yet)."""


def _innermost(error: BaseException) -> str:
    """The function that raised ``error``, as ``needs`` names it (``union``, ``Store.query``):
    the last frame of its traceback."""
    tb = error.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return "?" if tb is None else tb.tb_frame.f_code.co_qualname


def _guarded(function: Callable[..., Any]) -> Callable[..., Any]:
    if inspect.iscoroutinefunction(function):

        @functools.wraps(function)
        async def wait(*args: Any, **kwargs: Any) -> Any:
            try:
                return await function(*args, **kwargs)
            except NotImplementedError as error:
                raise NotWritten(_innermost(error)) from error

        return wait

    @functools.wraps(function)
    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return function(*args, **kwargs)
        except NotImplementedError as error:
            raise NotWritten(_innermost(error)) from error

    return call


class _Guarded:
    """An object of the implementation whose methods raise NotWritten where they raise
    NotImplementedError; every other attribute is the object's own."""

    def __init__(self, wrapped: object) -> None:
        self._wrapped = wrapped

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._wrapped, name)
        return _guarded(value) if inspect.ismethod(value) else value

    def __repr__(self) -> str:
        return repr(self._wrapped)


def guarded(instance: object) -> Any:
    """``instance`` (an object of a class of the implementation, such as the service a suite
    made) with each of its methods reporting "not implemented yet" as a function does."""
    return _Guarded(instance)


_ABSENT = object()


class Implementation:
    """The names of one implementation: a candidate's file, or the reference modules in turn."""

    def __init__(self, label: str, modules: Sequence[ModuleType]) -> None:
        self.label = label
        self._modules = tuple(modules)

    def defines(self, name: str) -> bool:
        """Whether any of the modules defines ``name``: a function, or ``Class.method``."""
        for module in self._modules:
            value: object = module
            for part in name.split("."):
                value = getattr(value, part, _ABSENT)
                if value is _ABSENT:
                    break
            else:
                return True
        return False

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            # Not the interface: tools (pytest's collection, mock detection) probe such names.
            raise AttributeError(name)
        for module in self._modules:
            if hasattr(module, name):
                value = getattr(module, name)
                return _guarded(value) if inspect.isfunction(value) else value
        raise Missing(name)


class NotConfigured(RuntimeError):
    """A suite was imported without an implementation chosen: run it with ``gpucloud exercises check``."""


_current: Implementation | None = None


def choose(implementation: Implementation) -> None:
    """Make ``implementation`` the one ``under_test`` returns (the conftest does, before collection)."""
    global _current
    _current = implementation


def under_test() -> Implementation:
    """The implementation the suite runs against."""
    if _current is None:
        raise NotConfigured("no implementation chosen: run the suite with `gpucloud exercises check ID`")
    return _current


def load_reference(modules: Sequence[str]) -> Implementation:
    """The project's own modules, imported by name."""
    return Implementation(" + ".join(modules), [importlib.import_module(name) for name in modules])


def load_file(path: Path) -> Implementation:
    """A candidate's file, wherever it is on disk, imported as a module of its own. Raises what
    importing it raises (a SyntaxError, an ImportError)."""
    name = f"candidate_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"{path} cannot be imported as a Python module")
    module = importlib.util.module_from_spec(spec)
    # Registered before it runs: dataclasses and pickling look a module up by its name.
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return Implementation(str(path), [module])


_at_finish: list[Callable[[], None]] = []


def at_finish(stop: Callable[[], None]) -> None:
    """Call ``stop`` once the suite has run, before the process starts to exit: a reference that
    started something (a control plane) stops it there, while its threads can still run."""
    _at_finish.append(stop)


def finish() -> None:
    """Call what ``at_finish`` was given, the latest first (the conftest does, at the session's end)."""
    while _at_finish:
        _at_finish.pop()()


def needs(*functions: str) -> pytest.MarkDecorator:
    """Mark a case with the functions it calls: it is "not implemented yet" while one is missing."""
    return pytest.mark.needs(*functions)


@dataclass(frozen=True)
class Mistake:
    """A known wrong answer: ``shows(impl)`` is True when ``impl`` makes it (a small input whose
    right answer the mistake changes), and a failing case that calls one of ``functions`` prints
    ``hint``. ``key`` names the known-wrong answer in ``wrong/`` that the suite must reject."""

    key: str
    hint: str
    functions: tuple[str, ...]
    shows: Callable[[Implementation], bool]

    def applies(self, impl: Implementation, used: Sequence[str]) -> bool:
        """Whether a case calling ``used`` failed, on ``impl``, because of this mistake. A probe
        that raises tells nothing."""
        if not set(self.functions) & set(used) or not all(impl.defines(f) for f in self.functions):
            return False
        try:
            return self.shows(impl)
        except (Exception, NotWritten):
            return False
