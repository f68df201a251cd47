"""A script that writes TensorBoard event files itself (a small TFRecord
writer: Debian has no tensorboard package): scalars loss/train and
loss/val at steps 1 to --steps, into a new event file under runs/ in its
working folder, as torch.utils.tensorboard.SummaryWriter writes them."""
import argparse
import math
import os
import socket
import struct
import time


def _table():
    out = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        out.append(c)
    return out


TABLE = _table()


def masked_crc(data):
    c = 0xFFFFFFFF
    for b in data:
        c = TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    c ^= 0xFFFFFFFF
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def field(num, wire, payload):
    return varint(num << 3 | wire) + payload


def event(step, version=None, scalars=()):
    msg = field(1, 1, struct.pack("<d", time.time()))
    if step:
        msg += field(2, 0, varint(step))
    if version:
        msg += field(3, 2, varint(len(version)) + version)
    if scalars:
        summary = b""
        for tag, value in scalars:
            v = field(1, 2, varint(len(tag)) + tag.encode()) + field(2, 5, struct.pack("<f", value))
            summary += field(1, 2, varint(len(v)) + v)
        msg += field(5, 2, varint(len(summary)) + summary)
    return msg


def record(data):
    n = struct.pack("<Q", len(data))
    return n + struct.pack("<I", masked_crc(n)) + data + struct.pack("<I", masked_crc(data))


p = argparse.ArgumentParser()
p.add_argument("--lr", type=float, default=0.01)
p.add_argument("--steps", type=int, default=8)
a = p.parse_args()
os.makedirs("runs", exist_ok=True)
name = "runs/events.out.tfevents.%d.%s.%d.0" % (time.time(), socket.gethostname(), os.getpid())
rate = 1.0 / (1.0 + abs(math.log10(a.lr) + 2))
with open(name, "ab", buffering=0) as f:
    f.write(record(event(0, version=b"brain.Event:2")))
    for step in range(1, a.steps + 1):
        loss = 2.0 * math.exp(-rate * step / 2)
        f.write(record(event(step, scalars=[("loss/train", loss), ("loss/val", loss + 0.1)])))
        time.sleep(0.15)
