"""The .gpuclus/ directory beside a spec: gpuclus' SSH identity, known hosts, and later secrets and runs.

Everything here is private to the admin (directories 0700, secrets 0600) and
created on first use. Private keys are generated in-process and never printed.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from gpuclus.fileio import make_directories, read_text_file, refuse_link_or_special, write_text_atomic

STATE_DIR_NAME = ".gpuclus"
# What gpuclus reads back from here is small: a public key line, and one known_hosts line per key of a node
# (a 10,000-node cluster's is about 3 MB). Reads stop past these, so a FIFO or a huge file never hangs them.
MAX_PUBLIC_KEY_BYTES = 64 * 1024
MAX_KNOWN_HOSTS_BYTES = 64 * 1024 * 1024
_REPLACED_HINT = "gpuclus keeps this file itself: move what is in its place away (it is written again)"


@dataclass(frozen=True)
class StateDir:
    root: Path

    @classmethod
    def beside(cls, spec_path: Path) -> StateDir:
        return cls(spec_path.resolve().parent / STATE_DIR_NAME)

    @property
    def ssh_dir(self) -> Path:
        return self.root / "ssh"

    @property
    def private_key(self) -> Path:
        return self.ssh_dir / "id_ed25519"

    @property
    def public_key(self) -> Path:
        return self.ssh_dir / "id_ed25519.pub"

    @property
    def known_hosts(self) -> Path:
        return self.ssh_dir / "known_hosts"

    @property
    def key_not_installed_marker(self) -> Path:
        """Present while the key is one a plain preflight made here and gpuclus never installed on a node."""
        return self.ssh_dir / "id_ed25519.not-installed"

    @property
    def sandbox_record(self) -> Path:
        """`gpuclus sandbox up`'s record (sandbox/record.py): this directory's nodes are a sandbox."""
        return self.root / "sandbox.json"

    def private_dir(self, path: Path) -> Path:
        """Create ``path`` (and the state root) as 0700 directories.

        A symlink anywhere from the state root down is refused (UsageError),
        not followed: in a spec directory others can write to, a planted
        .gpuclus link would otherwise receive gpuclus' keys and secrets.
        """
        # The spec's directory is the user's own (resolved by beside): from there down is gpuclus'.
        self.root.parent.mkdir(parents=True, exist_ok=True)
        make_directories(self.root.parent, path, 0o700)
        return path

    def ensure_ssh_key(self) -> str:
        """gpuclus' ed25519 key pair (created once); returns the public key line."""
        self.private_dir(self.ssh_dir)
        # Both are checked before either is written: a pair is never left half made.
        for path in (self.private_key, self.public_key):
            refuse_link_or_special(path)
        if self.private_key.exists() and self.public_key.exists():
            return read_text_file(self.public_key, MAX_PUBLIC_KEY_BYTES, hint=_REPLACED_HINT).strip()
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

        key = Ed25519PrivateKey.generate()
        private = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption()
        ).decode()
        public = key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
        public_line = f"{public.decode()} gpuclus@{self.root.parent.name or 'cluster'}"
        write_text_atomic(self.private_key, private, mode=0o600)
        write_text_atomic(self.public_key, public_line + "\n", mode=0o644)
        return public_line

    def mark_key_not_installed(self) -> None:
        write_text_atomic(self.key_not_installed_marker, "made by gpuclus preflight; not installed yet\n", mode=0o600)

    def set_known_host_keys(self, entries: dict[str, list[str]]) -> None:
        """Record host keys for addresses, replacing what was known for them.

        ``entries`` maps an address to key lines ("ssh-ed25519 AAAA..."). Lines
        for other hosts are kept. Used when gpuclus learned the keys over a
        trusted channel (the sandbox reads them through the container engine).
        """
        self.private_dir(self.ssh_dir)
        kept = _lines_without(self.known_hosts, {_host_field(address) for address in entries})
        added = [f"{_host_field(address)} {key}" for address, keys in sorted(entries.items()) for key in keys]
        write_text_atomic(self.known_hosts, "".join(f"{line}\n" for line in [*kept, *added]), mode=0o600)

    def knows_host(self, address: str) -> bool:
        """Whether known_hosts holds a key for this address (port 22)."""
        try:
            lines = read_known_hosts_text(self.known_hosts).splitlines()
        except FileNotFoundError:
            return False
        return any(line.split()[:1] == [_host_field(address)] for line in lines)

    def forget_known_hosts(self, addresses: list[str]) -> None:
        if not self.known_hosts.exists():
            return
        kept = _lines_without(self.known_hosts, {_host_field(address) for address in addresses})
        write_text_atomic(self.known_hosts, "".join(f"{line}\n" for line in kept), mode=0o600)


def read_known_hosts_text(path: Path) -> str:
    """A known_hosts file's text, bounded (FileNotFoundError when there is none)."""
    return read_text_file(path, MAX_KNOWN_HOSTS_BYTES, hint=_REPLACED_HINT)


def _host_field(address: str, port: int = 22) -> str:
    # OpenSSH writes non-standard ports as [host]:port; plain host otherwise.
    return address if port == 22 else f"[{address}]:{port}"


def _lines_without(path: Path, hosts: set[str]) -> list[str]:
    """known_hosts lines whose host field is not one of ``hosts`` (blank lines dropped)."""
    try:
        lines = read_known_hosts_text(path).splitlines()
    except FileNotFoundError:
        return []
    return [line for line in lines if line.split() and line.split()[0] not in hosts]
