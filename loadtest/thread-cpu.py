#!/usr/bin/env python3
"""Samples the CPU time of every thread of the stack's workers, the load
generator and Postgres every 50 ms, for looking at how a herd's drain shares
the cores (which the 1 s per-process figures of a report average away).

    python3 loadtest/thread-cpu.py OUT_FILE &     # then run a herd; kill it after

Each line: unix time, pid, tid, thread name, the thread's CPU ticks so far
(user + system, in clock ticks), the process's name (a worker's with its id).
A thread's share of a core over a stretch is its ticks' difference divided by
the stretch in seconds times the clock tick rate (`getconf CLK_TCK`).
"""
import os
import sys
import time


def targets():
    found = {}
    for pid in os.listdir('/proc'):
        if not pid.isdigit():
            continue
        try:
            argv = open(f'/proc/{pid}/cmdline', 'rb').read().split(b'\0')
        except OSError:
            continue
        name = os.path.basename(argv[0].decode(errors='ignore')) if argv and argv[0] else ''
        if name == 'cronshard-worker':
            try:
                env = open(f'/proc/{pid}/environ', 'rb').read().split(b'\0')
            except OSError:
                env = []
            ids = [e[len(b'WORKER_ID='):].decode() for e in env if e.startswith(b'WORKER_ID=')]
            found[pid] = name + ('_' + ids[0] if ids else '')
        elif name == 'cronshard-loadtest' or name.startswith('postgres'):
            found[pid] = name
    return found


def main():
    out = open(sys.argv[1], 'w')
    scanned, procs = 0.0, {}
    while True:
        now = time.time()
        # New processes (a herd's stack starts after this) are found once a second.
        if now - scanned > 1:
            procs, scanned = targets(), now
        for pid, name in procs.items():
            try:
                for tid in os.listdir(f'/proc/{pid}/task'):
                    stat = open(f'/proc/{pid}/task/{tid}/stat').read()
                    comm = stat[stat.index('(') + 1:stat.rindex(')')]
                    fields = stat[stat.rindex(')') + 2:].split()
                    ticks = int(fields[11]) + int(fields[12])
                    out.write(f"{now:.3f} {pid} {tid} {comm.replace(' ', '_')} {ticks} {name}\n")
            except OSError:
                pass
        out.flush()
        time.sleep(0.05)


if __name__ == '__main__':
    main()
