"""What every gpuclus YAML file shares, below both the cluster spec (spec/) and the users file (users/).

The document read with each value's position (document), findings with a code, a path and a hint (findings),
pydantic's errors worded as findings for any root model (schema_findings), what a value may look like
(grammar, patterns), and text edits that keep every other byte (textedit).
"""
