#!/usr/bin/env bash
# Puts Debian's prometheus, promtool and amtool binaries under
# .cache/prometheus-tools/bin for the tests that run them on this machine:
# `promtool check rules`, `promtool test rules` (alert rules), a throwaway
# Prometheus loaded with synthetic GPU series (dashboard queries), and
# `amtool check-config` (Alertmanager's configuration). The packages
# (prometheus, prometheus-alertmanager) are downloaded and unpacked, never
# installed: no service starts on this host.
# Prints the bin directory. Needs apt-get (any Debian/Ubuntu host with the
# package in its sources); exits 1 saying why otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."
dest=.cache/prometheus-tools
if [ -x "$dest/bin/promtool" ] && [ -x "$dest/bin/prometheus" ] && [ -x "$dest/bin/amtool" ]; then
  echo "$PWD/$dest/bin"
  exit 0
fi
if ! command -v apt-get >/dev/null; then
  echo "prometheus_tools.sh: apt-get not found; put prometheus and promtool in $dest/bin by hand" >&2
  exit 1
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
chmod 0755 "$work"  # apt's _apt user downloads into it
packages="prometheus prometheus-alertmanager"
# shellcheck disable=SC2086 # two package names
if ! (cd "$work" && apt-get download $packages >/dev/null 2>"$work/err"); then
  # Lists never fetched on a fresh host.
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  # shellcheck disable=SC2086
  (cd "$work" && apt-get download $packages >/dev/null) || {
    cat "$work/err" >&2
    echo "prometheus_tools.sh: could not download Debian's $packages packages" >&2
    exit 1
  }
fi
for deb in "$work"/*.deb; do
  dpkg-deb -x "$deb" "$work/root"
done
mkdir -p "$dest/bin"
install -m 0755 "$work/root/usr/bin/prometheus" "$work/root/usr/bin/promtool" "$work/root/usr/bin/amtool" "$dest/bin/"
echo "$PWD/$dest/bin"
