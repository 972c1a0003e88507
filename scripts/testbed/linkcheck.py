#!/usr/bin/env python3
"""What the link between two test-bed hosts gives: TCP round trip (1-byte ping-pong, median of
N) and bulk throughput (one TCP stream). Runs on a test bed that is up:
    scripts/testbed/testbed --rate 1gbit up
    scripts/testbed/linkcheck.py [--prefix tb] [--from nodea] [--to nodeb] [--mbytes 200] [--pings 2000]
    scripts/testbed/testbed down
(the server runs in --to's namespace, the client in --from's). Prints one JSON line."""
import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time

PORT = 5999


def server():
    s = socket.create_server(("0.0.0.0", PORT))
    print("ready", flush=True)
    for _ in range(2):  # the ping-pong connection, then the bulk one
        c, _ = s.accept()
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        while True:
            b = c.recv(1 << 20)
            if not b:
                break
            if len(b) == 1 and b == b"p":
                c.sendall(b"p")
        c.close()


def client(addr, pings, mbytes):
    c = socket.create_connection((addr, PORT))
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    rtt = []
    for _ in range(pings):
        t = time.perf_counter()
        c.sendall(b"p")
        c.recv(1)
        rtt.append(time.perf_counter() - t)
    c.close()
    c = socket.create_connection((addr, PORT))
    buf = b"x" * (1 << 20)
    t = time.perf_counter()
    for _ in range(mbytes):
        c.sendall(buf)
    c.shutdown(socket.SHUT_WR)
    c.recv(1)  # the server closes after reading everything
    secs = time.perf_counter() - t
    c.close()
    return {"rtt_us_median": round(statistics.median(rtt) * 1e6, 1),
            "rtt_us_p90": round(sorted(rtt)[int(0.9 * len(rtt))] * 1e6, 1),
            "throughput_mbit_s": round(mbytes * 8 * (1 << 20) / secs / 1e6, 1)}


def main():
    a = argparse.ArgumentParser()
    a.add_argument("--prefix", default=os.environ.get("TESTBED_PREFIX", "tb"))
    a.add_argument("--from", dest="src", default="nodea")
    a.add_argument("--to", dest="dst", default="nodeb")
    a.add_argument("--pings", type=int, default=2000)
    a.add_argument("--mbytes", type=int, default=200)
    a.add_argument("--role", choices=["server", "client"])
    a.add_argument("--addr")
    o = a.parse_args()
    if o.role == "server":
        return server()
    if o.role == "client":
        return print(json.dumps(client(o.addr, o.pings, o.mbytes)))
    me = os.path.abspath(__file__)
    addr = "10.77.0.%d" % (ord(o.dst[-1]) - 96)
    ns = "--net=/run/netns/%s-%s"  # nsenter, not `ip netns exec` (which fails in a chroot)
    srv = subprocess.Popen(["nsenter", ns % (o.prefix, o.dst), sys.executable, me, "--role", "server"],
                           stdout=subprocess.PIPE, text=True)
    try:
        assert srv.stdout.readline().strip() == "ready"
        out = subprocess.run(["nsenter", ns % (o.prefix, o.src), sys.executable, me, "--role", "client",
                              "--addr", addr, "--pings", str(o.pings), "--mbytes", str(o.mbytes)],
                             capture_output=True, text=True, check=True).stdout
        print(out.strip())
    finally:
        srv.kill()
        srv.wait()


if __name__ == "__main__":
    main()
