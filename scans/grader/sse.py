"""A lean Server-Sent Events decoder over raw bytes.

The grader reads ``response.aiter_raw()`` and feeds the bytes here: no text decoding, no line
iterator objects, one ``split`` per network read. It follows the SSE rules that matter for
OpenAI-style streams:

* lines end in ``\\n`` or ``\\r\\n`` (a lone ``\\r`` is not treated as an end of line);
* ``data:`` with or without one following space; several ``data`` lines of one event are joined
  with ``\\n``; a blank line ends the event;
* comment lines (``:`` first, e.g. keep-alives) and other fields (``event:``, ``id:``,
  ``retry:``) are skipped;
* events may be split at any byte boundary across reads.

Memory stays bounded: a line longer than ``max_line`` bytes is never accumulated. The decoder
drops it, drops the event it belonged to, skips input up to the next newline and counts it in
``oversized``; the caller decides what that means for the stream.
"""

from __future__ import annotations

__all__ = ["DEFAULT_MAX_LINE", "SSEDecoder"]

DEFAULT_MAX_LINE = 1024 * 1024  # 1 MiB


class SSEDecoder:
    __slots__ = ("max_line", "oversized", "_buf", "_data", "_skipping", "_dropping", "events_seen")

    def __init__(self, max_line: int = DEFAULT_MAX_LINE) -> None:
        self.max_line = max_line
        self.oversized = 0
        self.events_seen = 0
        self._buf = b""
        self._data: bytes | None = None
        self._skipping = False
        self._dropping = False  # inside an event that had an oversized part: drop it whole

    def feed(self, chunk: bytes) -> list[bytes]:
        """Feed raw bytes; return the data payloads of the events completed by them."""
        if self._skipping:
            newline = chunk.find(b"\n")
            if newline < 0:
                return []
            chunk = chunk[newline + 1:]
            self._skipping = False
        if self._buf:
            chunk = self._buf + chunk
        lines = chunk.split(b"\n")
        tail = lines.pop()
        out: list[bytes] = []
        data = self._data
        max_line = self.max_line
        for line in lines:
            if line and line[-1] == 13:  # b"\r"
                line = line[:-1]
            if not line:
                if data is not None:
                    out.append(data)
                    data = None
                self._dropping = False
                continue
            if len(line) > max_line:
                self._oversize()
                data = None
                continue
            if self._dropping:
                continue
            if line.startswith(b"data:"):
                value = line[5:]
                if value[:1] == b" ":
                    value = value[1:]
                if data is None:
                    data = value
                else:
                    data = data + b"\n" + value
                    if len(data) > max_line:  # an event of endless data lines: same bound
                        self._oversize()
                        data = None
            # comments (":...") and other fields are skipped
        self._data = data
        if len(tail) > max_line:  # a line still growing past the cap: stop keeping it
            self._oversize()
            self._skipping = True
            tail = b""
        self._buf = tail
        self.events_seen += len(out)
        return out

    def flush(self) -> list[bytes]:
        """At the end of the body: the last event even without its closing blank line."""
        out: list[bytes] = []
        if self._buf and not self._skipping and not self._dropping:
            line = self._buf[:-1] if self._buf.endswith(b"\r") else self._buf
            self._buf = b""
            if line.startswith(b"data:"):
                value = line[5:]
                if value[:1] == b" ":
                    value = value[1:]
                self._data = value if self._data is None else self._data + b"\n" + value
        if self._data is not None and not self._dropping:
            out.append(self._data)
            self._data = None
        self.events_seen += len(out)
        return out

    def _oversize(self) -> None:
        self.oversized += 1
        self._data = None  # the event the line belonged to is dropped whole
        self._dropping = True
