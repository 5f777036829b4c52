"""Sums CubeCL's per-kernel profile (CUBECL_DEBUG_OPTION=profile, lines `| 12.3µs | name`) by
kernel name and prints the largest, with their launches and share of the profiled time.
    python3 kernel_profile.py /tmp/cubecl.log [TOP]"""
import re, sys
from collections import defaultdict

units = {"ns": 1e-9, "µs": 1e-6, "us": 1e-6, "ms": 1e-3, "s": 1.0}
line = re.compile(r"^\| ([0-9.]+)(ns|µs|us|ms|s)\s+\| (.+)$")
total, count = defaultdict(float), defaultdict(int)
for text in open(sys.argv[1], errors="replace"):
    m = line.match(text.rstrip("\n"))
    if m:
        name = m.group(3).strip()
        total[name] += float(m.group(1)) * units[m.group(2)]
        count[name] += 1
whole = sum(total.values())
print(f"profiled kernel time {whole:.3f} s in {sum(count.values())} launches")
for name, t in sorted(total.items(), key=lambda kv: -kv[1])[: int(sys.argv[2]) if len(sys.argv) > 2 else 25]:
    print(f"{t:9.4f} s {100 * t / max(whole, 1e-12):5.1f} % {count[name]:8d}  {name[:160]}")
