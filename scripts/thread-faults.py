#!/usr/bin/env python3
"""Samples a running `scree bench` every 50 ms: for each `bench-client` thread, its minor and
major page faults and user and system CPU ticks (/proc/PID/task/TID/stat), with the machine's
pgmajfault, workingset_refault_file, pgsteal_kswapd, pgsteal_direct and pgscan_kswapd
(/proc/vmstat). One line per thread per sample:

    time tid minflt majflt utime stime pgmajfault refault_file steal_kswapd steal_direct scan_kswapd

Each workload runs on a new client thread, so a tid is one phase. Used to tell page faults
from CPU work in a read phase's slow windows (docs/benchmarks.md, issue 31, `semiread`):

    scree bench ... & python3 scripts/thread-faults.py $! > faults.txt
"""
import os
import sys
import time

WANT = (b"pgmajfault ", b"workingset_refault_file ", b"pgsteal_kswapd ",
        b"pgsteal_direct ", b"pgscan_kswapd ")


def main(pid: str) -> None:
    out = sys.stdout
    while os.path.exists(f"/proc/{pid}"):
        t = time.time()
        with open("/proc/vmstat", "rb") as f:
            vm = [line.split()[1].decode() for line in f if line.startswith(WANT)]
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:
            break
        for tid in tasks:
            try:
                with open(f"/proc/{pid}/task/{tid}/stat", "rb") as f:
                    s = f.read()
            except OSError:
                continue
            if s[s.index(b"(") + 1 : s.rindex(b")")] != b"bench-client":
                continue
            x = s[s.rindex(b")") + 2 :].split()
            fields = [x[7], x[9], x[11], x[12]]
            out.write(f"{t:.3f} {tid} {' '.join(v.decode() for v in fields)} {' '.join(vm)}\n")
        out.flush()
        time.sleep(0.05)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: thread-faults.py PID")
    main(sys.argv[1])
