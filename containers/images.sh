#!/usr/bin/env bash
# Build the project's images without a container registry, from Debian packages and PyPI alone
# (CI, and tests/system/image.py, run this): the base (containers/base.sh, skipped where it
# exists), then the ones named:
#   service  localhost/interstice:latest, the Dockerfile on that base (no extras: no torch)
#   db       localhost/interstice-postgres:15, containers/postgres.Dockerfile (compose's db)
#
#   containers/images.sh [service] [db]      (as root; default: service)
#
# Builds use host networking (pip reaches PyPI as the host does) and the Docker image format
# (the OCI format drops HEALTHCHECK). Podman's settings for this machine come from
# containers/containers.conf (CONTAINERS_CONF). Unchanged sources reuse podman's cached layers.
# Each step prints its duration in seconds.
set -euo pipefail
cd "$(dirname "$0")/.."

export CONTAINERS_CONF="${CONTAINERS_CONF:-$PWD/containers/containers.conf}"
export BUILDAH_FORMAT=docker
base="${INTERSTICE_BASE:-localhost/interstice-base:bookworm}"

timed() {  # timed STEP COMMAND...: run COMMAND, then say how long STEP took
    local step="$1" start=$SECONDS
    shift
    "$@"
    echo "images.sh: $step took $((SECONDS - start)) s"
}

build() {  # build STEP TAG ARGS...: podman build, then remove the image TAG named before
    local step="$1" tag="$2" before
    shift 2
    before="$(podman image inspect --format '{{.Id}}' "$tag" 2>/dev/null || true)"
    timed "$step" podman build --network host --build-arg BASE="$base" -t "$tag" "$@"
    # a rebuild leaves the former image untagged (hundreds of MB each time): remove it,
    # unless a container still uses it
    if [ -n "$before" ] && [ "$before" != "$(podman image inspect --format '{{.Id}}' "$tag")" ]; then
        podman rmi "$before" >/dev/null 2>&1 || true
    fi
}

timed base containers/base.sh "$base"
for image in "${@:-service}"; do
    case "$image" in
        service) build service localhost/interstice:latest . ;;
        db) build db localhost/interstice-postgres:15 -f containers/postgres.Dockerfile . ;;
        *)
            echo "images.sh: unknown image $image (service or db)" >&2
            exit 2 ;;
    esac
done
