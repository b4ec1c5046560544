"""Scenarios run under `volley run -n N python3 scenarios.py NAME`; each rank prints
`result: NAME rank=R ok` when every check held (test_volley.py runs them)."""

import asyncio
import os
import signal
import sys
import time

import numpy as np

import volley

DTYPES = [np.uint8, np.int16, np.int32, np.int64, np.float32, np.float64, np.complex128]
SHAPES = [(0,), (1,), (7,), (17, 33), (4, 5, 6), (1 << 20,)]


def expect(cond, what):
    if not cond:
        raise AssertionError(what)


def array(dtype, shape, seed):
    n = int(np.prod(shape))
    a = (np.arange(n, dtype=np.int64) * 7 + seed) % 251
    return a.astype(dtype).reshape(shape)


def numpy_pingpong(w):
    """Arrays of every dtype and shape there and back, values checked; received in place and
    into a caller's array, alternately."""
    ep = w.open(1)
    ep.target(1 - w.rank, 1)
    seed = 0
    for dt in DTYPES:
        for shape in SHAPES:
            seed += 1
            a = array(dt, shape, seed)
            if w.rank == 0:
                ep.send(a)
                if seed % 2:
                    with ep.recv() as m:
                        b = np.frombuffer(m, dtype=dt).reshape(shape)
                        expect(np.array_equal(b, a + 1 if a.size else a), f"{dt} {shape} in place")
                        del b
                else:
                    b = np.empty(shape, dtype=dt)
                    n, src = ep.recv_into(b)
                    expect(n == a.nbytes and src == (1, 1), f"{dt} {shape}: {n} bytes from {src}")
                    expect(np.array_equal(b, a + 1 if a.size else a), f"{dt} {shape} into")
            else:
                m = ep.recv()
                got = np.frombuffer(m, dtype=dt).reshape(shape)
                expect(np.array_equal(got, a), f"{dt} {shape} arrived wrong")
                # Sent straight from a view of the received bytes: no copy in Python.
                ep.send(got + 1 if got.size else got)
                del got
                m.release()


def zero_copy(w):
    """A received message's views all point at one place, the message's bytes in volley's
    pool; a view keeps the message from being released; after release, no view can be made."""
    ep = w.open(2)
    ep.target(1 - w.rank, 2)
    if w.rank == 0:
        ep.send(np.arange(1000, dtype=np.float64))
        ep.send(b"second")
        return
    m = ep.recv()
    v = memoryview(m)
    a = np.frombuffer(m, dtype=np.float64)
    expect(v.readonly and len(v) == 8000 and len(m) == 8000, "a read-only view of 8000 bytes")
    addr = a.__array_interface__["data"][0]
    expect(np.frombuffer(v, dtype=np.uint8).__array_interface__["data"][0] == addr, "two views, two places")
    expect(np.array_equal(a, np.arange(1000, dtype=np.float64)), "values")
    try:
        m.release()
        raise AssertionError("released under a live view")
    except BufferError:
        pass
    v.release()
    del a
    m.release()
    expect(m.released, "released")
    for make in (memoryview, bytes):
        try:
            make(m)
            raise AssertionError(f"{make.__name__} of a released message")
        except ValueError:
            pass
    m.release()  # twice: nothing
    # A non-contiguous array is refused, not silently copied.
    try:
        ep.send(np.arange(10)[::2])
        raise AssertionError("a strided array was sent")
    except (BufferError, ValueError) as e:  # numpy says ValueError: not C-contiguous
        expect("contiguous" in str(e), str(e))
    # Too small: the message stays queued.
    small = bytearray(3)
    try:
        ep.recv_into(small)
        raise AssertionError("recv_into a too-small buffer")
    except volley.BufferTooSmall:
        pass
    big = bytearray(16)
    n, _ = ep.recv_into(big)
    expect(bytes(big[:n]) == b"second", "the queued message whole")


def asyncio_reader(w):
    """An asyncio loop wakes on the endpoint's descriptor for each message."""
    ep = w.open(3)
    ep.target(1 - w.rank, 3)
    count = 30
    if w.rank == 0:
        for i in range(count):
            time.sleep(0.002)
            ep.send(i.to_bytes(4, "little"))
        ep.recv()
        return

    async def main():
        loop = asyncio.get_running_loop()
        got = []
        done = loop.create_future()

        def readable():
            while True:
                m = ep.try_recv()
                if m is None:
                    return
                got.append(int.from_bytes(bytes(m), "little"))
                m.release()
                if len(got) == count and not done.done():
                    done.set_result(None)

        loop.add_reader(ep.fileno(), readable)
        readable()
        await asyncio.wait_for(done, 20)
        loop.remove_reader(ep.fileno())
        return got

    got = asyncio.run(main())
    expect(got == list(range(count)), f"got {got}")
    ep.send(b"done")


def active_port(w):
    """A Python callable on an active port sees every message, with its source, in order."""
    count = 50
    ep = w.open(4)
    if w.rank == 0:
        seen = []
        port = w.bind(9, lambda data, src: seen.append((bytes(data), src)))
        for r in range(1, w.size):
            ep.send_to(r, 4, b"go")
        deadline = time.time() + 30
        while len(seen) < count * (w.size - 1):
            w.progress()
            expect(time.time() < deadline, f"only {len(seen)} messages")
        for r in range(1, w.size):
            mine = [d for d, s in seen if s == (r, 4)]
            expect(mine == [f"{r}:{i}".encode() for i in range(count)], f"from {r}: {mine[:3]}")
        port.unbind()
        port.unbind()
        for r in range(1, w.size):
            ep.send_to(r, 4, b"done")
    else:
        ep.recv().release()
        ep.target(0, 9)
        for i in range(count):
            ep.send(f"{w.rank}:{i}".encode())
        ep.recv().release()


def callback_error(w):
    """An exception raised by an active-port callback comes out of the next call that makes
    progress (and is printed)."""
    ep = w.open(5)
    if w.rank == 0:

        def cb(data, src):
            if data == b"bad":
                raise ValueError("the callback saw a bad message")

        port = w.bind(6, cb)
        ep.send_to(1, 5, b"go")
        deadline = time.time() + 30
        while True:
            try:
                w.progress()
            except ValueError as e:
                expect("bad message" in str(e), str(e))
                break
            expect(time.time() < deadline, "the callback's exception never came out")
        del port
        ep.send_to(1, 5, b"done")
    else:
        ep.recv().release()
        ep.send_to(0, 6, b"fine")
        ep.send_to(0, 6, b"bad")
        ep.recv().release()


def dead_peer(w):
    """A rank killed with SIGKILL: the other's receive raises volley.PeerLost."""
    ep = w.open(7)
    ep.target(1 - w.rank, 7)
    if w.rank == 1:
        ep.recv().release()
        os.kill(os.getpid(), signal.SIGKILL)
    ep.send(b"die")
    try:
        ep.recv()
        raise AssertionError("a receive from a dead rank returned")
    except volley.PeerLost as e:
        expect("1" in str(e), str(e))


def main():
    name = sys.argv[1]
    w = volley.World()
    globals()[name](w)
    print(f"result: {name} rank={w.rank} ok", flush=True)


if __name__ == "__main__":
    main()
