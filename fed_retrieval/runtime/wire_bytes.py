"""The bytes this process has sent to and received from each peer it calls
(a TFF worker through `value_bytes.BytesStub`, a server through
`array_service.RemoteObject`), by the peer's address: what each link carries
when the peers are machines of their own, the driver's link their sum.

A message counts at its serialized size; gRPC's framing (5 bytes a message
and 9 a 16 KB frame) and TCP's are left out, well under 1% of the large
messages that make up a round's bytes.
"""

import threading
from typing import Dict, Tuple

_lock = threading.Lock()
_totals: Dict[str, Tuple[int, int]] = {}


def add(address: str, sent: int, received: int) -> None:
  """Counts `sent` bytes to and `received` bytes from the peer at `address`."""
  with _lock:
    before_sent, before_received = _totals.get(address, (0, 0))
    _totals[address] = (before_sent + sent, before_received + received)


def totals() -> Dict[str, Tuple[int, int]]:
  """{address: (bytes sent to it, bytes received from it)} so far."""
  with _lock:
    return dict(_totals)


def between(before: Dict[str, Tuple[int, int]], after: Dict[str, Tuple[int, int]],
            address: str) -> Tuple[int, int]:
  """(sent, received) with `address` from one `totals()` to a later one."""
  sent, received = after.get(address, (0, 0))
  sent_before, received_before = before.get(address, (0, 0))
  return sent - sent_before, received - received_before
