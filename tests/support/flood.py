"""A flood of idle connections, as a client with no credential can send one: from several loopback
source addresses, each connection sending a request line and then a header line every
``trickle`` seconds, never finishing its head; one the server closes is opened again after
``pause`` seconds, for as long as the flood lasts. Loopback only (127.0.0.0/8)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from dataclasses import dataclass, field

from playguard_async.kits.aio import bounded


@dataclass
class Flood:
    """``per_source`` connections from each of ``sources`` to 127.0.0.1:``port``."""

    port: int
    sources: Sequence[str]
    per_source: int
    trickle: float = 1.0
    pause: float = 0.5
    open_now: int = 0
    most_open: int = 0
    closed_by_server: int = 0
    failed_to_connect: int = 0
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)

    async def __aenter__(self) -> Flood:
        self._tasks = [
            asyncio.ensure_future(self._keep_one(source))
            for source in self.sources
            for _ in range(self.per_source)
        ]
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _keep_one(self, source: str) -> None:
        while True:
            try:
                reader, writer = await asyncio.open_connection(
                    "127.0.0.1", self.port, local_addr=(source, 0)
                )
            except OSError:
                self.failed_to_connect += 1
                await asyncio.sleep(self.pause)
                continue
            self.open_now += 1
            self.most_open = max(self.most_open, self.open_now)
            try:
                await self._trickle(reader, writer)
            finally:
                self.open_now -= 1
                writer.close()
                with contextlib.suppress(OSError):
                    await writer.wait_closed()
            await asyncio.sleep(self.pause)

    async def _trickle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Until the server closes the connection (then counted)."""
        line = b"GET / HTTP/1.1\r\n"
        number = 0
        while True:
            try:
                writer.write(line)
                await writer.drain()
                if await bounded(self.trickle, reader.read(4096)) == b"":
                    self.closed_by_server += 1
                    return
            except TimeoutError:
                number += 1
                line = f"X-Idle-{number}: x\r\n".encode()
            except OSError:
                self.closed_by_server += 1
                return
