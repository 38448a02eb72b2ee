#!/usr/bin/env bash
# System packages fleetrl needs beside its Python ones (Debian). Idempotent: installs only
# what is missing. Needs root (CI and the dev machines run as root); otherwise it says what
# to install and carries on, so `make test` reports the affected tests instead of failing here.
set -euo pipefail
PACKAGES=(bubblewrap)
missing=()
for pkg in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
  echo "warning: missing system packages: ${missing[*]} (run: sudo apt-get install ${missing[*]})" >&2
  exit 0
fi
echo "installing system packages: ${missing[*]}"
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
