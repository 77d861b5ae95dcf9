"""The Pulumi driver: __main__.py builds one EstateDeployment (component.py) from the
stack's spec; plan.py computes its graph without importing Pulumi."""
