"""The spec as a run records it: its text with every secret written inline in it masked.

A deploy keeps a copy of the spec it ran (`.gpuclus/runs/<id>/spec.yaml`, 0600) so that a run can be read
back later; the one secret a spec may hold inline, the Alertmanager webhook URL (it often carries a token),
is kept 0600 in `.gpuclus/secrets/` instead and must not stay behind in every run's copy. The value is cut
out where the YAML parser says its scalar starts and ends, so a quoted or escaped URL is masked as surely as
a plain one, and the comments and layout around it stay as written.
"""

from __future__ import annotations

import yaml

from gpuclus.spec.models import ClusterSpec
from gpuclus.yamldoc.findings import Loc

SecretLoc = Loc  # where in the spec a secret is written, as a finding's path
MASK = '"(masked: gpuclus keeps this secret in .gpuclus/secrets/)"'
WEBHOOK_URL_LOC: SecretLoc = ("monitoring", "alert_receiver", "webhook_url")


def inline_secret_locs(spec: ClusterSpec) -> list[SecretLoc]:
    """Where the spec holds a secret written inline (not in a file it names)."""
    receiver = spec.monitoring.alert_receiver
    return [WEBHOOK_URL_LOC] if receiver is not None and receiver.webhook_url is not None else []


def masked_spec_text(text: str, locs: list[SecretLoc]) -> str:
    """``text`` with the scalar at each of ``locs`` replaced by MASK (the text as it is when none is there)."""
    if not locs:
        return text
    root = yaml.compose(text, Loader=yaml.SafeLoader)
    scalars = [scalar for loc in locs if (scalar := _scalar_at(root, loc)) is not None]
    spans = sorted({(scalar.start_mark.index, scalar.end_mark.index) for scalar in scalars}, reverse=True)
    for start, end in spans:  # from the end, so the earlier spans' offsets still hold
        text = text[:start] + MASK + text[end:]
    # The same value written again elsewhere as it is (an old URL kept in a comment) goes too.
    for value in {scalar.value for scalar in scalars if scalar.value}:
        text = text.replace(value, MASK)
    return text


def _scalar_at(node: yaml.Node | None, loc: SecretLoc) -> yaml.ScalarNode | None:
    for part in loc:
        if not isinstance(node, yaml.MappingNode):
            return None
        node = next((value for key, value in node.value if _is_key(key, part)), None)
    return node if isinstance(node, yaml.ScalarNode) else None


def _is_key(key: yaml.Node, part: str | int) -> bool:
    return isinstance(key, yaml.ScalarNode) and key.value == part
