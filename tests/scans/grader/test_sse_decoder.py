"""The SSE decoder on its own: framing rules and bounded memory (the wire tests are in
test_bad_input.py)."""

from scans.grader.sse import SSEDecoder

STREAM = (b": hello\n\nevent: message\nid: 1\ndata: {\"a\":1}\n\ndata:{\"b\":2}\r\n\r\n"
          b"retry: 10\ndata: line1\ndata: line2\n\ndata: [DONE]\n\n")
EXPECTED = [b'{"a":1}', b'{"b":2}', b"line1\nline2", b"[DONE]"]


def test_decoder_reads_every_event_of_a_mixed_stream():
    decoder = SSEDecoder()
    assert decoder.feed(STREAM) + decoder.flush() == EXPECTED


def test_decoder_gives_the_same_events_for_every_split_point():
    for cut in range(len(STREAM) + 1):
        decoder = SSEDecoder()
        events = decoder.feed(STREAM[:cut]) + decoder.feed(STREAM[cut:]) + decoder.flush()
        assert events == EXPECTED, cut


def test_decoder_gives_the_same_events_fed_one_byte_at_a_time():
    decoder = SSEDecoder()
    events = []
    for i in range(len(STREAM)):
        events += decoder.feed(STREAM[i:i + 1])
    assert events + decoder.flush() == EXPECTED


def test_decoder_flushes_a_last_event_without_its_blank_line():
    decoder = SSEDecoder()
    assert decoder.feed(b"data: [DONE]") == []
    assert decoder.flush() == [b"[DONE]"]


def test_an_oversized_line_is_dropped_without_being_buffered():
    decoder = SSEDecoder(max_line=1000)
    events = decoder.feed(b"data: " + b"x" * 600)
    events += decoder.feed(b"x" * 600)          # now over the cap: dropped, skipping
    assert len(decoder._buf) == 0
    events += decoder.feed(b"y" * 5000)         # still the same line: nothing kept
    assert len(decoder._buf) == 0
    events += decoder.feed(b"\n\ndata: ok\n\n")
    assert events == [b"ok"]
    assert decoder.oversized == 1


def test_an_event_of_endless_data_lines_is_bounded_too():
    decoder = SSEDecoder(max_line=100)
    events = decoder.feed(b"data: 0123456789\n" * 50 + b"\ndata: ok\n\n")
    assert events == [b"ok"]
    assert decoder.oversized == 1


def test_events_before_an_oversized_line_in_the_same_read_are_kept():
    decoder = SSEDecoder(max_line=100)
    events = decoder.feed(b"data: ok\n\ndata: " + b"x" * 500)
    events += decoder.feed(b"x\n\ndata: after\n\n")
    assert events == [b"ok", b"after"]
    assert decoder.oversized == 1
