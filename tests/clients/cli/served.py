"""``gpucloud serve`` as a process of its own (it configures logging process-wide, which must not
outlive a test in the test's process), its output read on a thread, so that a server that hangs
without a word fails a test instead of hanging CI."""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import subprocess
import threading

from tests.conftest import gpucloud_command


def environment() -> dict[str, str]:
    """This process's environment without the GPUCLOUD_ variables of the developer's own shell."""
    return {k: v for k, v in os.environ.items() if not k.startswith("GPUCLOUD_")}


class Served:
    """``gpucloud serve *args``, its stdout and stderr read together, line by line."""

    def __init__(self, *args: str) -> None:
        self.process = subprocess.Popen(
            [*gpucloud_command(), "serve", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=environment(),
        )
        # Every line read so far, and the JSON log lines among them.
        self.lines: list[str] = []
        self.events: list[dict[str, object]] = []
        self._new: queue.Queue[str] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self._new.put(line)

    def _next(self, timeout: float, wanted: str) -> tuple[str, dict[str, object] | None]:
        """The next line not read yet, waiting up to ``timeout`` seconds for it, and its JSON log
        event if it is one."""
        try:
            line = self._new.get(timeout=timeout)
        except queue.Empty:
            seen = [e.get("event") for e in self.events] if self.events else self.lines[-5:]
            raise AssertionError(f"no {wanted} in {timeout} s; saw {seen}") from None
        self.lines.append(line)
        try:
            event = json.loads(line) if line.startswith("{") else None
        except ValueError:
            event = None  # a line of the console format, or of a process's own output
        if isinstance(event, dict):
            self.events.append(event)
            return line, event
        return line, None

    def until(self, pattern: str, timeout: float = 60) -> re.Match[str]:
        """The first match of ``pattern`` in a line not read yet, waiting up to ``timeout`` seconds."""
        while True:
            line, _ = self._next(timeout, f"line matching {pattern!r}")
            if found := re.search(pattern, line):
                return found

    def until_event(self, event: str, timeout: float = 60) -> dict[str, object]:
        """The first JSON log line of ``event`` not read yet, waiting up to ``timeout`` seconds."""
        while True:
            _, logged = self._next(timeout, f"{event} line")
            if logged is not None and logged.get("event") == event:
                return logged

    def rest(self) -> str:
        """The output not read yet, once the process has exited."""
        self._reader.join(timeout=10)
        unread = []
        while not self._new.empty():
            unread.append(self._new.get())
        self.lines.extend(unread)
        return "".join(unread)

    def close(self) -> None:
        """Kill the process if it still runs and stop reading its output."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self._reader.join(timeout=10)  # at the end of the output once the process is gone
        assert self.process.stdout is not None
        self.process.stdout.close()

    def stop(self) -> str:
        """SIGTERM, then the whole output once the process has exited (killed if it has not in 60 s)."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=60)
        finally:
            self.close()
        self.rest()
        return "".join(self.lines)
