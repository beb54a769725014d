"""Connections that send a request too slowly are closed, so half-sent requests cannot hold the server.

uvicorn closes an idle keep-alive connection, but it has no deadline for the request itself: a
client that opens a connection and sends nothing, or half its headers, or a ``Content-Length`` and
then half the body, keeps a connection (and a file descriptor) for as long as it likes, and a few
thousand such clients exhaust the server (the "slowloris" attack). Two deadlines close that:

- **Headers**: :class:`HeaderDeadlineProtocol`, uvicorn's httptools protocol with a timer armed when
  a connection opens and when each request's first byte arrives, and cleared when its headers are
  complete; when it fires the connection is closed (there is no request yet to answer).
- **Body**: :func:`receive_within`, used by :class:`~winnow.service.guards.BodyLimit` as it reads
  the body: each chunk must arrive within the deadline, else the request is answered 408
  ``request_timeout`` and the connection closed.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

#: Seconds a client has to send a request's headers, and between two chunks of its body.
DEFAULT_READ_TIMEOUT = 30.0


class BodyTooSlow(Exception):
    """The next chunk of a request's body did not arrive within the read timeout."""


async def receive_within(receive: Any, seconds: float) -> Any:
    """``await receive()``, or :class:`BodyTooSlow` after ``seconds``."""
    try:
        return await asyncio.wait_for(receive(), timeout=seconds)
    except asyncio.TimeoutError:
        raise BodyTooSlow(f"no part of the request body arrived for {seconds:g} s") from None


def header_deadline_protocol(seconds: float) -> type[HttpToolsProtocol]:
    """uvicorn's httptools protocol with a ``seconds`` deadline for each request's headers."""

    class HeaderDeadlineProtocol(HttpToolsProtocol):
        _deadline: asyncio.TimerHandle | None = None

        def _arm(self) -> None:
            if self._deadline is None:
                self._deadline = self.loop.call_later(seconds, self._too_slow)

        def _disarm(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None

        def _too_slow(self) -> None:
            self._deadline = None
            if not self.transport.is_closing():
                self.transport.close()

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def on_message_begin(self) -> None:
            super().on_message_begin()
            self._arm()

        def on_headers_complete(self) -> None:
            self._disarm()
            super().on_headers_complete()

        def on_response_complete(self) -> None:
            # Between requests uvicorn's keep-alive timer applies; a pipelined request that is
            # already being read arms the deadline again at its first byte.
            self._disarm()
            super().on_response_complete()

    return HeaderDeadlineProtocol
