#!/usr/bin/env python3
"""The server CPU of the fair line's scripts, per hand-off, against rslock's two commands.

    pip install redis
    redis-server --port 45999 --save "" --appendonly yes --appendfsync always --dir /dev/shm --daemonize yes
    scripts/script_cost.py --port 45999 [--base REV] [--hand-offs 50000] [--rounds 3]

One hand-off is what a node does per contended acquisition under the direct grant: a
refresh (`LockQueued`) that finds the key held and queues its waiter, then the holder's
release (`Unlock`), which grants the key to the first of seven waiters in line. They are
sent pipelined, a hundred hand-offs per round trip, so that the requests' syscalls are
shared and what shows is the scripts' own work. The server's CPU time comes from
/proc/<pid>/stat (the server must run on this machine) and is printed per hand-off, for
the scripts of the working tree, those of `--base` (a git revision, if given), and
rslock's `SET NX` plus compare-and-delete as the reference.

The scenarios bench measures the same servers under real load (`servers' CPU/op`); this
one takes the network out, for telling one script text from another (docs/benchmarks.md,
issue 30). Ours: the line is a real line, checked after each round.
"""
import argparse
import collections
import os
import subprocess
import sys

import redis

LUA = "src/protocol/lua"
# As src/protocol/scripts.rs joins them: each file after a newline.
LOCK_QUEUED = ["queue.lua", "holders.lua", "lock_queued.lua"]
UNLOCK = ["queue.lua", "holders.lua", "pass_on.lua", "unlock.lua"]
KEY, QUEUE = "k", "quorumlock:waiters:k"
DEADLINES, WATCHED = "quorumlock:waiter-deadlines:k", "quorumlock:watched:k"
TTL_MS, LIFETIME_MS = 30000, 2000


def source(files, rev):
    """A script's text from the working tree (`rev` None) or from git revision `rev`."""
    def read(name):
        path = os.path.join(LUA, name)
        if rev is None:
            with open(path, encoding="utf-8") as f:
                return f.read()
        return subprocess.run(["git", "show", f"{rev}:{path}"], check=True,
                              capture_output=True, text=True).stdout
    return "".join("\n" + read(name) for name in files)


class Server:
    def __init__(self, port):
        self.r = redis.Redis(port=port)
        self.pid = int(self.r.info("server")["process_id"])

    def cpu(self):
        with open(f"/proc/{self.pid}/stat", encoding="ascii") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def hand_offs(server, rev, count):
    """Server CPU seconds for `count` hand-offs with the scripts of `rev`."""
    r = server.r
    lock_queued = r.script_load(source(LOCK_QUEUED, rev))
    unlock = r.script_load(source(UNLOCK, rev))
    r.flushall()
    line = collections.deque()
    joined = 0

    def join(pipe):
        nonlocal joined
        joined += 1
        token = f"token-{joined}"
        # ARGV: token, TTL, waiter ("<client>:<id>"), ticket, place lifetime, stamp.
        pipe.evalsha(lock_queued, 3, KEY, QUEUE, DEADLINES, token, TTL_MS,
                     f"client-{joined % 8}:w{joined}", joined, LIFETIME_MS, joined * 1000)
        line.append(token)

    holder = "token-0"
    r.set(KEY, holder, px=TTL_MS)
    pipe = r.pipeline(transaction=False)
    for _ in range(7):
        join(pipe)
    pipe.execute()
    started, done = server.cpu(), 0
    while done < count:
        pipe = r.pipeline(transaction=False)
        for _ in range(100):
            join(pipe)
            pipe.evalsha(unlock, 4, KEY, QUEUE, DEADLINES, WATCHED, holder, "quorumlock:released:")
            holder = line.popleft()
            done += 1
        replies = pipe.execute()
        if replies[0::2] != [0] * 100 or replies[1::2] != [1] * 100:
            sys.exit(f"the line did not behave: {replies[:4]}")
    spent = server.cpu() - started
    if r.get(KEY).decode() != holder:
        sys.exit("the key was not granted to the head of the line")
    return spent


def rslock(server, count):
    """Server CPU seconds for `count` of rslock's SET NX + compare-and-delete."""
    r = server.r
    unlock = r.script_load('if redis.call("GET", KEYS[1]) == ARGV[1] then '
                           'return redis.call("DEL", KEYS[1]) end return 0')
    r.flushall()
    started, done = server.cpu(), 0
    while done < count:
        pipe = r.pipeline(transaction=False)
        for _ in range(100):
            done += 1
            pipe.set(KEY, f"token-{done}", nx=True, px=TTL_MS)
            pipe.evalsha(unlock, 1, KEY, f"token-{done}")
        pipe.execute()
    return server.cpu() - started


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--base", help="a git revision whose scripts to compare")
    parser.add_argument("--hand-offs", type=int, default=50000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    server = Server(args.port)
    per = lambda seconds: f"{seconds * 1e6 / args.hand_offs:.1f} µs"
    for round_ in range(args.rounds):
        row = [f"round {round_ + 1}: working tree {per(hand_offs(server, None, args.hand_offs))}"]
        if args.base:
            row.append(f"{args.base} {per(hand_offs(server, args.base, args.hand_offs))}")
        row.append(f"rslock {per(rslock(server, args.hand_offs))}")
        print("; ".join(row), flush=True)


if __name__ == "__main__":
    main()
