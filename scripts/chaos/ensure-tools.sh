#!/bin/sh
# Installs what the chaos suite needs to build its network (ip, iptables,
# tc) when it is missing. Needs root, like the suite itself.
set -eu
missing=""
for t in ip iptables tc; do
	command -v "$t" >/dev/null 2>&1 || missing="$missing $t"
done
[ -z "$missing" ] && exit 0
echo "ensure-tools: missing$missing; installing iproute2 and iptables" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq iproute2 iptables >/dev/null
