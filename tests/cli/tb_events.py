#!/usr/bin/env python3
"""An independent reader of TensorBoard event files, written against the formats' definitions
(TFRecord framing with masked CRC-32C; the Event, Summary and SessionLog protobufs), for the
tests: it shares no code with xl's writer.

  tb_events.py scalars DIR    JSON {tag: [[step, value], ...]} of DIR's event files, read in name
                              order as TensorBoard reads a run, a SessionLog START at step P
                              dropping what came before at steps >= P (TensorBoard's purge_step)
  tb_events.py self-test      CRC-32C against its published check value
Exits 1 with one line naming the file and record on a bad length, CRC or protobuf.
"""
import json
import os
import struct
import sys


def crc32c(data):
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
    return crc ^ 0xFFFFFFFF


def masked(data):
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def fields(buf):
    """(field number, wire type, value) of a protobuf message."""
    i = 0
    while i < len(buf):
        key, i = varint(buf, i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, i = varint(buf, i)
        elif wire == 1:
            value, i = buf[i:i + 8], i + 8
        elif wire == 2:
            n, i = varint(buf, i)
            value, i = buf[i:i + n], i + n
        elif wire == 5:
            value, i = buf[i:i + 4], i + 4
        else:
            raise ValueError("wire type %d" % wire)
        if i > len(buf):
            raise ValueError("a field runs past its message")
        yield number, wire, value


def varint(buf, i):
    shift = value = 0
    while True:
        b = buf[i]
        i += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return value, i


def records(path):
    with open(path, "rb") as f:
        data = f.read()
    i = n = 0
    while i < len(data):
        where = "%s: record %d" % (path, n)
        if len(data) - i < 12:
            raise ValueError(where + ": cut short")
        header = data[i:i + 8]
        (length,) = struct.unpack("<Q", header)
        if struct.unpack("<I", data[i + 8:i + 12])[0] != masked(header):
            raise ValueError(where + ": its length fails its CRC-32C")
        body = data[i + 12:i + 12 + length]
        if len(body) != length or len(data) < i + 16 + length:
            raise ValueError(where + ": cut short")
        if struct.unpack("<I", data[i + 12 + length:i + 16 + length])[0] != masked(body):
            raise ValueError(where + ": its event fails its CRC-32C")
        yield body
        i += 16 + length
        n += 1


def event(body):
    e = {"step": 0, "scalars": [], "start": False, "version": None}
    for number, wire, value in fields(body):
        if number == 1 and wire == 1:
            e["wall_time"] = struct.unpack("<d", value)[0]
        elif number == 2 and wire == 0:
            e["step"] = value - (1 << 64) if value >= 1 << 63 else value
        elif number == 3 and wire == 2:
            e["version"] = value.decode()
        elif number == 5 and wire == 2:
            for vn, vw, v in fields(value):
                if vn != 1 or vw != 2:
                    continue
                tag = simple = None
                for fn, fw, f in fields(v):
                    if fn == 1 and fw == 2:
                        tag = f.decode()
                    elif fn == 2 and fw == 5:
                        simple = struct.unpack("<f", f)[0]
                if tag is not None and simple is not None:
                    e["scalars"].append((tag, simple))
        elif number == 7 and wire == 2:
            e["start"] = any(fn == 1 and fv == 1 for fn, _, fv in fields(value))
    return e


def scalars(run_dir):
    names = sorted(n for n in os.listdir(run_dir) if n.startswith("events.out.tfevents."))
    kept = []  # (step, tag, value) in the order written
    for name in names:
        path = os.path.join(run_dir, name)
        first = True
        for body in records(path):
            e = event(body)
            if first and e["version"] != "brain.Event:2":
                raise ValueError(path + ": does not start with file_version brain.Event:2")
            first = False
            if e["start"]:
                kept = [s for s in kept if s[0] < e["step"]]
            kept.extend((e["step"], tag, value) for tag, value in e["scalars"])
    out = {}
    for step, tag, value in kept:
        out.setdefault(tag, []).append([step, value])
    return out


def main(argv):
    if argv[1:] == ["self-test"]:
        ok = crc32c(b"123456789") == 0xE3069283
        print("crc32c check value:", "ok" if ok else "WRONG")
        return 0 if ok else 1
    try:
        print(json.dumps(scalars(argv[2]), sort_keys=True))
    except ValueError as e:
        print("tb_events.py: %s" % e, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
