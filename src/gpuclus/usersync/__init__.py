"""The users file's side on the cluster: a change applied (`users add`/`remove`), the GPUs in use (`users list`).

It sits above users/ (the file), deploy/ (the users phase) and slurm/ (squeue), which users/ may not import:
deploy renders the users file, so users/ importing deploy/ would close a circle.
"""
