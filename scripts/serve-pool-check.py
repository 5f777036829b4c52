#!/usr/bin/env python3
"""`wanda serve` under a client that pools connections, as aiohttp (and lm-eval's API models)
do: REQUESTS requests over a pool of POOL connections, every fifth with a body of BIG_MB
megabytes (over `--max-body`), the rest well-formed completions. Prints how many well-formed
requests were answered and how the oversized ones ended, and the server's resident memory
before and after. Needs `pip install aiohttp`.

    scripts/serve-pool-check.py WANDA_BINARY MODEL [--requests 300] [--pool 32] [--big-mb 10]
"""

import argparse
import asyncio
import collections
import json
import re
import subprocess
import sys


def resident_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        kib = int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1))
    return kib / 1024


async def one(session, url, i, big, outcomes):
    if i % 5 == 0:
        body = b'{"prompt": "' + b"x" * big + b'"}'
        kind = "oversized"
    else:
        body = json.dumps({"prompt": [1, 2, 3], "max_tokens": 2, "temperature": 0}).encode()
        kind = "good"
    try:
        async with session.post(f"{url}/v1/completions", data=body,
                                headers={"Content-Type": "application/json"}) as r:
            await r.read()
            outcomes[kind][str(r.status)] += 1
    except Exception as e:  # noqa: BLE001 - every failure is counted by its kind
        outcomes[kind][type(e).__name__ + ": " + str(e)[:60]] += 1


async def run(url, requests, pool, big):
    import aiohttp

    outcomes = collections.defaultdict(collections.Counter)
    connector = aiohttp.TCPConnector(limit=pool)
    async with aiohttp.ClientSession(connector=connector) as session:
        await asyncio.gather(*(one(session, url, i, big, outcomes) for i in range(requests)))
    return outcomes


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("binary")
    parser.add_argument("model")
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--pool", type=int, default=32)
    parser.add_argument("--big-mb", type=float, default=10)
    args = parser.parse_args()
    server = subprocess.Popen(
        [args.binary, "serve", "--port", "0", "--device", "cpu", "--model", args.model,
         "--queue", str(args.requests)],
        stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    try:
        for line in server.stderr:
            if " at http://" in line:
                url = "http://" + line.split(" at http://")[1].split("/v1")[0]
                break
        else:
            sys.exit("serve exited early")
        before = resident_mb(server.pid)
        outcomes = asyncio.run(run(url, args.requests, args.pool, int(args.big_mb * 2**20)))
        after = resident_mb(server.pid)
        for kind, counts in sorted(outcomes.items()):
            print(f"{kind}: {sum(counts.values())} sent: {dict(counts)}")
        print(f"server resident memory: {before:.1f} MB before, {after:.1f} MB after")
    finally:
        server.terminate()
        server.wait()


if __name__ == "__main__":
    main()
