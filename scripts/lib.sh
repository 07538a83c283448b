# Shared by scripts/bootstrap.sh, scripts/install.sh and scripts/test.sh (sourced, not run).

say() { printf '==> %s\n' "$*" >&2; }

apt_install() {
  if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null; then
    say "missing: $*; install them with your package manager (needs root), then run this again"
    exit 2
  fi
  say "installing OS packages: $*"
  # DPkg::Lock::Timeout waits for dpkg's lock only: `apt-get update` fails at
  # once while another apt (a second lane, unattended-upgrades) holds the
  # lists' lock, so it is tried again for up to ten minutes.
  local tries=0 output
  until output=$(DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 update -qq 2>&1); do
    tries=$((tries + 1))
    if [ "$tries" -ge 300 ] || ! grep -qE 'Could not get lock|Unable to lock' <<<"$output"; then
      printf '%s\n' "$output" >&2
      return 1
    fi
    sleep 2
  done
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "$@" >/dev/null
}

# python3 with venv (Debian splits venv/ensurepip out of python3), installed
# with apt when missing.
need_python_venv() {
  if ! command -v python3 >/dev/null; then
    apt_install python3 python3-venv
  fi
  if ! python3 -c 'import ensurepip, venv' 2>/dev/null; then
    apt_install python3-venv
  fi
}
