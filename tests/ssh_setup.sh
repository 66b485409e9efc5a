#!/usr/bin/env bash
# Prepares ssh to this machine for tests/single/test_launcher_ssh.py:
#   1. installs openssh-server (Debian package) when sshd is missing;
#   2. creates a passphrase-less key ~/.ssh/hora_test_ed25519 and authorizes it for this user;
#   3. starts sshd listening on 127.0.0.1:22 only, unless something already listens on port 22.
# Idempotent; needs root for steps 1 and 3. Nothing here contacts another machine.
set -euo pipefail

KEY=${HORA_TEST_SSH_KEY:-$HOME/.ssh/hora_test_ed25519}
SSHD=/usr/sbin/sshd

if [ ! -x "$SSHD" ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q --no-install-recommends openssh-server openssh-client
fi

mkdir -p "$HOME/.ssh"
chmod 700 "$HOME/.ssh"
if [ ! -f "$KEY" ]; then
  ssh-keygen -q -t ed25519 -N '' -C hora-test -f "$KEY"
fi
touch "$HOME/.ssh/authorized_keys"
chmod 600 "$HOME/.ssh/authorized_keys"
if ! grep -qF "$(cut -d' ' -f2 "$KEY.pub")" "$HOME/.ssh/authorized_keys"; then
  cat "$KEY.pub" >> "$HOME/.ssh/authorized_keys"
fi

port22_open() {
  (exec 3<>/dev/tcp/127.0.0.1/22) 2>/dev/null
}

if ! port22_open; then
  mkdir -p /run/sshd
  chmod 755 /run/sshd
  ssh-keygen -A >/dev/null
  "$SSHD" -o ListenAddress=127.0.0.1 -o Port=22 -o PasswordAuthentication=no \
    -o PubkeyAuthentication=yes -o PermitRootLogin=prohibit-password
  for _ in $(seq 50); do
    port22_open && break
    sleep 0.1
  done
fi

if ssh -o BatchMode=yes -o StrictHostKeyChecking=no -o ConnectTimeout=5 -i "$KEY" \
    127.0.0.1 true 2>/dev/null; then
  echo "ssh_setup: ssh to 127.0.0.1 with $KEY works"
else
  echo "ssh_setup: WARNING: ssh to 127.0.0.1 with $KEY does not work" >&2
  exit 1
fi
