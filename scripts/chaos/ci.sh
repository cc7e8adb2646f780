#!/bin/sh
# The fault suite's short pass, for scripts/test: every scenario, about three
# minutes on two cores. Needs root; installs iproute2/iptables when missing.
# Usage: scripts/chaos/ci.sh [REPORT.json]
set -eu
cd "$(dirname "$0")/../.."
sh scripts/chaos/ensure-tools.sh
exec scripts/chaos/run --scenario all --short --report "${1:-chaos-report.json}"
