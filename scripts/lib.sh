# Shared by scripts/bootstrap.sh, scripts/install.sh, scripts/test.sh and
# scripts/release-check.sh (sourced, not run).

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

# A test run's steps say when each started and how many CPU seconds the host
# has used since the run began (the time goes where the CPU goes: a 2-core
# machine is CPU-bound from the first minute).
cpu_seconds() { awk '/^cpu /{printf "%d", ($2 + $3 + $4 + $7 + $8) / 100}' /proc/stat; }
cpu_start=$(cpu_seconds)
step() { printf '\n==> %s (%s, host CPU %ss)\n' "$*" "$(date +%T)" "$(($(cpu_seconds) - cpu_start))"; }

# What failed in one lane's log, each line under the step it failed in (with
# the deploy's own ✗ lines, host, task and message, and gpuclus' error and
# hint lines inside a failed test's message): a CI
# record may keep only the end of a long log.
failure_summary() {
  local name=$1 log=$2
  printf '\n==> what failed in lane %s\n' "$name"
  awk '/^==> / { step = $0; next }
       /^(FAILED|ERROR) |^Found [0-9]+ errors?|^[0-9]+ files? would be reformatted|^Failed: [0-9]+ failure|: error: |failed=[1-9]|✗ |^E +(error|hint|gpuclus: internal error):/ {
         # A fixture failure is printed again for each of its tests: its lines once.
         if (/✗ |^E +(error|hint|gpuclus)/ && seen[$0]++) next
         if (step != "" && step != shown) { print step; shown = step }
         print "  " substr($0, 1, 300)
       }' "$log" | tail -n 60
}
