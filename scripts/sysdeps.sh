#!/usr/bin/env bash
# Install the Debian packages the test suite talks to, when we can.
#   zookeeper  - a real ZooKeeper for the zookeeper strategy and the ghost-node lab
#   chromium   - Debian's browser, driven by Playwright in the storefront test
#   iproute2   - network namespaces for the partition lab
#   nginx      - deploy/nginx.conf run for real in front of a stub shop (never as a service)
set -u
need=()
[ -x /usr/share/zookeeper/bin/zkServer.sh ] || [ -f /usr/share/java/zookeeper.jar ] || need+=(zookeeper)
command -v chromium >/dev/null 2>&1 || need+=(chromium)
command -v ip >/dev/null 2>&1 || need+=(iproute2)
[ -x /usr/sbin/nginx ] || command -v nginx >/dev/null 2>&1 || need+=(nginx)
[ ${#need[@]} -eq 0 ] && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "sysdeps: installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  # no service starts on install (nginx would take port 80): policy-rc.d says so, and
  # is removed again if we put it there
  guard=""
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d
    guard=/usr/sbin/policy-rc.d
  fi
  apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends "${need[@]}" >/dev/null
  status=$?
  [ -n "$guard" ] && rm -f "$guard"
  if [ $status -ne 0 ] && [ "${CI:-}" = "true" ]; then
    echo "sysdeps: apt-get install ${need[*]} failed (CI=true: this is fatal)" >&2
    exit $status
  fi
  exit 0
fi
if [ "${CI:-}" = "true" ]; then
  echo "sysdeps: missing ${need[*]} and cannot install them (not root or no apt-get)" >&2
  exit 1
fi
echo "sysdeps: WARNING missing ${need[*]}; the tests that need them will be skipped" >&2
