"""The load path on aiohttp: the same Exchange as orchestrator.loadgen.http1 fills, from aiohttp's
client. Reads are timestamped when aiohttp hands them to the task (after its parser and a loop hop),
not in data_received as http1 does; the bench/loadgen_ceiling.py and bench/timing_accuracy.py runs
compare the two.

Limits as http1's: the whole exchange has its deadline (timeout_s), a silence longer than
idle_timeout_s (no head, or no whole SSE event) ends it as "stalled", the body has a cap
(max_response_bytes, reads counted with READ_COST_BYTES). aiohttp's own limits bound the head
(8 KiB per line and per header field) and refuse bad framing; those end as "protocol".
"""

from __future__ import annotations

import asyncio
import time

import aiohttp

from orchestrator.loadgen.exchange import Exchange, Origin
from orchestrator.loadgen.framing import DEFAULT_MAX_RESPONSE_BYTES, READ_COST_BYTES

_SKIP = {"host", "connection", "content-length", ""}


def _request_line_parts(head: bytes) -> dict[str, str]:
    """The headers of an Origin.head() block (without Host, Connection and the open Content-Length)."""
    out: dict[str, str] = {}
    for line in head.decode("latin-1").split("\r\n")[1:]:
        name, sep, value = line.partition(":")
        if sep and name.strip().lower() not in _SKIP:
            out[name.strip()] = value.strip()
    return out


class AiohttpClient:
    """POST requests through one aiohttp session (keep-alive pool, no connection limit)."""

    def __init__(self) -> None:
        self._session: aiohttp.ClientSession | None = None
        self._heads: dict[bytes, dict[str, str]] = {}

    def _sess(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=0, ttl_dns_cache=None),
                timeout=aiohttp.ClientTimeout(total=None), auto_decompress=False, trust_env=False,
            )
        return self._session

    async def post(self, origin: Origin, head: bytes, body: bytes, timeout_s: float,
                   max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
                   idle_timeout_s: float | None = None) -> Exchange:
        headers = self._heads.get(head)
        if headers is None:
            headers = self._heads[head] = _request_line_parts(head)
        url = f"{origin.scheme}://{origin.host}:{origin.port}{origin.path}"
        ex = Exchange()
        room = max_response_bytes
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        idle = idle_timeout_s if idle_timeout_s is not None else timeout_s
        progress = loop.time()  # the last progress: sent, head, a whole SSE event

        def by() -> float:  # the sooner of the deadline and the end of the allowed silence
            return min(deadline, progress + idle)

        try:
            async with asyncio.timeout_at(by()):
                resp = await self._sess().post(url, data=body, headers=headers)
            async with resp:
                ex.status = resp.status
                ex.end_s = time.perf_counter()
                progress = loop.time()
                reader = resp.content
                while True:
                    async with asyncio.timeout_at(by()):
                        data = await reader.readany()
                    if not data:
                        break
                    now = time.perf_counter()
                    if b"\n\n" in data or b"\r\n\r\n" in data:
                        progress = loop.time()
                    room -= len(data) + READ_COST_BYTES
                    if room < 0:
                        ex.error = "too_large"
                        break
                    ex.reads.append((now, data))
                    ex.end_s = now
                if ex.error is None:
                    ex.complete = True
        except TimeoutError:
            ex.error = "timeout" if loop.time() >= deadline else "stalled"
        except aiohttp.ClientPayloadError:  # the body ended before its framing said (a dropped connection)
            ex.error = "connection"
        except (aiohttp.ClientResponseError, aiohttp.http.HttpProcessingError):  # not HTTP/1.1 framing
            ex.error = "protocol"
        except (aiohttp.ClientError, OSError):
            ex.error = "connection"
        return ex

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def __aenter__(self) -> AiohttpClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
