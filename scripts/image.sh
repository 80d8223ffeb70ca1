#!/usr/bin/env bash
# make image: builds docker/Dockerfile as $KILN_IMAGE (default kiln:latest).
#
# With docker when a daemon answers, else with buildah (storage driver vfs, --isolation chroot,
# no daemon or root-level runtime needed). buildah never pulls: when debian:bookworm-slim (or
# debian:bookworm) is not in its local store, the base image is made offline from a debootstrap
# of Debian 12 (--variant=minbase) as `FROM scratch` + `ADD rootfs.tar /`, and tagged with both
# names (the build stage installs everything it needs with scripts/install-deps.sh anyway).
#
# Environment: KILN_IMAGE, KILN_IMAGE_ENGINE=docker|buildah (default: auto), JOBS (compile jobs
# inside the build, default nproc), KILN_DEBIAN_MIRROR (debootstrap mirror; default: the host's
# apt source for bookworm, else debootstrap's own default), KILN_IMAGE_FROM_GIT=1 (build the
# committed HEAD instead of the working tree).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
IMAGE=${KILN_IMAGE:-kiln:latest}
JOBS=${JOBS:-$(nproc)}
ENGINE=${KILN_IMAGE_ENGINE:-}

if [[ -z "$ENGINE" ]]; then
  if command -v docker >/dev/null 2>&1 && timeout 10 docker info >/dev/null 2>&1; then
    ENGINE=docker
  else
    ENGINE=buildah
  fi
fi
if [[ "$ENGINE" == buildah ]] && ! { command -v buildah && command -v debootstrap; } >/dev/null 2>&1; then
  echo "image.sh: no docker daemon answers; installing buildah and debootstrap (Debian packages)" >&2
  SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO=sudo
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends buildah debootstrap >/dev/null ||
    { $SUDO apt-get update -qq && $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends buildah debootstrap >/dev/null; }
fi
CONTEXT=$ROOT
if [[ "${KILN_IMAGE_FROM_GIT:-0}" == 1 ]]; then
  CONTEXT=$(mktemp -d /var/tmp/kiln-image-context.XXXXXX)
  trap 'rm -rf "$CONTEXT"' EXIT
  git -C "$ROOT" archive --format=tar HEAD | tar -x -C "$CONTEXT"
  echo "image.sh: context is HEAD $(git -C "$ROOT" rev-parse --short HEAD) (not the working tree)" >&2
fi
echo "image.sh: building $IMAGE with $ENGINE (JOBS=$JOBS)" >&2
START=$(date +%s)

if [[ "$ENGINE" == docker ]]; then
  # BuildKit honours docker/Dockerfile.dockerignore (the legacy builder would send build dirs).
  DOCKER_BUILDKIT=1 docker build -f "$CONTEXT/docker/Dockerfile" --build-arg "JOBS=$JOBS" -t "$IMAGE" "$CONTEXT"
  SIZE=$(docker image inspect --format '{{.Size}}' "$IMAGE" | numfmt --to=iec)
else
  export STORAGE_DRIVER=${STORAGE_DRIVER:-vfs}
  export BUILDAH_ISOLATION=${BUILDAH_ISOLATION:-chroot}

  have_image() { buildah inspect --type image "$1" >/dev/null 2>&1; }

  debian_mirror() {
    if [[ -n "${KILN_DEBIAN_MIRROR:-}" ]]; then echo "$KILN_DEBIAN_MIRROR"; return; fi
    # The host's own apt source for bookworm main (one-line or deb822 format), if any.
    local m
    m=$(grep -hsE '^deb +(\[[^]]*\] +)?[a-z]+://[^ ]+ +bookworm +.*main' /etc/apt/sources.list /etc/apt/sources.list.d/*.list |
        head -n1 | sed -E 's/^deb +(\[[^]]*\] +)?([^ ]+).*/\2/') || true
    if [[ -z "$m" ]]; then
      m=$(awk '/^URIs:/{u=$2} /^Suites:/ && / bookworm( |$)/{print u; exit}' /etc/apt/sources.list.d/*.sources 2>/dev/null) || true
    fi
    echo "$m"
  }

  make_base() {  # debootstrap Debian 12 into a tarball and import it as $1 (and $2)
    command -v debootstrap >/dev/null || { echo "image.sh: base image missing and debootstrap not installed" >&2; exit 1; }
    local tmp mirror t0
    t0=$(date +%s)
    tmp=$(mktemp -d /var/tmp/kiln-base.XXXXXX)
    mirror=$(debian_mirror)
    echo "image.sh: making $1 offline with debootstrap (minbase${mirror:+, mirror $mirror})" >&2
    # shellcheck disable=SC2086
    debootstrap --variant=minbase bookworm "$tmp/rootfs" $mirror >"$tmp/debootstrap.log" 2>&1 || {
      tail -20 "$tmp/debootstrap.log" >&2; rm -rf "$tmp"; exit 1; }
    # Same apt sources as the host (updates and security included), when it uses deb822 files.
    if [[ -z "${KILN_DEBIAN_MIRROR:-}" && -f /etc/apt/sources.list.d/debian.sources ]]; then
      cp /etc/apt/sources.list.d/debian.sources "$tmp/rootfs/etc/apt/sources.list.d/debian.sources"
      rm -f "$tmp/rootfs/etc/apt/sources.list"
    fi
    # Like the official -slim images: no documentation, man pages or translations, now or later.
    cat >"$tmp/rootfs/etc/dpkg/dpkg.cfg.d/docker-slim" <<'CFG'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-exclude /usr/share/lintian/*
path-exclude /usr/share/linda/*
CFG
    find "$tmp/rootfs/usr/share/doc" -mindepth 1 -not -name copyright -not -type d -delete
    rm -rf "$tmp/rootfs/usr/share/man/"* "$tmp/rootfs/usr/share/info/"* "$tmp/rootfs/usr/share/locale/"*
    rm -rf "$tmp/rootfs/var/cache/apt/archives/"*.deb "$tmp/rootfs/var/lib/apt/lists/"* \
           "$tmp/rootfs/var/log/"* "$tmp/rootfs/tmp/"*
    tar --numeric-owner -C "$tmp/rootfs" -cf "$tmp/rootfs.tar" .
    rm -rf "$tmp/rootfs"
    printf 'FROM scratch\nADD rootfs.tar /\nCMD ["bash"]\n' >"$tmp/Dockerfile"
    buildah build --isolation chroot --pull=never --format docker -f "$tmp/Dockerfile" -t "$1" "$tmp" >&2
    [[ -n "${2:-}" ]] && buildah tag "$1" "$2"
    rm -rf "$tmp"
    echo "image.sh: base image $1 made in $(( $(date +%s) - t0 )) s" >&2
  }

  SLIM=docker.io/library/debian:bookworm-slim
  FULL=docker.io/library/debian:bookworm
  if ! have_image "$SLIM"; then
    if have_image "$FULL"; then buildah tag "$FULL" "$SLIM"; else make_base "$SLIM" "$FULL"; fi
  elif ! have_image "$FULL"; then
    buildah tag "$SLIM" "$FULL"
  fi
  buildah build --isolation chroot --pull=never --format docker --layers \
    --ignorefile "$CONTEXT/docker/Dockerfile.dockerignore" -f "$CONTEXT/docker/Dockerfile" \
    --build-arg "JOBS=$JOBS" --build-arg "BUILD_IMAGE=$FULL" --build-arg "RUNTIME_IMAGE=$SLIM" \
    -t "$IMAGE" "$CONTEXT"
  SIZE=$(buildah images --format '{{.Size}}' --noheading "$IMAGE" | head -n1)
fi
echo "image.sh: built $IMAGE with $ENGINE in $(( $(date +%s) - START )) s; size $SIZE" >&2
