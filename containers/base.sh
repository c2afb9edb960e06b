#!/usr/bin/env bash
# Build the base image of the project's containers from Debian packages, for machines that reach
# Debian's mirrors and PyPI but no container registry (CI, clusters' build hosts).
#
#   containers/base.sh [IMAGE]        (as root; default IMAGE localhost/interstice-base:bookworm)
#
# mmdebstrap makes a Debian bookworm root file system (variant apt: the essential packages and
# apt, so that images built on it can apt-get install more) from this machine's own apt sources
# (/etc/apt/sources.list.d/*.sources, else /etc/apt/sources.list), with python3 3.11 and
# python3-venv (its ensurepip brings pip into a venv: Debian's system Python is externally
# managed), ca-certificates, passwd (useradd), and munge (munge and unmunge, which the service
# runs in multi-user mode against the host's munged, its socket mounted in). The machine's
# local CAs (/usr/local/share/ca-certificates, e.g. a TLS-inspecting proxy's) are trusted in
# it too, so that pip in an image build reaches PyPI as the host does. The tarball is imported with
# `podman import`. Nothing happens where the image exists already (remove it to rebuild:
# podman rmi IMAGE). The Dockerfile takes it as --build-arg BASE=IMAGE.
set -euo pipefail

image="${1:-localhost/interstice-base:bookworm}"
export CONTAINERS_CONF="${CONTAINERS_CONF:-$(cd "$(dirname "$0")" && pwd)/containers.conf}"

if podman image exists "$image"; then
    echo "base.sh: $image exists; not rebuilt"
    exit 0
fi
for tool in podman mmdebstrap; do
    command -v "$tool" >/dev/null || { echo "base.sh: $tool absent (apt-get install $tool)" >&2; exit 1; }
done

sources=()
for file in /etc/apt/sources.list.d/*.sources /etc/apt/sources.list; do
    # only the Debian archive's sources: third-party ones (cloud SDKs, nodesource) stay out.
    if [ -s "$file" ] && grep -q 'debian' "$file" && grep -q 'bookworm' "$file"; then
        sources+=("$file")
    fi
done
[ ${#sources[@]} -gt 0 ] || sources=(http://deb.debian.org/debian)

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
hooks=()
if compgen -G '/usr/local/share/ca-certificates/*.crt' >/dev/null; then
    hooks+=(--customize-hook='copy-in /usr/local/share/ca-certificates/. /usr/local/share/ca-certificates/'
            --customize-hook='chroot "$1" update-ca-certificates --fresh >/dev/null')
fi

echo "base.sh: mmdebstrap bookworm from ${sources[*]}"
mmdebstrap --variant=apt --include=python3,python3-venv,ca-certificates,passwd,munge \
    --aptopt='Acquire::Retries "3"' --dpkgopt='path-exclude=/usr/share/doc/*' \
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/locale/*' \
    "${hooks[@]}" bookworm "$work/root.tar" "${sources[@]}"
podman import --quiet --change 'CMD ["/bin/bash"]' "$work/root.tar" "$image" >/dev/null
echo "base.sh: $image built ($(du -h "$work/root.tar" | cut -f1) tarball)"
