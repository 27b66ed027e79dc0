"""The HTTP connection handling of ``streampart serve``: uvicorn's h11 protocol with a header timeout.

uvicorn closes idle keep-alive connections, but a client that trickles a request's headers a
byte at a time (slowloris) resets that timer with every byte and holds the connection for ever.
Here each request head must arrive whole within ``header_timeout`` of the connection opening
(or of the previous response): otherwise the connection is closed.
"""

from __future__ import annotations

import asyncio
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol


def header_timeout_protocol(seconds: float) -> type[H11Protocol]:
    """An H11Protocol class (for ``uvicorn.Config(http=…)``) enforcing ``seconds`` per request head."""

    class HeaderTimeoutProtocol(H11Protocol):
        _head_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def handle_events(self) -> None:
            super().handle_events()
            if self.conn.their_state is not h11.IDLE:  # the request head is in
                self._disarm()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing() and self.conn.their_state is h11.IDLE:
                self._arm()  # the next request's head, on a kept-alive connection

        def _arm(self) -> None:
            self._disarm()
            self._head_timer = self.loop.call_later(seconds, self._head_too_slow)

        def _disarm(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def _head_too_slow(self) -> None:
            self._head_timer = None
            if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
                self.transport.close()

    return HeaderTimeoutProtocol
