#!/usr/bin/env bash
# Installs the Debian packages the dev cluster's real node needs and Go modules cannot provide, when any is missing:
#   iptables        the kubelet's canary chains, kube-proxy's iptables mode, and the CNI bridge (masquerade) and
#                   portmap plugins' default backend
#   nftables        `nft`, which kube-proxy's nftables mode and the CNI plugins' nftables backend drive
#   conntrack       the tool that lists and flushes the node's connection tracking entries (kube-proxy and the CNI
#                   plugins clear stale entries through netlink themselves)
#   debootstrap     builds the Debian rootfs of the locally built Ray image
#   libseccomp-dev  what bin/runc is built against (runc's seccomp tag), so RuntimeDefault seccomp profiles work
#   pkg-config      how cgo finds libseccomp when building runc
#   chromium        the browser internal/apiserver's console test drives (chromedp)
# Quiet when every package is present; one line when it installs; an error naming the packages when it must install
# and is not root. The list is at the top so hack/tools_test.go and the docs can read it.
set -euo pipefail
packages="iptables nftables conntrack debootstrap libseccomp-dev pkg-config chromium"

missing=()
for p in $packages; do
	status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
	[ "$status" = "install ok installed" ] || missing+=("$p")
done
[ ${#missing[@]} = 0 ] && exit 0

if [ "$(id -u)" != 0 ]; then
	echo "make tools: the real node needs the Debian packages ${missing[*]}, and installing them needs root: run make tools as root, or apt-get install ${missing[*]} as root first" >&2
	exit 1
fi
echo "make tools: installing the Debian packages ${missing[*]} (apt-get)" >&2
log=$(mktemp)
trap 'rm -f "$log"' EXIT
install() {
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends -o DPkg::Lock::Timeout=300 "${missing[@]}" >>"$log" 2>&1
}
# Waits for another apt-get holding the lock. The package lists may be missing or stale (a fresh image): refresh
# them once, only when an install fails.
if ! install && ! { apt-get update -q -o DPkg::Lock::Timeout=300 >>"$log" 2>&1 && install; }; then
	cat "$log" >&2
	echo "make tools: apt-get could not install ${missing[*]} (its output is above)" >&2
	exit 1
fi
