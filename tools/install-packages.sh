#!/usr/bin/env bash
# Installs the Debian packages named on the command line that are not installed yet (as root,
# or through sudo); quiet when all are. Usage: tools/install-packages.sh WHO PACKAGE...
# (WHO prefixes the one line it prints when it installs something).
set -euo pipefail
who=$1
shift
missing=()
for package in "$@"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" ||
    missing+=("$package")
done
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "$who: installing ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null
fi
