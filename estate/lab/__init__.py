"""The labs: this host's stand-ins for real machines, driven like real ones.

vagrant (systemd containers through Vagrant's docker provider), netns (real Slurm
daemons in network namespaces) and vm (QEMU VMs for kernel NFS) all start from the
rendered lab document and the same pipeline; `estate lab` (cli.py) drives them.
"""
