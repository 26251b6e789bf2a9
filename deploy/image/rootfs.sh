#!/usr/bin/env bash
# Makes the runtime root filesystem of the tahua image in DEST: the binary (stripped),
# the shared libraries it loads and the dynamic loader, copied from the Debian 12
# packages of deploy/image/runtime-packages.txt as installed on this machine, the CA
# bundle, and a non-root user (65532). No shell, no package manager, nothing writable but
# /tmp. The Dockerfile's runtime stage is this directory (COPY --from=build /rootfs /);
# where no container engine runs, the tests run the binary in it under chroot.
#
#   deploy/image/rootfs.sh BINARY DEST
set -euo pipefail
bin=$1
dest=$2
here=$(cd "$(dirname "$0")" && pwd)
declare -A allowed=()
while read -r p; do allowed[$p]=1; done < <(grep -v '^#' "$here/runtime-packages.txt" | grep -v '^$')

[ -x "$bin" ] || { echo "rootfs.sh: $bin is not an executable" >&2; exit 1; }
rm -rf "$dest"
mkdir -p "$dest/usr/local/bin" "$dest/etc/ssl/certs" "$dest/etc/tahua" "$dest/tmp"
chmod 1777 "$dest/tmp"

install -m 0755 "$bin" "$dest/usr/local/bin/tahua"
strip --strip-unneeded "$dest/usr/local/bin/tahua"

# A library's package, or nothing.
package_of() { { dpkg -S "$1" 2>/dev/null || true; } | head -1 | cut -d: -f1; }

# Every library the binary loads (and the loader), resolved, at the path the loader looks
# for it; each must come from a listed package.
while read -r path; do
  [ -n "$path" ] || continue
  real=$(readlink -f "$path")
  pkg=$(package_of "$real")
  [ -n "$pkg" ] || pkg=$(package_of "$path")
  [ -n "$pkg" ] || pkg=$(package_of "/usr$real")
  if [ -z "${allowed[$pkg]:-}" ]; then
    echo "rootfs.sh: $path (package ${pkg:-unknown}) is not in deploy/image/runtime-packages.txt" >&2
    exit 1
  fi
  mkdir -p "$dest$(dirname "$path")"
  cp -L "$path" "$dest$path"
done < <(ldd "$bin" | awk '/=>/ { print $3 } !/=>/ && $1 ~ /^\// { print $1 }')

cp -L /etc/ssl/certs/ca-certificates.crt "$dest/etc/ssl/certs/ca-certificates.crt"
printf 'root:x:0:0::/:/nonexistent\ntahua:x:65532:65532::/nonexistent:/nonexistent\n' > "$dest/etc/passwd"
printf 'root:x:0:\ntahua:x:65532:\n' > "$dest/etc/group"
# Names in /etc/hosts first, then DNS (glibc's default is the same; said so for the reader).
printf 'hosts: files dns\n' > "$dest/etc/nsswitch.conf"
printf '127.0.0.1 localhost\n::1 localhost\n' > "$dest/etc/hosts"
echo "rootfs.sh: $(du -sk "$dest" | cut -f1) KiB in $dest"
