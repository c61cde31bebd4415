#!/usr/bin/env python3
"""Reads TensorBoard event files (tfevents) without TensorFlow or pstrain.

An independent reader for pstrain's tests and for people: it implements
the TFRecord framing (u64 length, masked CRC-32C of it, data, masked
CRC-32C of the data) and decodes the protobuf wire format itself, by
TensorFlow's field numbers (event.proto: wall_time 1, step 2,
file_version 3, summary 5; summary.proto: value 1, tag 1, simple_value 2).
Nothing here is shared with pstrain's C++ writer.

Usage: read_events.py FILE_OR_DIR...
Prints one JSON object per record:
  {"file": ..., "wall_time": ..., "step": ..., "file_version": "brain.Event:2"}
  {"file": ..., "wall_time": ..., "step": ..., "tag": "train/loss", "value": 0.25}
Exits 1 naming the file and offset at the first damaged record.
"""
import json
import os
import struct
import sys


def _table():
    poly = 0x82F63B78
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ poly if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _table()


def crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c = _TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def masked(crc):
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def varint(buf, i):
    shift = result = 0
    while True:
        if i >= len(buf):
            raise ValueError("truncated varint")
        b = buf[i]
        i += 1
        result |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return result, i


def fields(buf):
    """Yields (number, wire_type, value) of a protobuf message."""
    i = 0
    while i < len(buf):
        key, i = varint(buf, i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, i = varint(buf, i)
        elif wire == 1:
            value = buf[i:i + 8]
            i += 8
        elif wire == 2:
            n, i = varint(buf, i)
            value = buf[i:i + n]
            i += n
        elif wire == 5:
            value = buf[i:i + 4]
            i += 4
        else:
            raise ValueError("unsupported wire type %d" % wire)
        if i > len(buf):
            raise ValueError("truncated field %d" % number)
        yield number, wire, value


def decode_event(buf):
    out = {"wall_time": 0.0, "step": 0}
    scalars = []
    for number, wire, value in fields(buf):
        if number == 1 and wire == 1:
            out["wall_time"] = struct.unpack("<d", value)[0]
        elif number == 2 and wire == 0:
            out["step"] = value - (1 << 64) if value >= 1 << 63 else value
        elif number == 3 and wire == 2:
            out["file_version"] = value.decode("utf-8")
        elif number == 5 and wire == 2:
            for vnum, vwire, v in fields(value):
                if vnum != 1 or vwire != 2:
                    continue
                tag, simple = None, None
                for n, w, x in fields(v):
                    if n == 1 and w == 2:
                        tag = x.decode("utf-8")
                    elif n == 2 and w == 5:
                        simple = struct.unpack("<f", x)[0]
                scalars.append((tag, simple))
    if not scalars:
        return [out]
    return [dict(out, tag=t, value=v) for t, v in scalars]


def records(path):
    with open(path, "rb") as f:
        data = f.read()
    i = 0
    while i < len(data):
        if i + 12 > len(data):
            raise ValueError("%s: a truncated record header at offset %d" % (path, i))
        header = data[i:i + 8]
        (length,) = struct.unpack("<Q", header)
        (length_crc,) = struct.unpack("<I", data[i + 8:i + 12])
        if masked(crc32c(header)) != length_crc:
            raise ValueError("%s: the length's CRC does not match at offset %d" % (path, i))
        start, end = i + 12, i + 12 + length
        if end + 4 > len(data):
            raise ValueError("%s: a truncated record at offset %d" % (path, i))
        body = data[start:end]
        (body_crc,) = struct.unpack("<I", data[end:end + 4])
        if masked(crc32c(body)) != body_crc:
            raise ValueError("%s: the record's CRC does not match at offset %d" % (path, i))
        yield body
        i = end + 4


def event_files(arg):
    if os.path.isdir(arg):
        for root, _, names in sorted(os.walk(arg)):
            for name in sorted(names):
                if "tfevents" in name:
                    yield os.path.join(root, name)
    else:
        yield arg


def main(argv):
    if len(argv) < 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    # The standard check value, so a broken CRC here cannot pass silently.
    assert crc32c(b"123456789") == 0xE3069283
    try:
        for arg in argv[1:]:
            for path in event_files(arg):
                for body in records(path):
                    for event in decode_event(body):
                        print(json.dumps(dict(file=path, **event)))
    except (ValueError, OSError) as e:
        print("read_events: %s" % e, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
