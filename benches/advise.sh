#!/usr/bin/env bash
# `tollgate advise --history` on a 30-day message log: 20 carriers sending 214s at 2 to 11
# interchanges an hour (busier by day), one of them with a 5,000-interchange burst on day 12,
# about 100,000 rows in all. The log is made here, the same on every run (fixed seed).
#
#   benches/advise.sh            # prints the machine line and /usr/bin/time's figures
#   BIN=/path/to/tollgate benches/advise.sh   # another build, for a side-by-side run
set -euo pipefail
source "$(dirname "$0")/lib.sh"
need python3 "apt-get install -y python3"
[ -n "${BIN:-}" ] || build_tollgate

python3 - "$WORK/history.csv" <<'PY'
import random, sys, datetime
random.seed(28)
start = datetime.datetime(2026, 10, 1, tzinfo=datetime.timezone.utc)
rows = []
for p in range(20):
    rate = 2 + p % 10
    for h in range(30 * 24):
        busy = 1.6 if 7 <= h % 24 <= 17 else 0.5
        for _ in range(int(random.expovariate(1 / (rate * busy)) + 0.5)):
            at = start + datetime.timedelta(hours=h, seconds=random.randrange(3600))
            rows.append((at, f"Carrier{p:02}", random.randint(1, 4)))
for i in range(5000):
    at = start + datetime.timedelta(days=12, seconds=i // 3)
    rows.append((at, "Carrier07", 1))
with open(sys.argv[1], "w") as f:
    f.write("time,partner,document,records\n")
    for at, partner, records in rows:
        f.write(f"{at.strftime('%Y-%m-%dT%H:%M:%SZ')},{partner},214,{records}\n")
print(f"# history: {len(rows):,} rows over 30 days", file=sys.stderr)
PY

machine_line
/usr/bin/time -f "advise: %e s wall, %U s user, %S s sys, %M KB peak" \
  "$BIN" advise --history "$WORK/history.csv" --out "$WORK/advice" >/dev/null
