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
    spans = sorted({span for loc in locs if (span := _scalar_span(root, loc)) is not None}, reverse=True)
    for start, end in spans:  # from the end, so the earlier spans' offsets still hold
        text = text[:start] + MASK + text[end:]
    return text


def _scalar_span(node: yaml.Node | None, loc: SecretLoc) -> tuple[int, int] | None:
    for part in loc:
        if not isinstance(node, yaml.MappingNode):
            return None
        node = next((value for key, value in node.value if _is_key(key, part)), None)
    if not isinstance(node, yaml.ScalarNode):
        return None
    return node.start_mark.index, node.end_mark.index


def _is_key(key: yaml.Node, part: str | int) -> bool:
    return isinstance(key, yaml.ScalarNode) and key.value == part
