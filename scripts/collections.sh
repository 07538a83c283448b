#!/usr/bin/env bash
# Install the Ansible collections gpuclus' roles use (requirements.yml:
# ansible.posix, community.general, community.mysql) into the Python
# environment gpuclus runs in, without Ansible Galaxy: they are taken from the
# files of the `ansible` release below on PyPI (which bundles them), and copied
# into that environment's site-packages/ansible_collections/, where Ansible,
# ansible-lint and molecule of that environment find them (as they would the
# bundle's). The three are cached under .cache/collections/ansible-<version>/,
# so a second run downloads nothing.
#   bash scripts/collections.sh [PYTHON]    (default: .venv/bin/python)
# PYTHON is the interpreter of gpuclus' environment, e.g.
# ~/.local/share/uv/tools/gpuclus/bin/python for `uv tool install`.
# Where Galaxy is reachable, `ansible-galaxy collection install -r
# requirements.yml` does the same job.
set -euo pipefail
cd "$(dirname "$0")/.."
# The release CI runs; requirements.yml says which collection versions are fine.
ansible_release=12.3.0
collections=(ansible/posix community/general community/mysql)
python=${1:-.venv/bin/python}
say() { printf '==> %s\n' "$*" >&2; }
if ! "$python" -c 'import gpuclus' 2>/dev/null; then
  echo "error: $python has no gpuclus (hint: pass the Python of the environment gpuclus is installed in)" >&2
  exit 2
fi

cache=.cache/collections/ansible-$ansible_release
if [ ! -f "$cache/.complete" ]; then
  # Any pip can download: this environment's, the quickstart's tools, the system's.
  pip=()
  for candidate in "$python" .cache/tools/bin/python python3; do
    if "$candidate" -m pip --version >/dev/null 2>&1; then
      pip=("$candidate" -m pip)
      break
    fi
  done
  if [ ${#pip[@]} -eq 0 ]; then
    echo "error: no pip to download ansible==$ansible_release with (hint: python3 -m venv .cache/tools, then run this again)" >&2
    exit 2
  fi
  say "downloading ansible==$ansible_release from PyPI for its collections (${collections[*]})"
  download=$(mktemp -d)
  trap 'rm -rf "$download"' EXIT
  "${pip[@]}" download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
    --dest "$download" "ansible==$ansible_release"
  rm -rf "$cache"
  mkdir -p "$cache"
  # Only the three collections of the wheel's ~100: a zip reads them without the rest.
  "$python" - "$download"/ansible-"$ansible_release"-*.whl "$cache" "${collections[@]}" <<'EOF'
import sys
import zipfile

wheel, target, *wanted = sys.argv[1:]
prefixes = tuple(f"ansible_collections/{name}/" for name in wanted)
with zipfile.ZipFile(wheel) as archive:
    members = [name for name in archive.namelist() if name.startswith(prefixes)]
    archive.extractall(target, members)
missing = [name for name in wanted if not any(member.startswith(f"ansible_collections/{name}/") for member in members)]
if missing:
    sys.exit(f"error: {wheel} has no {', '.join(missing)}")
EOF
  touch "$cache/.complete"
fi

site=$("$python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
for name in "${collections[@]}"; do
  target="$site/ansible_collections/$name"
  # The same version already there: nothing to copy (the MANIFEST names it).
  if cmp -s "$cache/ansible_collections/$name/MANIFEST.json" "$target/MANIFEST.json"; then
    continue
  fi
  say "installing ${name/\//.} into $site/ansible_collections"
  mkdir -p "$(dirname "$target")"
  # Copied beside, then swapped in: a run never sees half a collection.
  rm -rf "$target.new" "$target.old"
  cp -R "$cache/ansible_collections/$name" "$target.new"
  [ -e "$target" ] && mv "$target" "$target.old"
  mv "$target.new" "$target"
  rm -rf "$target.old"
done
# What a deploy checks before it runs: each one found, in a version requirements.yml accepts.
"$python" -m gpuclus.galaxy_collections requirements.yml >&2
