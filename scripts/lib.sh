# Shared by scripts/bootstrap.sh, scripts/install.sh and scripts/test.sh (sourced, not run).

say() { printf '==> %s\n' "$*" >&2; }

apt_install() {
  if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null; then
    say "missing: $*; install them with your package manager (needs root), then run this again"
    exit 2
  fi
  say "installing OS packages: $*"
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 update -qq
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
