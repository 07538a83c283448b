"""`gpuclus plan`: what the next deploy would change, before it changes anything.

It sits above deploy/ (the render, last-applied, the node stamps, a check-mode run) and upgrade/ (whether the next
deploy is a rolling upgrade), which deploy/ may not import: upgrade/ imports deploy/.
"""
