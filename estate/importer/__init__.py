"""`estate import`: an existing Slurm cluster's configuration files into a spec.

parse reads slurm.conf-style files into numbered lines; mapping turns them into a spec
document; report keeps every line the spec cannot express, with its number and why.
"""
