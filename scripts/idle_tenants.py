#!/usr/bin/env python3
# What an idle `toki serve` costs at N tenants (issue 60), embedded:
#   scripts/idle_tenants.py --toki target/release/toki [--seconds 60] [--warmup 20] N [N ...]
# For each N: `toki bench --tenants N --deliveries 1` makes a data folder of N
# tenants (one user each; one of them gets one meeting, delivered), then
# `toki serve` runs on it with every background pass (dispatcher, repair,
# purge, scanner, daemon); after --warmup seconds its CPU (utime + stime) is
# read over --seconds, with its RSS, peak RSS and open descriptors at the end.
# Prints one table row per N, and how long making the tenants took.
import argparse, glob, os, shutil, subprocess, sys, tempfile, time

hz = os.sysconf("SC_CLK_TCK")


def cpu_s(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / hz


def status_mb(pid, key):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024
    return 0.0


def make_tenants(toki, n, root):
    d = os.path.join(root, f"bench{n}")
    t0 = time.monotonic()
    out = subprocess.run([toki, "bench", "--tenants", str(n), "--deliveries", "1", "--data-dir", d],
                         capture_output=True, text=True)
    took = time.monotonic() - t0
    if out.returncode != 0:
        sys.exit(f"toki bench --tenants {n} failed:\n{out.stderr[-3000:]}")
    (folder,) = [p for p in glob.glob(os.path.join(d, "*")) if os.path.isdir(p)]
    return folder, took


def measure(toki, folder, warmup, seconds):
    log = open(os.path.join(folder, "serve.log"), "w")
    p = subprocess.Popen([toki, "serve", "--data-dir", folder, "--listen", "127.0.0.1:0"],
                         stdout=subprocess.DEVNULL, stderr=log)
    try:
        time.sleep(warmup)
        c0, t0 = cpu_s(p.pid), time.monotonic()
        time.sleep(seconds)
        c1, t1 = cpu_s(p.pid), time.monotonic()
        fds = len(os.listdir(f"/proc/{p.pid}/fd"))
        return (c1 - c0) / (t1 - t0) * 100, status_mb(p.pid, "VmRSS"), status_mb(p.pid, "VmHWM"), fds
    finally:
        p.terminate()
        p.wait()


def arguments():
    """--toki, --seconds, --warmup and the tenant counts (scripts/idle_aws.py too)."""
    a = argparse.ArgumentParser()
    a.add_argument("--toki", required=True)
    a.add_argument("--seconds", type=float, default=60)
    a.add_argument("--warmup", type=float, default=20)
    a.add_argument("tenants", type=int, nargs="+")
    return a.parse_args()


def main():
    args = arguments()
    toki = os.path.realpath(args.toki)
    root = tempfile.mkdtemp(prefix="idle-tenants")
    rows = []
    try:
        for n in args.tenants:
            print(f"making {n} tenants ...", file=sys.stderr, flush=True)
            folder, took = make_tenants(toki, n, root)
            print(f"  {took:.0f} s; serving idle for {args.warmup:.0f} + {args.seconds:.0f} s ...",
                  file=sys.stderr, flush=True)
            rows.append((n, took) + measure(toki, folder, args.warmup, args.seconds))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"| tenants | made in s | CPU % of a core over {args.seconds:.0f} s | RSS MB | peak RSS MB | open fds |")
    print("|---:|---:|---:|---:|---:|---:|")
    for n, took, cpu, rss, peak, fds in rows:
        print(f"| {n:,} | {took:.0f} | {cpu:.2f} | {rss:.1f} | {peak:.1f} | {fds} |")


if __name__ == "__main__":
    main()
