"""volley: lightweight message passing (Directed-Point endpoints, GAMMA active ports).

Run a script on several ranks with ``volley run -n 4 python3 script.py``.
"""

from typing import Callable, Optional, Tuple

from typing_extensions import Buffer

class Error(Exception):
    """A volley operation failed."""

class PeerLost(Error):
    """The peer is gone (it died, or its host is unreachable)."""

class BufferTooSmall(Error):
    """The buffer is smaller than the message; the message stays queued."""

class World:
    """The job: joins it (started by volley run, Hydra or Slurm; alone, a world of one)."""

    def __init__(self) -> None: ...
    @property
    def rank(self) -> int: ...
    @property
    def size(self) -> int: ...
    @property
    def local_rank(self) -> int: ...
    def open(self, port: int) -> Endpoint:
        """Opens an endpoint on ``port``."""
    def bind(self, port: int, callback: Callable[[bytes, Tuple[int, int]], None]) -> ActivePort:
        """Binds an active port: ``callback(data, (rank, port))`` runs for each message."""
    def progress(self) -> int:
        """Makes progress without waiting; raises what an active-port callback raised."""
    def start_progress_thread(self) -> None: ...
    def counters(self) -> dict[str, int]: ...

class Endpoint:
    """An endpoint on a port."""

    @property
    def port(self) -> int: ...
    def target(self, rank: int, port: int) -> None:
        """Sets where ``send`` and ``try_send`` go."""
    def send(self, data: Buffer) -> None:
        """Sends the bytes of any C-contiguous buffer, read in place (no copy in Python)."""
    def send_to(self, rank: int, port: int, data: Buffer) -> None: ...
    def try_send(self, data: Buffer) -> bool:
        """Sends without waiting; False if there is no room now (nothing sent)."""
    def recv(self) -> Message:
        """Waits for the next message (GIL released) and lends it in place."""
    def try_recv(self) -> Optional[Message]: ...
    def recv_into(self, buffer: Buffer) -> Tuple[int, Tuple[int, int]]:
        """Copies the next message into ``buffer``; returns (length, (rank, port))."""
    def fileno(self) -> int:
        """A descriptor for selectors and asyncio (owned by volley)."""

class Message(Buffer):
    """A received message lent in place; exports its bytes read-only."""

    @property
    def source(self) -> Tuple[int, int]: ...
    @property
    def released(self) -> bool: ...
    def __len__(self) -> int: ...
    def release(self) -> None:
        """Gives the bytes back; BufferError while a view of them is alive."""
    def __enter__(self) -> Message: ...
    def __exit__(self, *exc: object) -> bool: ...

class ActivePort:
    def unbind(self) -> None: ...
