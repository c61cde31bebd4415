#!/usr/bin/env python3
"""Fails when code outside transport/ talks to ZeroMQ or libsodium itself.

transport/ makes every ZeroMQ and libsodium call. Three cppzmq types cross
its boundary as handles, made by transport/ and passed back to it:
zmq::context_t (a ps's or a client's context), zmq::socket_t (the sockets
a task owns) and zmq::message_t (a frame: a received payload inside
Message, the ps's parameters from PinnedFloats::Frame). Everything else of
ZeroMQ (zmq_* functions, ZMQ_* constants, zmq::sockopt, flags, socket
types, zmq::error_t, zmq.hpp itself) and of libsodium stays inside.

Reads every tracked .cc and .h outside transport/, tests/, benchmarks/ and
fuzz/ (which test and measure transport/ from outside), comments left out.

    tests/transport/check_boundary.py [REPO_ROOT]

Exits 1 listing each use (file:line), 77 outside a git checkout.
"""

import re
import subprocess
import sys

ALLOWED_TYPES = {"context_t", "socket_t", "message_t"}
EXEMPT = ("transport/", "tests/", "benchmarks/", "fuzz/")
RULES = [
    (re.compile(r"\bzmq::(\w+)"), lambda m: m.group(1) not in ALLOWED_TYPES),
    (re.compile(r"\bzmq_\w+\s*\("), None),
    (re.compile(r"\bZMQ_[A-Z_]+"), None),
    (re.compile(r'#\s*include\s*[<"](zmq\.h|zmq\.hpp|zmq_addon\.hpp|sodium\.h|sodium/)'), None),
    (re.compile(r"\b(sodium_\w+|crypto_\w+|randombytes\w*)\s*\("), None),
]


def strip_comments(text):
    """The code of a C++ file with its comments blanked (lines kept)."""
    text = re.sub(r"/\*.*?\*/", lambda m: re.sub(r"[^\n]", " ", m.group(0)), text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def violations(root):
    files = subprocess.run(["git", "-C", root, "ls-files", "*.cc", "*.h"], check=True,
                           capture_output=True, text=True).stdout.split()
    for path in files:
        if path.startswith(EXEMPT):
            continue
        with open(f"{root}/{path}", encoding="utf-8", errors="replace") as f:
            code = strip_comments(f.read())
        for number, line in enumerate(code.split("\n"), 1):
            for pattern, bad in RULES:
                for m in pattern.finditer(line):
                    if bad is None or bad(m):
                        yield f"{path}:{number}: {m.group(0).strip()}  ({line.strip()[:72]})"


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "."
    try:
        found = list(violations(root))
    except (subprocess.CalledProcessError, FileNotFoundError):
        print("not a git checkout: nothing to check")
        return 77
    for v in found:
        print(v)
    if found:
        print(f"{len(found)} use(s) of ZeroMQ or libsodium outside transport/ "
              "(only zmq::context_t, zmq::socket_t and zmq::message_t may cross)")
        return 1
    print("ZeroMQ and libsodium are used only in transport/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
