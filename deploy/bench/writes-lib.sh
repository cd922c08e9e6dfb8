# Shared by deploy/bench/writes and deploy/bench/writes-ab (sourced, not run): the wrk load of
# the write path and the CPU counters both measure it with.

# writes_wrk PORT MODE SECONDS [TARGETS_FILE]: runs deploy/bench/writes.lua (MODE update, start
# or end) with 2 threads and $clients connections against the API on PORT for SECONDS, and
# prints its key=value figures one per line. Needs SENDER_KEY, START_TARGET and
# TEMPLATE_VERSION (deploy/bench/writes.py) and $clients.
writes_wrk() {
  BENCH_MODE=$2 BENCH_CREDENTIAL=$SENDER_KEY BENCH_TARGETS_FILE=${4:-} BENCH_THREADS=2 BENCH_START_TARGET=$START_TARGET \
    BENCH_TEMPLATE_VERSION=$TEMPLATE_VERSION wrk -t2 -c"$clients" -d"${3}s" --timeout 30s -s deploy/bench/writes.lua \
    "http://127.0.0.1:$1" | grep -E '^[a-z_0-9]+=' | tr ' ' '\n'
}

# cpu_ticks [PID]: CPU time, in clock ticks: the machine's busy time (/proc/stat), every
# `postgres` process's and PID's (all threads; /proc/<pid>/stat utime + stime; 0 without a
# PID). Printed as "machine pg pid". A process that exits between two snapshots (an autovacuum
# worker) takes its ticks with it; "other" (machine - pg - pid) holds wrk, the kernel's threads
# and those.
cpu_ticks() {
  python3 - "${1:-0}" <<'PY'
import os, sys
def proc(p):
    try:
        f = open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()
        return int(f[11]) + int(f[12])
    except (OSError, IndexError, ValueError):
        return 0  # exited between the listing and the read
cpu = open("/proc/stat").readline().split()[1:9]
machine = sum(int(x) for i, x in enumerate(cpu) if i != 3 and i != 4)  # all but idle and iowait
pg = 0
for d in os.listdir("/proc"):
    if d.isdigit():
        try:
            if open(f"/proc/{d}/comm").read().strip() == "postgres":
                pg += proc(d)
        except OSError:
            pass
print(machine, pg, proc(sys.argv[1]) if sys.argv[1] != "0" else 0)
PY
}
