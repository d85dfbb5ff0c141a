#!/usr/bin/env bash
# Drops X12 214 shipment status files into a landing directory, as a carrier's SFTP client would:
# written under a .part name, then renamed into place.
#
#   examples/acme-drop.sh CARRIER FILES EVENTS [DIR]
#
# CARRIER is the ISA06 sender id (CARRIERXYZ, FASTFREIGHT, ROADRUNNER in examples/acme.toml),
# FILES the number of interchanges, EVENTS the AT7 status events in each, DIR the landing
# directory (default ./acme/inbound). Control numbers come from the clock, so a second run is
# not taken for a resend.
set -euo pipefail
carrier="${1:?carrier id, e.g. CARRIERXYZ}"
files="${2:-10}"
events="${3:-10}"
dir="${4:-./acme/inbound}"
mkdir -p "$dir"
base=$(( $(date +%s) % 100000 * 1000 ))
d=$(date -u +%y%m%d); D=$(date -u +%Y%m%d); t=$(date -u +%H%M)
for i in $(seq 1 "$files"); do
  icn=$(printf '%09d' $(( base + i )))
  {
    printf 'ISA*00*          *00*          *ZZ*%-15s*ZZ*%-15s*%s*%s*U*00401*%s*0*P*>~\n' \
      "$carrier" "ACME" "$d" "$t" "$icn"
    printf 'GS*QM*%s*ACME*%s*%s*%d*X*004010~\n' "$carrier" "$D" "$t" "$i"
    printf 'ST*214*0001~\nB10*PRO%s*SHIP%s*SCAC~\n' "$icn" "$icn"
    for e in $(seq 1 "$events"); do printf 'AT7*X6*NS***%s*%s~\n' "$D" "$t"; done
    printf 'SE*%d*0001~\nGE*1*%d~\nIEA*1*%s~\n' $(( events + 3 )) "$i" "$icn"
  } > "$dir/.$carrier-$icn.edi.part"
  mv "$dir/.$carrier-$icn.edi.part" "$dir/$carrier-$icn.edi"
done
echo "dropped $files files x $events status events from $carrier into $dir"
