"""Provisioning: inventory from the spec, pyinfra roles applied in phases, the lab driver."""
