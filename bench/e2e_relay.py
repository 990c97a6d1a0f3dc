"""A TCP relay that delays every byte by a fixed one-way time: the delay half of an emulated WAN
link, for kernels without ``sch_netem`` (``tc qdisc add ... netem`` answers "Specified qdisc kind
is unknown").  ``bench/bench_e2e.py --link netem`` runs it in its hub network namespace; the rate
half is ``tc tbf`` on each party's interface.

    python bench/e2e_relay.py --delay-ms 10 --route 10.77.0.254:51001=10.77.0.2:50101 ... \
        [--echo 10.77.0.254:51999]

Each ``--route LISTEN=TARGET`` accepts connections on LISTEN and opens one to TARGET per accepted
connection; bytes read from either side are written to the other ``--delay-ms`` after they were
read, in order, so a round trip through the relay takes twice the delay plus the transfer (the
rate of the sender's interface).  ``--echo`` listens for a check of the round trip: bytes sent to
it come back through the same delays.  Prints ``ready`` once every port listens.
"""

from __future__ import annotations

import argparse
import asyncio
import sys


async def _delayed_copy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                        delay: float) -> None:
    """Copy reader -> writer, each block written ``delay`` s after it was read."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

    async def pump_in() -> None:
        while True:
            data = await reader.read(1 << 16)
            await queue.put((loop.time() + delay, data))
            if not data:
                return

    async def pump_out() -> None:
        while True:
            due, data = await queue.get()
            wait = due - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            if not data:
                if writer.can_write_eof():
                    writer.write_eof()
                return
            writer.write(data)
            await writer.drain()

    try:
        await asyncio.gather(pump_in(), pump_out())
    except (ConnectionError, OSError):
        pass


def _split(addr: str) -> tuple[str, int]:
    host, _, port = addr.rpartition(":")
    return host, int(port)


async def _route(listen: str, target: str, delay: float) -> asyncio.AbstractServer:
    t_host, t_port = _split(target)

    async def handle(r1: asyncio.StreamReader, w1: asyncio.StreamWriter) -> None:
        try:
            r2, w2 = await asyncio.open_connection(t_host, t_port)
        except OSError:
            w1.close()
            return
        await asyncio.gather(_delayed_copy(r1, w2, delay), _delayed_copy(r2, w1, delay))
        for w in (w1, w2):
            w.close()

    host, port = _split(listen)
    return await asyncio.start_server(handle, host, port)


async def _echo(listen: str, delay: float) -> asyncio.AbstractServer:
    async def handle(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        loop = asyncio.get_running_loop()
        while True:
            data = await r.read(1 << 16)
            if not data:
                break
            arrived = loop.time()
            await asyncio.sleep(max(0.0, arrived + 2 * delay - loop.time()))  # in and back out
            w.write(data)
            await w.drain()
        w.close()
    host, port = _split(listen)
    return await asyncio.start_server(handle, host, port)


async def _main(a: argparse.Namespace) -> None:
    delay = a.delay_ms / 1000.0
    servers = [await _route(*spec.split("=", 1), delay) for spec in a.route]
    if a.echo:
        servers.append(await _echo(a.echo, delay))
    print("ready", flush=True)
    await asyncio.gather(*(s.serve_forever() for s in servers))


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--delay-ms", type=float, required=True)
    p.add_argument("--route", action="append", default=[], help="LISTEN=TARGET (host:port each)")
    p.add_argument("--echo", default=None, help="host:port of a round-trip check")
    try:
        asyncio.run(_main(p.parse_args()))
    except KeyboardInterrupt:
        sys.exit(0)
